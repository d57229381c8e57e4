"""The rarer disputes, each ruled right: a run committed under another initial state, other
data, a record of another run (rewritten run directories whose proofs verify), and a trainer
whose node trace starts elsewhere, ran another graph, read another parameter or constant, or
ends elsewhere than its records (tampered traces with their own valid roots)."""

from __future__ import annotations

import copy
import json

import pytest
from gverify import canonical, commit, faults, merkle, nodetrace, server
from gverify import verdict as vfile
from gverify.audit import audit
from gverify.example_task import ExampleTask
from gverify.referee import referee

T = 8


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    out = {}
    for name, cfg, drill in (("honest", {}, None), ("seed", {"seed": 1}, None),
                             ("data", {"n": 65}, None),
                             ("drill", {}, faults.Drill("ulp", 5, op="mean", phase="forward"))):
        out[name] = root / name
        commit.record_run(out[name], ExampleTask({"steps": T, **cfg}), "numpy", 4, drill)
    return out


def recommit(src, dst, edit_records=None):
    """Copy run ``src`` to ``dst`` claiming the honest run's spec: records rewritten to the
    honest config id (and ``edit_records``), a new root -- every proof of it verifies."""
    honest = json.loads((src.parent / "honest" / commit.COMMITMENT).read_text())
    recs = [json.loads(x) for x in (src / commit.RECORDS).read_text().splitlines()]
    for r in recs:
        r["config"] = honest["config_id"]
    if edit_records is not None:
        edit_records(recs)
    tree = merkle.Tree([commit.leaf_bytes(r) for r in recs])
    dst.mkdir()
    (dst / commit.RECORDS).write_bytes(b"".join(commit.leaf_bytes(r) + b"\n" for r in recs))
    (dst / commit.TRAINER).write_bytes((src / commit.TRAINER).read_bytes())
    (dst / "checkpoints").symlink_to(src / "checkpoints")  # (inside the test's tmp tree)
    (dst / commit.COMMITMENT).write_text(json.dumps({**honest, "root": tree.root.hex()}))
    return dst


class Confined(commit.RunDir):
    """A RunDir whose checkpoints may be a link to a sibling run, running ``task`` while its
    commitment names another (a test fixture only)."""

    def __init__(self, path, task=None):
        super().__init__(path)
        self.task = task or self.task

    def _path(self, rel: str):
        return (self.root / rel).resolve()


def _rule(run, tmp_path, name):
    with server.Server(run) as srv:
        v, blobs = audit(srv.url, "numpy", timeout=60.0)
    path = vfile.write(tmp_path / f"{name}.json", v, blobs)
    return v, referee(path)


@pytest.mark.parametrize("src, cfg, edit, phase, step", [
    ("seed", {"seed": 1}, None, "init", 0),
    ("data", {"n": 65}, None, "data", 4),  # (the first 64 of 65 rows are the same)
    ("honest", {}, lambda recs: recs[3].update(config="0" * 64), "record", 3),
])
def test_disputes_about_a_steps_inputs(runs, tmp_path, src, cfg, edit, phase, step):
    run = Confined(recommit(runs[src], tmp_path / "run", edit),
                   ExampleTask({"steps": T, **cfg}))
    v, r = _rule(run, tmp_path, phase)
    assert (v["outcome"], v["phase"], v["step"]) == ("dispute", phase, step), v
    assert r["ruling"] == "auditor", r
    if phase == "init":
        assert v["entry"] == "param.0" and v["node"] == 0
    if phase == "data":
        assert v["entry"] == "x" and r["recomputed"] == "the task's batch of step 4"


def _retrace(t: nodetrace.StepLeaves, leaves, graph=None, arrays=None):
    return nodetrace.StepLeaves(t.step, leaves, graph or t.graph, arrays or dict(t.arrays))


def _start(t):
    leaves = copy.deepcopy(t.leaves)
    leaves[0]["state"] = "0" * 64
    return _retrace(t, leaves)


def _graph(t):
    graph = copy.deepcopy(t.graph)
    graph[5]["attrs"]["inner"] = "fma"
    leaves = copy.deepcopy(t.leaves)
    leaves[1]["digest"] = nodetrace.graph_digest(graph)
    return _retrace(t, leaves, graph)


def _leaf_value(op):
    def edit(t):
        i = next(n["index"] for n in t.graph if n["op"] == op)
        j = t.leaf("forward", i)
        arr = t.arrays[j].copy()
        arr.reshape(-1)[0] += 1
        leaves = copy.deepcopy(t.leaves)
        leaves[j]["digest"] = canonical.array_digest(arr)
        return _retrace(t, leaves, arrays={**t.arrays, j: arr})
    return edit


def _honest(t):  # the honest step's trace, whose end is not the drill's record
    return commit.RunDir(t.honest).trace_at(t.step)


@pytest.mark.parametrize("edit, phase, op", [
    (_start, "trace", None), (_graph, "graph", "matmul"), (_leaf_value("param"), "state", "param"),
    (_leaf_value("const"), "data", "const"), (_honest, "trace", None),
])
def test_a_trace_that_contradicts_the_step_loses(runs, tmp_path, edit, phase, op):
    class Tampered(commit.RunDir):
        def trace_at(self, k):
            t = super().trace_at(k)
            t.honest = runs["honest"]
            return edit(t)

    v, r = _rule(Tampered(runs["drill"]), tmp_path, phase)
    assert (v["outcome"], v["phase"], v["step"], v["op"]) == ("dispute", phase, 5, op), v
    assert r["ruling"] == "auditor", r
