"""gverify in the demos: ``gdemos ae --log / --checkpoint-every / --resume`` resume
bit-identically in a new process (tape and replay engines), and rung 6 (``gdemos verify``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gdemos import cli, ladder, rung_verify


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).exists())
    return env


def _gdemos(*args):
    out = subprocess.run([sys.executable, "-m", "gdemos", "ae", "--no-progress", "--no-bars",
                          *map(str, args)], capture_output=True, text=True, env=_env(),
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def _lines(path):
    rows = [json.loads(s) for s in Path(path).read_text().splitlines()[1:]]
    return [(r["step"], r["loss_bits"], r["digest"]) for r in rows]


@pytest.mark.parametrize("engine", ["tape", "replay"])
def test_ae_resumes_bit_identically_in_a_new_process(bname, tmp_path, engine):
    if engine == "replay" and bname not in ("sim", "cpu", "cuda"):
        pytest.skip("the replay engine runs on sim, cpu or cuda (those sessions test it)")
    full = tmp_path / "full"
    _gdemos("--backend", bname, "--engine", engine, "--epochs", "2", "--checkpoint-every", "7",
            "--out", full)
    log = full / "ae_log.jsonl"
    assert sorted(p.name for p in (full / "checkpoints").iterdir()) == [
        "step-00000007", "step-00000014"]
    part = tmp_path / "part"
    _gdemos("--backend", bname, "--engine", engine, "--resume",
            full / "checkpoints" / "step-00000007", "--log", part / "log.jsonl", "--out", part)
    after = [ln for ln in _lines(log) if ln[0] > 7]
    assert _lines(part / "log.jsonl") == after and len(after) == 13
    summary = json.loads((part / "ae_summary.json").read_text())
    assert summary["verify"]["resumed_from"].endswith("step-00000007")


def test_ae_verification_options_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["ae", "--checkpoint-every", "-1", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--checkpoint-every is -1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["ae", "--resume", str(tmp_path / "nope"), "--out", str(tmp_path)])
    assert e.value.code == 2 and "has no manifest.json" in capsys.readouterr().err


def test_rung_6_verify_passes_and_locates_both_drills(bname, tmp_path):
    r = rung_verify.run(tmp_path / "v", bname)
    assert r.passed and r.referee_equal and r.steps == 30
    by_phase = {d["phase"]: d for d in r.drills}
    fwd, bwd = by_phase["forward"], by_phase["backward"]
    assert (fwd["found_step"], fwd["found_node"], fwd["found_op"]) == (17, fwd["node"], "matmul")
    assert (bwd["found_step"], bwd["found_node"], bwd["found_op"]) == (24, bwd["node"], "relu")
    assert fwd["max_ulp"] == 1 and bwd["max_ulp"] == 1
    assert fwd["inputs_agree"] and bwd["inputs_agree"]
    summary = json.loads(r.summary_path.read_text())
    assert summary["passed"] and [s["equal"] for s in summary["referee"]["segments"]] == [True] * 3
    assert r.plot_path.read_bytes()[:4] == b"\x89PNG"
    assert "rung 6 verify" in [name for name, _ in ladder.RUNGS]


def test_gdemos_verify_command(tmp_path, capsys):
    assert cli.main(["verify", "--backend", "numpy", "--out", str(tmp_path), "--no-progress"]) == 0
    assert "rung 6 verify: PASS" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["verify", "--epochs", "2", "--out", str(tmp_path)])
