"""A transpose read in place by matmuls (``planner.virtual_transposes`` drops the copy): a
matmul left alone in its segment must still read the source, never the dropped copy's buffer
(written at capture, never again) -- after ``set_input``, the fused loss and gradients equal a
fresh tape's on the new input (issue 24)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference


def _tanh_t(x, ps):
    return g.sum(g.tanh(x @ ps[0]).T @ x)


def _attention(x, ps):
    q, k, v = x @ ps[0], x @ ps[1], x @ ps[2]
    return g.mean(g.softmax(q @ k.T, axis=-1) @ v)


GRAPHS = {"tanh_t": (_tanh_t, 1), "attention": (_attention, 3)}


def _tape(fn, inits, x):
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in inits]
    loss = fn(tp.const(x), ps)
    tp.backward(loss)
    return loss.item(), [np.asarray(tp.grad(p)) for p in ps]


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_fused_transposed_reads_follow_set_input(device, graph, alone):
    fn, n = GRAPHS[graph]
    rng = np.random.default_rng(4)
    inits = [rng.normal(0, 0.5, (3, 4)) if graph == "tanh_t" else rng.normal(0, 0.5, (3, 3))
             for _ in range(n)]
    x0, x1 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in inits]
    x = tp.const(x0)
    fp = fuse(capture(tp, fn(x, ps), backend=device), alone=alone)
    fp.set_input(x, x1)
    fp.forward()
    fp.backward()
    want_loss, want_grads = _tape(fn, inits, x1)
    got = np.array(fp.loss())
    assert bits_equal(got, np.array(want_loss)), f"loss {fp.loss()} vs {want_loss}\n{fp.plan}"
    for k, (p, want) in enumerate(zip(ps, want_grads)):
        assert bits_equal(fp.grad(p), want), f"grad {k}: {first_difference(want, fp.grad(p))}"


def test_attention_trains_like_the_tape(device, alone):
    """One Adam step of the attention block on a new input: the fused program's weights."""
    rng = np.random.default_rng(5)
    inits = [rng.normal(0, 0.5, (3, 3)) for _ in range(3)]
    x0, x1 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in inits]
    x = tp.const(x0)
    fp = fuse(capture(tp, _attention(x, ps), backend=device), alone=alone)
    dev = fp.adam(0.1)
    dev.add(ps)
    fp.set_input(x, x1)
    fp.step(dev)
    ref = g.Tape("numpy")
    rps = [ref.param(a) for a in inits]
    opt = gopt.Adam(ref, 0.1)
    opt.add(rps)
    ref.backward(_attention(ref.const(x1), rps))
    opt.step()
    for k, (p, r) in enumerate(zip(ps, rps)):
        want = np.asarray(r.numpy())
        assert bits_equal(fp.value(p), want), f"W{k}: {first_difference(want, fp.value(p))}"
