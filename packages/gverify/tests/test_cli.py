"""The gverify command: exit 0 equal, 1 differing, 2 for input that cannot be judged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gverify import cli
from gverify.example import Config, train
from vutil import Probe


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    honest = Probe(trace_at=6)
    train(Config(), log=d / "a.jsonl", checkpoint_every=4, checkpoint_dir=d / "ck",
          probe=honest)
    train(Config(), log=d / "same.jsonl")
    drill = Probe(6, node=9, phase="backward", trace_at=6)
    train(Config(), log=d / "b.jsonl", probe=drill)
    honest.trace.save(d / "ta.npz")
    drill.trace.save(d / "tb.npz")
    return d


def test_compare_exit_codes(runs, capsys):
    assert cli.main(["compare", str(runs / "a.jsonl"), str(runs / "same.jsonl")]) == 0
    assert "equal: 12 common steps (1..12)" in capsys.readouterr().out
    assert cli.main(["compare", str(runs / "a.jsonl"), str(runs / "b.jsonl")]) == 1
    assert "first differing step: 6" in capsys.readouterr().out
    assert cli.main(["compare", "--json", str(runs / "a.jsonl"), str(runs / "b.jsonl")]) == 1
    assert json.loads(capsys.readouterr().out)["divergence"]["step"] == 6
    cut = runs / "cut.jsonl"
    cut.write_text((runs / "a.jsonl").read_text()[:-5])
    assert cli.main(["compare", str(runs / "a.jsonl"), str(cut)]) == 2
    assert "gverify compare: error: read_log" in capsys.readouterr().err
    assert cli.main(["compare", str(runs / "a.jsonl"), str(runs / "nope.jsonl")]) == 2


def test_locate_exit_codes_and_report(runs, capsys):
    assert cli.main(["locate", str(runs / "ta.npz"), str(runs / "ta.npz")]) == 0
    assert "no node differs" in capsys.readouterr().out
    assert cli.main(["locate", str(runs / "ta.npz"), str(runs / "tb.npz")]) == 1
    out = capsys.readouterr().out
    assert "node 9 (matmul), phase backward" in out and "culprit" in out
    assert cli.main(["locate", "--json", str(runs / "ta.npz"), str(runs / "tb.npz")]) == 1
    assert json.loads(capsys.readouterr().out)["divergence"]["index"] == 9
    assert cli.main(["locate", str(runs / "ta.npz"), str(runs / "a.jsonl")]) == 2


def test_replay_exit_codes(runs, capsys, bname):
    ck = runs / "ck" / "step-00000004"
    assert cli.main(["replay", str(ck), "--steps", "4", "--backend", bname]) == 0
    assert "equal: 4 common steps (5..8)" in capsys.readouterr().out
    assert cli.main(["replay", str(ck), "--steps", "4", "--log", str(runs / "b.jsonl")]) == 1
    assert "first differing step: 6" in capsys.readouterr().out
    assert cli.main(["replay", str(ck), "--steps", "0"]) == 2
    bad = runs / "ck" / "step-00000008" / "manifest.json"
    bad.write_text(bad.read_text().replace('"step": 8', '"step": 7'))
    assert cli.main(["replay", str(bad.parent), "--steps", "2"]) == 2
    assert "damaged" in capsys.readouterr().err
    assert cli.main(["replay", str(ck), "--steps", "2", "--runner", "nosuch.module:f"]) == 2


def test_python_dash_m_gverify_runs(runs, child_env):
    out = subprocess.run([sys.executable, "-m", "gverify", "compare", str(runs / "a.jsonl"),
                          str(runs / "b.jsonl")], capture_output=True, text=True, env=child_env,
                         timeout=60)
    assert out.returncode == 1 and "first differing step: 6" in out.stdout
    usage = subprocess.run([sys.executable, "-m", "gverify"], capture_output=True, text=True,
                           env=child_env, timeout=60)
    assert usage.returncode == 2
