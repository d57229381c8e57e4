"""Rung 9's GPT as a gverify task: its steps are the rung's (eager engine), it resumes
bit-identically on another engine, and a dispute over it names the cheated attention (the
fused qkv_attention op)."""

from __future__ import annotations

import pytest
from gdemos import gpt
from gdemos.gpt_task import GPTTask
from gverify import commit, faults, server
from gverify import task as tasks
from gverify import verdict as vfile
from gverify.audit import audit
from gverify.referee import referee

TINY = {"size": "tiny", "steps": 4}


def test_the_gpt_task_is_rung_9s_run_and_resumes_anywhere(bname):
    task = tasks.make({"task": "gpt", "config": TINY})
    assert isinstance(task, GPTTask) and task.steps == 4
    a = task.session(bname)
    for _ in range(4):
        a.step()
    ref = gpt.train(gpt.GPTRun(size="tiny", stop=4, engine="tape", backend="numpy",
                               eval_every=0), digest_at=3)
    assert gpt.digest(a.model) == ref.sha256_final
    b = task.session(bname)
    for _ in range(3):
        b.step()
    assert gpt.digest(b.model) == ref.digests[3]
    c = task.session("numpy")  # after step 3 on the backend under test, step 4 on numpy
    c.restore(3, b.entries())
    c.step()
    assert c.digest() == a.digest()
    assert [grp["lr"] for grp in c.opt.param_groups] == [grp["lr"] for grp in a.opt.param_groups]
    for s in (a, b, c):
        s.close()


@pytest.mark.parametrize("config, match", [
    ({"steps": 301}, "config steps is 301; the run has 300"),
    ({"size": "tiny", "total": 10, "steps": 11}, "config steps is 11; the run has 10"),
    ({"size": "huge"}, "config size is 'huge'"),
    ({"betas": [0.9]}, "config betas"),
    ({"betas": [0.9, 1.0]}, "config betas"),
    ({"dropout": 0.95}, "config dropout"),
    ({"batch": 0}, "config batch"),
    ({"text": "x.txt"}, "unknown config keys"),
])
def test_bad_configs_are_refused(config, match):
    with pytest.raises(tasks.TaskError, match=match):
        GPTTask(config)


def test_a_gpt_dispute_names_the_cheated_attention(bname, tmp_path):
    """Trainer on the backend under test, auditor and referee on numpy: the first attention
    (qkv_attention) 1 ulp off at step 3 of 4 is found (step 3, forward, qkv_attention) and the
    referee, recomputing that one op, rules for the auditor; the honest run agrees in one query; an
    auditor lying about step 2's AdamW update (two parameter groups, torch's clipping) loses
    (the referee rebuilds the groups from the committed state)."""
    task = GPTTask(TINY)
    cheat = faults.Drill("ulp", 3, op="qkv_attention", which=0, phase="forward")
    lie = faults.Drill("flip", 2, bit=30)
    out = {}
    for name, drill, lying in (("honest", None, None), ("cheat", cheat, None),
                               ("liar", None, lie)):
        run_dir = tmp_path / ("cheat" if name == "cheat" else "honest")
        if not run_dir.exists():
            commit.record_run(run_dir, task, bname, 2, drill)
        with server.Server(run_dir) as srv:
            v, blobs = audit(srv.url, "numpy", drill=lying, timeout=300.0)
        out[name] = (v, referee(vfile.write(tmp_path / f"{name}.json", v, blobs), "numpy"))
    v, r = out["honest"]
    assert (v["outcome"], v["queries"]["total"]) == ("agree", 1)
    v, r = out["cheat"]
    assert (v["outcome"], v["step"], v["phase"], v["op"]) == ("dispute", 3, "forward",
                                                              "qkv_attention")
    assert r["ruling"] == "auditor" and r["recomputed"].startswith("one op: qkv_attention")
    v, r = out["liar"]
    assert (v["outcome"], v["step"], v["phase"], v["op"]) == ("dispute", 2, "update", "adamw")
    assert r["ruling"] == "trainer", r["reason"]
    assert r["recomputed"] == "one optimizer update (16 parameters)"
