"""trace_step and first_divergence: drills on a forward node, a backward node and an optimizer
update at several steps, each located exactly; tape against its captured program; traces of
another graph refused."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gverify import TraceError, compare_logs, first_divergence, load_trace, report, trace_step
from gverify.example import Config, _data, _params, loss_of, train
from vutil import Probe

# the example's nodes: 0-3 params, 4-5 consts, 6 matmul, 7 add, 8 tanh, 9 matmul, 10 add,
# 11 sub, 12 mul, 13 mean (the loss)
OPS = {6: "matmul", 7: "add", 8: "tanh", 9: "matmul", 10: "add", 12: "mul", 13: "mean"}
DRILLS = [(3, 6, "forward"), (7, 8, "forward"), (11, 13, "forward"), (2, 8, "backward"),
          (5, 9, "backward"), (10, 12, "backward"), (4, 0, "update"), (9, 2, "update")]


def _traced(bname, tmp_path, name, k=-1, node=0, phase="forward", state=None):
    p = Probe(k, node, phase, trace_at=k if k > 0 else -1, state=state)
    train(Config(backend=bname), log=tmp_path / f"{name}.jsonl", probe=p)
    return p


@pytest.fixture
def honest(bname, tmp_path):
    log = tmp_path / "honest.jsonl"
    traces = {}

    class All(Probe):
        def backward(self, step, tp, loss):
            self.trace = traces[step] = trace_step(tp, loss)

    train(Config(backend=bname), log=log, probe=All(trace_at=0))

    class Upd(Probe):
        def update(self, step, tp, opt):
            traces[step].add_update(tp, opt)

    train(Config(backend=bname), log=tmp_path / "again.jsonl", probe=Upd())
    return log, traces


@pytest.mark.parametrize("k,node,phase", DRILLS)
def test_a_drill_is_located_at_its_step_node_and_phase(bname, tmp_path, honest, k, node, phase):
    log, traces = honest
    drill = _traced(bname, tmp_path, "drill", k, node, phase)
    step = compare_logs(log, tmp_path / "drill.jsonl")
    assert step is not None and step.step == k
    d = first_divergence(traces[k], drill.trace)
    assert d is not None and (d.index, d.phase) == (node, phase)
    assert d.inputs_agree and d.max_ulp == 1 and d.count >= 1
    if phase == "update":
        assert d.op == "adam" and d.entry == f"param.{node}"
        assert d.count == d.size
    else:
        assert d.op == OPS[node]
    text = report(d, traces[k])
    assert f"node {node} ({d.op}), phase {phase}" in text and "culprit" in text


def test_a_state_drill_names_the_buffer(bname, tmp_path, honest):
    log, traces = honest
    drill = _traced(bname, tmp_path, "st", 6, phase="state", state="v.2")
    assert compare_logs(log, tmp_path / "st.jsonl").step == 6
    d = first_divergence(traces[6], drill.trace)
    assert (d.phase, d.index, d.entry) == ("update", 2, "opt.v.2")


def test_equal_steps_have_no_divergence_and_a_trace_round_trips(bname, tmp_path, honest):
    _, traces = honest
    again = _traced(bname, tmp_path, "again", 4, phase="none")
    assert first_divergence(traces[4], again.trace) is None
    assert "no node differs" in report(None, traces[4])
    path = traces[4].save(tmp_path / "t4.npz")
    t = load_trace(path)
    assert t.value_digests == traces[4].value_digests
    assert [u[:3] for u in t.update] == [u[:3] for u in traces[4].update]
    assert first_divergence(t, again.trace) is None
    assert all(a.tobytes() == b.tobytes() for a, b in zip(t.values, traces[4].values))


def test_digests_only_traces_locate_without_ulps(bname):
    cfg = Config(backend=bname)
    x, y, init, _ = _data(cfg)
    ts = []
    for moved in (False, True):
        tp = g.Tape(bname)
        ps = _params(tp, cfg, np.random.default_rng(3))
        loss = loss_of(ps, tp.const(x[:16]), tp.const(y[:16]))
        if moved:
            from gverify import faults

            faults.perturb(tp, 8, 2, element=5)
        tp.backward(loss)
        ts.append(trace_step(tp, loss, arrays=False))
    d = first_divergence(*ts)
    assert (d.index, d.phase, d.max_ulp, d.count) == (8, "forward", None, None)
    tp = g.Tape(bname)
    ps = _params(tp, cfg, np.random.default_rng(3))
    loss = loss_of(ps, tp.const(x[:16]), tp.const(y[:16]))
    from gverify import faults

    faults.perturb(tp, 8, 2, element=5)
    tp.backward(loss)
    full = trace_step(tp, loss)
    ref = g.Tape(bname)
    ps = _params(ref, cfg, np.random.default_rng(3))
    rl = loss_of(ps, ref.const(x[:16]), ref.const(y[:16]))
    ref.backward(rl)
    d = first_divergence(trace_step(ref, rl), full)
    assert (d.index, d.count, d.max_ulp) == (8, 1, 2)


def test_a_captured_program_traces_like_its_tape(device):
    from ggpu_replay import capture

    cfg = Config()
    x, y, init, _ = _data(cfg)
    tp = g.Tape("numpy")
    ps = _params(tp, cfg, init)
    loss = loss_of(ps, tp.const(x[:16]), tp.const(y[:16]))
    tp.backward(loss)
    t_tape = trace_step(tp, loss)
    prog = capture(tp, loss, backend=device)
    prog.forward()
    prog.backward()
    t_prog = trace_step(prog)
    assert first_divergence(t_tape, t_prog) is None
    assert t_prog.value_digests == t_tape.value_digests
    dopt = prog.adam(lr=cfg.lr)
    dopt.add(ps)
    dopt.step()
    import gopt

    opt = gopt.Adam(tp, lr=cfg.lr)
    opt.add(ps)
    opt.step()
    t_tape.add_update(tp, opt)
    t_prog.add_update(prog, dopt)
    assert first_divergence(t_tape, t_prog) is None
    with pytest.raises(TypeError, match="trace_step: a captured program knows its loss"):
        trace_step(prog, loss)


def test_traces_of_another_graph_or_damaged_files_are_refused(bname, tmp_path):
    tp = g.Tape(bname)
    w = tp.param(np.ones((2, 2)))
    la = g.sum(g.tanh(w))
    tp.backward(la)
    ta = trace_step(tp, la)
    tq = g.Tape(bname)
    w = tq.param(np.ones((2, 2)))
    lb = g.sum(g.exp(w))
    tq.backward(lb)
    tb = trace_step(tq, lb)
    with pytest.raises(TraceError, match="different graphs: node 1 is tanh"):
        first_divergence(ta, tb)
    tr = g.Tape(bname)
    w = tr.param(np.ones((2, 2)))
    lc = g.sum(g.tanh(w) * 2.0)
    tr.backward(lc)
    with pytest.raises(TraceError, match="different graphs"):
        first_divergence(ta, trace_step(tr, lc))
    t32 = g.Tape(bname, "float32")
    w = t32.param(np.ones((2, 2)))
    l32 = g.sum(g.tanh(w))
    t32.backward(l32)
    with pytest.raises(TraceError, match="float64 and float32"):
        first_divergence(ta, trace_step(t32, l32))
    with_update = trace_step(tp, la)
    import gopt

    opt = gopt.SGD(tp, lr=0.1)
    opt.add(tp.var_at(0))
    opt.step()
    with_update.add_update(tp, opt)
    with pytest.raises(TraceError, match="one trace has the optimizer's update"):
        first_divergence(ta, with_update)
    with pytest.raises(TypeError, match="expected two StepTraces"):
        first_divergence(ta, "trace.npz")
    path = ta.save(tmp_path / "a.npz")
    (tmp_path / "junk.npz").write_bytes(path.read_bytes()[:200])
    with pytest.raises(TraceError, match="is not a trace written by StepTrace.save"):
        load_trace(tmp_path / "junk.npz")
    fresh = g.Tape(bname)
    w = fresh.param(np.ones(2))
    lf = g.sum(w)
    with pytest.raises(ValueError, match="call tp.backward\\(loss\\) before trace_step"):
        trace_step(fresh, lf)
    with pytest.raises(TypeError, match="trace_step: loss is"):
        trace_step(fresh, 3.0)
