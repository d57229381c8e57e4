"""The dispute protocol end to end on localhost: a trainer on the backend under test (cpu in
the cpu session) records the example task, honest and with each drill; an auditor on numpy
audits it over HTTP; the referee on numpy rules. Every verdict must name the drill's step,
node, op and phase, and every ruling must be right -- also for a lying auditor."""

from __future__ import annotations

import math

import pytest
from gverify import commit, faults, server
from gverify import task as tasks
from gverify import verdict as vfile
from gverify.audit import audit
from gverify.example_task import ExampleTask
from gverify.referee import referee

T, EVERY = 12, 4
TASK = ExampleTask({"steps": T})

DRILLS = {  # name: (drill, expected phase, op as the verdict names it)
    "forward": (faults.Drill("ulp", 7, op="matmul", which=1, phase="forward"), "forward",
                "matmul"),
    "backward": (faults.Drill("ulp", 5, op="tanh", phase="backward"), "backward", "tanh"),
    "update": (faults.Drill("ulp", 8, node=2, phase="update"), "update", "adam"),
    "flip": (faults.Drill("flip", 9, bit=40), "update", "adam"),
}


class _Nodes:
    def forward(self, k, tp, loss):
        self.names = [n.name for n in tp.nodes()]


def node_of(drill: faults.Drill) -> int:
    """The node a drill moves in the example's step graph."""
    if drill.node is not None:
        return drill.node
    s = TASK.session("numpy")
    try:
        probe = _Nodes()
        s.step(probe)
    finally:
        s.close()
    if drill.kind == "flip":
        return probe.names.index("param")
    return [i for i, n in enumerate(probe.names) if n == drill.op][drill.which]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, bname):
    """Run directories recorded on the backend under test: honest, each drill, and a trainer
    that answers inconsistently."""
    root = tmp_path_factory.mktemp("runs")
    out = {"honest": root / "honest"}
    commit.record_run(out["honest"], TASK, bname, EVERY)
    for name, (drill, _, _) in DRILLS.items():
        out[name] = root / name
        commit.record_run(out[name], TASK, bname, EVERY, drill)
    out["inconsistent"] = root / "inconsistent"
    commit.record_run(out["inconsistent"], TASK, bname, EVERY,
                      faults.Drill("inconsistent", 6, op="tanh", phase="forward"))
    return out


def _audit(run_dir, tmp_path, name, **kw):
    with server.Server(run_dir) as srv:
        v, blobs = audit(srv.url, "numpy", timeout=120.0, **kw)
    path = vfile.write(tmp_path / f"{name}.json", v, blobs)
    return v, path


def test_an_honest_trainer_agrees_in_one_query(runs, tmp_path, bname):
    v, path = _audit(runs["honest"], tmp_path, "honest")
    assert v["outcome"] == "agree" and v["range"] == [0, T], v
    assert v["queries"]["total"] == 1 and v["bytes"]["received"] > 0
    assert referee(path)["ruling"] == "trainer"
    with server.Server(runs["honest"]) as srv:  # the trainer's own engine agrees too
        assert audit(srv.url, bname)[0]["outcome"] == "agree"


@pytest.mark.parametrize("name", sorted(DRILLS))
def test_a_cheating_trainer_is_located_and_loses(runs, tmp_path, name):
    drill, phase, op = DRILLS[name]
    v, path = _audit(runs[name], tmp_path, name)
    assert v["outcome"] == "dispute", v.get("reason")
    assert (v["step"], v["phase"], v["node"], v["op"]) == (drill.step, phase, node_of(drill),
                                                           op), v["detail"]
    if phase == "update":
        assert v["entry"] == f"param.{node_of(drill)}"
    assert v["count"] >= 1 and (v["max_ulp"] == 1 if drill.kind == "ulp" else v["max_ulp"] > 1)
    assert v["trainer"]["digest"] != v["auditor"]["digest"]
    bound = math.ceil(math.log2(T)) + 3
    assert v["queries"]["phase1"] <= bound, v["queries"]
    assert v["bytes"]["sent"] > 0 and v["bytes"]["received"] > v["bytes"]["sent"]
    r = referee(path, "numpy")
    assert r["ruling"] == "auditor", r
    assert r["recomputed"].startswith("one ")


@pytest.mark.parametrize("name", sorted(DRILLS))
def test_a_lying_auditor_loses_before_the_referee(runs, tmp_path, name):
    drill, phase, op = DRILLS[name]
    v, path = _audit(runs["honest"], tmp_path, f"liar-{name}", drill=drill)
    assert (v["outcome"], v["step"], v["phase"], v["node"], v["op"]) == (
        "dispute", drill.step, phase, node_of(drill), op), v.get("detail")
    r = referee(path, "numpy")
    assert r["ruling"] == "trainer", r


def test_a_trainer_contradicting_its_commitment_loses_at_once(runs, tmp_path):
    v, path = _audit(runs["inconsistent"], tmp_path, "inconsistent")
    assert (v["outcome"], v["phase"], v["step"]) == ("dispute", "proof", 6), v
    assert v["failure"]["kind"] == "leaf" and v["failure"]["index"] == 6
    assert referee(path)["ruling"] == "auditor"
    # the auditor cannot forge such a failure: with the committed record put back, the
    # referee finds the proof verifies and rules for the trainer
    forged = vfile.read(path)
    forged["failure"]["leaf"] = commit.RunDir(runs["inconsistent"]).records[6]
    fpath = vfile.write(tmp_path / "forged.json", forged, {})
    assert referee(fpath)["ruling"] == "trainer"


def test_a_spot_check_from_a_checkpoint(runs, tmp_path):
    v, _ = _audit(runs["forward"], tmp_path, "spot", start=4, stop=10)
    assert (v["outcome"], v["step"], v["phase"], v["range"]) == ("dispute", 7, "forward",
                                                                 [5, 10])
    v, _ = _audit(runs["forward"], tmp_path, "spot-before", start=0, stop=6)
    assert v["outcome"] == "agree" and v["range"] == [1, 6]


def test_the_tasks_resolve_by_name():
    assert tasks.find("example") is ExampleTask
    with pytest.raises(tasks.TaskError, match="no task 'nope' is installed"):
        tasks.find("nope")
    with pytest.raises(tasks.TaskError, match="unknown config keys \\['bogus'\\]"):
        tasks.make({"task": "example", "config": {"bogus": 1}})
    with pytest.raises(tasks.TaskError, match="config steps is 0"):
        ExampleTask({"steps": 0})


def test_the_commitment_names_the_run_identity(runs):
    com = commit.RunDir(runs["honest"]).commitment
    ident = com["identity"]
    assert (ident["dtype"], ident["inner"], ident["tape_seed"]) == ("float64", "plain", 0)
    assert ident["optimizer"]["kind"] == "adam" and ident["optimizer"]["hyper"]["lr"] == 0.05
    assert com["config_id"] == commit.config_id(com["spec"], ident)
    s = ExampleTask({"steps": 2, "seed": 5, "inner": "fma"}).session("numpy")
    try:
        assert (s.identity()["tape_seed"], s.identity()["inner"]) == (5, "fma")
    finally:
        s.close()
