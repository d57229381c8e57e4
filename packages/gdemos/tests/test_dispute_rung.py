"""``gdemos dispute`` (rung 6b) on a short prefix of rung 8's run, and the CNN as a gverify
task: its steps are rung 8's, and it resumes bit-identically on another engine."""

from __future__ import annotations

import json

import pytest
from gdemos import cli, cnn, ladder, rung_dispute
from gdemos.cnn_task import CNNTask
from gverify import task as tasks

pytest.importorskip("sklearn", reason="rung 8's CNN trains on sklearn's digits")


def test_a_short_dispute_rung_passes(bname, tmp_path):
    """Trainer on the backend under test, auditor and referee on numpy: the honest run
    agrees, the cheat is named (step, node, op, phase) and loses, the liar loses."""
    r = rung_dispute.run(tmp_path, bname, "numpy", steps=6, cheat_step=5, lie_step=3, every=3)
    assert r.passed, r.cases
    honest, cheat, liar = r.cases
    assert (honest["outcome"], honest["queries"], honest["ruling"]) == ("agree", 1, "trainer")
    assert (cheat["step"], cheat["phase"], cheat["op"], cheat["max_ulp"]) == (
        5, "forward", "conv2d", 1.0)
    assert cheat["ruling"] == "auditor" and cheat["recomputed"].startswith("one op: conv2d")
    assert (liar["step"], liar["phase"], liar["ruling"]) == (3, "update", "trainer")
    s = json.loads(r.summary_path.read_text())
    assert s["passed"] and [c["name"] for c in s["cases"]] == [
        "honest trainer", "cheating trainer", "lying auditor"]
    assert r.plot_path.read_bytes()[:4] == b"\x89PNG"
    assert "rung 6b dispute" in [name for name, _ in ladder.RUNGS]


def test_the_cnn_task_is_rung_8s_run_and_resumes_anywhere(bname):
    task = tasks.make({"task": "cnn", "config": {"steps": 4}})
    assert isinstance(task, CNNTask)
    a = task.session(bname)
    for _ in range(4):
        a.step()
    ref = cnn.train(cnn.CNNConfig(backend="numpy", stop=4), digest_at=4)
    assert cnn.digest(a.model) == ref.digests[4]
    b = task.session(bname)
    b.step()
    b.step()
    c = task.session("numpy")
    c.restore(2, b.entries())
    c.step()
    c.step()
    assert c.digest() == a.digest()
    for s in (a, b, c):
        s.close()
    with pytest.raises(tasks.TaskError, match="config steps is 881; the run has 880"):
        CNNTask({"steps": 881})
    with pytest.raises(tasks.TaskError, match="config channels"):
        CNNTask({"channels": [16]})


def test_the_command_exists(capsys):
    with pytest.raises(SystemExit):
        cli.main(["dispute", "--help"])
    assert "rung 6b" in capsys.readouterr().out
