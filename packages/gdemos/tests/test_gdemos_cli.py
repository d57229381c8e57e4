"""The ``gdemos`` command line: outputs, verdict lines and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gdemos import cli, ladder


def test_ae_writes_summary_and_plot(bname, tmp_path, capsys):
    rc = cli.main(["ae", "--backend", bname, "--epochs", "1", "--out", str(tmp_path),
                   "--no-progress", "--no-bars"])
    assert rc == 0
    summary = json.loads((tmp_path / "ae_summary.json").read_text())
    assert summary["steps"] == 10 and summary["backend"] == bname
    assert summary["initial_mse"] > summary["final_mse"] > 0
    assert (tmp_path / "ae_loss.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "plot:" in out and "ae_loss.png" in out


def test_ae_float32(tmp_path):
    rc = cli.main(["ae", "--dtype", "float32", "--epochs", "1", "--out", str(tmp_path),
                   "--no-progress", "--no-bars"])
    assert rc == 0
    assert json.loads((tmp_path / "ae_summary.json").read_text())["dtype"] == "float32"


def test_bad_arguments_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        cli.main(["ae", "--backend", "tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err
    for argv, message in [(["--epochs", "0"], "--epochs is 0; expected 1 to 10000"),
                          (["--epochs", "100000000000000000000"], "--epochs is 1000"),
                          (["--seed", "-1"], "--seed is -1; expected an int >= 0")]:
        with pytest.raises(SystemExit) as e:
            cli.main(["ae", *argv, "--no-progress"])
        assert e.value.code == 2 and message in capsys.readouterr().err


def test_unwritable_out_is_refused_before_training(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as e:
        cli.main(["ae", "--out", str(blocker / "sub"), "--no-progress"])
    assert e.value.code == 2 and "cannot write there" in capsys.readouterr().err


def test_help_text_names_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["ae", "--help"])
    text = capsys.readouterr().out
    for flag in ("--epochs", "--seed", "--dtype", "--engine", "--backend", "--out"):
        assert flag in text
    assert text.count("default:") >= 6
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "``" not in capsys.readouterr().out  # plain text, not RST


def test_ladder_prints_one_verdict_per_rung_and_fails_on_any_failure(monkeypatch, tmp_path,
                                                                    capsys):
    def good(out, backend, progress):
        return ladder.Verdict("rung A", True, "x 1")

    def bad(out, backend, progress):
        raise RuntimeError("boom")

    monkeypatch.setattr(ladder, "RUNGS", [("rung A", good), ("rung B", bad)])
    assert cli.main(["ladder", "--out", str(tmp_path), "--no-progress"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["PASS rung A: x 1", "FAIL rung B: raised RuntimeError: boom",
                     "ladder: 1/2 rungs passed"]
    monkeypatch.setattr(ladder, "RUNGS", [("rung A", good)])
    assert cli.main(["ladder", "--out", str(tmp_path), "--no-progress"]) == 0


def test_python_dash_m_runs():
    out = subprocess.run([sys.executable, "-m", "gdemos", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "ladder" in out and "ae" in out


def test_progress_off_a_terminal_is_a_line_every_10_epochs(tmp_path, capsys):
    assert cli.main(["ae", "--epochs", "23", "--out", str(tmp_path), "--no-bars"]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("epoch ")]
    assert [ln.split()[1] for ln in lines] == ["10/23", "20/23", "23/23"] and "\r" not in err
    assert "loss" in lines[-1]


def test_step_log_prints_every_10_steps_and_the_last(capsys):
    import sys

    from gdemos import report

    log = report.StepLog(sys.stderr, 25, "lora")
    for _ in range(25):
        log.set_postfix_str("loss 1.0")
        log.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"lora step {k}/25  loss 1.0" for k in (10, 20, 25)]


def test_ladder_verdicts_are_the_last_lines(monkeypatch, tmp_path, capsys):
    import sys

    def noisy(name):
        def run(out, backend, progress):
            print(f"{name} progress", file=sys.stderr)
            print(f"{name} stdout chatter")
            return ladder.Verdict(name, True, "ok")
        return run

    monkeypatch.setattr(ladder, "RUNGS", [("rung A", noisy("rung A")),
                                          ("rung B", noisy("rung B"))])
    assert cli.main(["ladder", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == ["PASS rung A: ok", "PASS rung B: ok", "ladder: 2/2 rungs passed"]
