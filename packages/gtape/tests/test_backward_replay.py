"""Replayed backward passes (kernel backends): the recording of a repeated graph gives the bits
an op-by-op pass gives, and any change of the graph -- shapes, ops, attributes (-0.0 vs 0.0),
a const's buffer, parameters after the loss -- runs op by op again.

The reference is the numpy backend, which never replays. Each episode's gradients of every
node that has one are compared bitwise.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor import testing

RNG = np.random.default_rng(5)
W0 = RNG.standard_normal((4, 3))
B0 = RNG.standard_normal((1, 3))
DATA = {n: RNG.standard_normal((n, 4)) for n in (5, 2)}


def _episode(tp, w, b, kind, n, s):
    """One loss of a small family: kind picks the ops, n the batch, s a scalar attribute."""
    x = tp.const(DATA[n])
    h = x @ w + b
    h = g.relu(h) if kind == "relu" else g.tanh(h)
    return g.sum(h * s) if s is not None else g.mean(h * h)


SCHEDULE = [("relu", 5, None)] * 4 + [("tanh", 5, None), ("relu", 5, None), ("relu", 5, None),
                                      ("relu", 2, None), ("relu", 2, None), ("relu", 2, None),
                                      ("relu", 5, 2.0), ("relu", 5, 2.0), ("relu", 5, 2.0),
                                      ("relu", 5, -0.0), ("relu", 5, 0.0), ("relu", 5, 0.0),
                                      ("relu", 5, -0.0), ("relu", 5, None)]


def _run(bname, dtype):
    tp = g.Tape(bname, dtype)
    w, b = tp.param(W0), tp.param(B0)
    mark = tp.mark()
    out = []
    for k, (kind, n, s) in enumerate(SCHEDULE):
        loss = _episode(tp, w, b, kind, n, s)
        if k == 6:
            late = tp.param(np.ones(2))  # a parameter after the loss: its gradient is zero
        tp.backward(loss)
        grads = [tp.backend.to_numpy(tp.grad_at(i)) for i in range(len(tp))
                 if tp.grad_at(i) is not None]
        out.append((grads, dict(tp.stats())))
        if k == 6:
            assert np.all(tp.backend.to_numpy(tp.grad(late)) == 0)
        tp.reset_to(mark)
        tp.set_value(w, tp.value(w) * 0.5 + 0.1)  # values change in place between episodes
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_replayed_passes_are_bit_equal_to_numpy(bname, dtype):
    want = _run("numpy", dtype)
    got = _run(bname, dtype)
    for k, ((gg, gs), (wg, ws)) in enumerate(zip(got, want)):
        assert len(gg) == len(wg), f"episode {k}: gradients stored differ"
        for a, b in zip(gg, wg):
            assert testing.bits_equal(a, b), f"episode {k} {SCHEDULE[k]}: gradient bits differ"
        assert gs == ws, f"episode {k}: stats differ"


def test_the_third_identical_pass_is_one_native_call(monkeypatch):
    testing.require_backend("cpu")
    tp = g.Tape("cpu")
    w, b = tp.param(W0), tp.param(B0)
    mark = tp.mark()
    module = tp.backend.module
    calls = []
    real = module.run
    monkeypatch.setattr(module, "run", lambda *a: calls.append(a) or real(*a))
    counts = []
    for _ in range(4):
        loss = _episode(tp, w, b, "relu", 5, None)
        calls.clear()
        tp.backward(loss)
        counts.append(len(calls))
        tp.reset_to(mark)
    assert counts[0] > 10  # op by op (the second pass runs op by op through the recorder)
    assert counts[2:] == [1, 1]  # replayed: one native call per pass


def _fresh_const_run(bname):
    """Each episode's input arrives as a float32 array of the backend on a float64 tape: the
    const is converted into a FRESH buffer (same shape) every episode."""
    tp = g.Tape(bname)
    be = tp.backend
    w = tp.param(W0)
    mark = tp.mark()
    out = []
    for k in range(5):
        x = tp.const(be.asarray(DATA[5] * (k + 1), dtype="float32"))
        tp.backward(g.sum(g.tanh(x @ w)))
        out.append(be.to_numpy(tp.grad(w)))
        tp.reset_to(mark)
    return out


def test_a_fresh_input_buffer_is_read_not_the_recorded_one(bname):
    for k, (a, b) in enumerate(zip(_fresh_const_run(bname), _fresh_const_run("numpy"))):
        assert testing.bits_equal(a, b), f"episode {k}: the gradient read a stale input"


def _shared_episode(tp, ps, x0):
    """w1 + w2 share one gradient array (add's vjp hands both the add node's own gradient);
    v is used twice (its total is an accumulation); u's is a matmul's output; b's a sum_to;
    c's total is the stored gradient of c + 1 (a node of its own)."""
    w1, w2, v, u, b, c = ps
    x = tp.const(x0)
    h = g.tanh(x @ (w1 + w2)) * v + v
    return g.mean((h @ u + b) ** 2) + g.sum(g.tanh(x @ (c + tp.const(np.ones((4, 2))))))


def _shared_params(tp):
    rng = np.random.default_rng(12)
    shapes = [(4, 3), (4, 3), (1, 3), (3, 2), (1, 2), (4, 2)]
    return [tp.param(rng.standard_normal(s)) for s in shapes]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_shared_and_stored_gradients_keep_their_copies(bname, dtype):
    """Replayed passes where some parameter totals are computed by one launch nobody else
    holds (written into the parameter's buffer directly) and some are shared or stored as a
    node's gradient (copied): every stored gradient bit-equal to numpy's, episode by episode,
    as the values change in place."""
    runs = {}
    for name in ("numpy", bname):
        tp = g.Tape(name, dtype)
        ps = _shared_params(tp)
        mark = tp.mark()
        out = []
        for k in range(6):
            tp.backward(_shared_episode(tp, ps, DATA[5] * (1 + k)))
            out.append([tp.backend.to_numpy(tp.grad_at(i)) for i in range(len(tp))
                        if tp.grad_at(i) is not None])
            tp.reset_to(mark)
            for p in ps:
                tp.set_value(p, tp.value(p) * 0.75 - 0.05)
        runs[name] = out
    for k, (got, want) in enumerate(zip(runs[bname], runs["numpy"])):
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            assert testing.bits_equal(a, b), f"episode {k}, gradient {i}"


def test_a_trace_copies_only_shared_parameter_gradients(bname):
    """In a traced backward the parameters whose total nobody else holds get no copy launch
    (the launch computing it writes their buffer); w1 and w2, whose total is the add node's
    stored gradient, and c, whose total is c + 1's, are copied; the traced gradients equal
    the tape's."""
    from gtape.trace import trace

    name = bname if bname != "numpy" else "sim"
    tp = g.Tape("numpy")
    ps = _shared_params(tp)
    loss = _shared_episode(tp, ps, DATA[5])
    t = trace(tp, loss, name)
    copies = [x for x in t.backward if x.kernel.name.startswith("k_copy")]
    dsts = {id(x.args[1]) for x in copies}
    assert {i for i in t.params if id(t.grads[i]) in dsts} == {ps[0].index, ps[1].index,
                                                                ps[5].index}
    tp.backward(loss)
    for p in ps:
        assert testing.bits_equal(t.grad(p.index), tp.backend.to_numpy(tp.grad(p)))
