"""Property tests: random broadcast shapes and random small graphs (sized for CI).

``GTAPE_HYPOTHESIS_EXAMPLES`` sets the examples per test; otherwise 25 (derandomized), or 200
under ``HYPOTHESIS_PROFILE=oracle`` (the nox oracle session).
"""

from __future__ import annotations

import os

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, central_fd, host, rel_err, report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

_DEFAULT = "200" if os.environ.get("HYPOTHESIS_PROFILE") == "oracle" else "25"
SETTINGS = settings(max_examples=int(os.environ.get("GTAPE_HYPOTHESIS_EXAMPLES", _DEFAULT)),
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
BINARY = {"add": g.add, "sub": g.sub, "mul": g.mul, "div": g.div}


@SETTINGS
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       op=st.sampled_from(sorted(BINARY)), seed=st.integers(0, 2**32 - 1))
def test_broadcast_gradients(bname, shapes, op, seed):
    rng = np.random.default_rng(seed)
    (sa, sb), out_shape = shapes.input_shapes, shapes.result_shape
    a = np.asarray(rng.normal(size=sa))
    b = np.asarray(rng.uniform(0.5, 2.0, sb) * rng.choice([-1.0, 1.0], sb))
    r = np.asarray(rng.normal(size=out_shape))
    fn = BINARY[op]
    with g.Tape(bname) as tp:
        pa, pb = tp.param(a), tp.param(b)
        tp.backward(g.sum(fn(pa, pb) * r))
        ga, gb = host(tp, tp.grad(pa)), host(tp, tp.grad(pb))
        assert ga.shape == sa and gb.shape == sb
        if op == "add":  # the engine reduces the output-shaped gradient once, with sum_to
            be = tp.backend
            rb = be.asarray(r)
            assert bits_equal(ga, host(tp, be.sum_to(rb, sa)))
            assert bits_equal(gb, host(tp, be.sum_to(rb, sb)))
    with g.Tape(bname) as ft:
        mark = ft.mark()

        def f(xs):
            ft.reset_to(mark)
            return float(host(ft, ft.value(g.sum(fn(ft.const(xs[0]), ft.const(xs[1])) * r))))

        err = max(rel_err(ga, central_fd(f, [a, b], 0)), rel_err(gb, central_fd(f, [a, b], 1)))
    report("hypothesis broadcast FD relative error", f"{op}{sa}{sb}", err)
    assert err < 1e-6


UNARY = [g.tanh, g.sigmoid, g.neg, lambda v: g.exp(g.tanh(v)), lambda v: v * 0.5 + 1.0,
         lambda v: g.sqrt(v * v + 1.0), lambda v: g.softmax(v, axis=1),
         lambda v: g.broadcast_to(g.mean(v, axis=0, keepdims=True), (2, 3)),
         lambda v: g.reshape(g.transpose(g.reshape(v, (3, 2))), (2, 3))]
BIN = [g.add, g.sub, g.mul, lambda a, b: a / (b * b + 1.0),
       lambda a, b: g.matmul(a, g.transpose(b)) @ g.slice(a, 0, 0, 2) * 0.25]
STEP = st.one_of(st.tuples(st.just("u"), st.integers(0, len(UNARY) - 1), st.integers(0, 99)),
                 st.tuples(st.just("b"), st.integers(0, len(BIN) - 1), st.integers(0, 99),
                           st.integers(0, 99)))


def _build(steps, leaves):
    vs = list(leaves)
    for step in steps:
        if step[0] == "u":
            vs.append(UNARY[step[1]](vs[step[2] % len(vs)]))
        else:
            vs.append(BIN[step[1]](vs[step[2] % len(vs)], vs[step[3] % len(vs)]))
    return vs


@SETTINGS
@given(steps=st.lists(STEP, min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))
def test_random_graphs(bname, steps, seed):
    """Random graphs of smooth ops (with fan-out): FD agreement and episode determinism."""
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(2, 3)) for _ in range(3)]
    r = rng.normal(size=(2, 3))
    with g.Tape(bname) as tp:
        ps = [tp.param(xs[0]), tp.param(xs[1])]
        mark = tp.mark()
        grads, vals = [], []
        for _ in range(2):  # two episodes: bitwise identical
            vs = _build(steps, ps + [tp.const(xs[2])])
            loss = g.sum(vs[-1] * r) + g.sum(vs[len(vs) // 2])
            if not loss.requires_grad:  # built from the const alone: backward refuses it
                with pytest.raises(ValueError, match="no parameter reaches the loss"):
                    tp.backward(loss)
                return
            tp.backward(loss)
            grads.append([host(tp, tp.grad(p)) for p in ps])
            vals.append([host(tp, tp.value_at(i)) for i in range(len(tp))])
            tp.reset_to(mark)
        assert all(bits_equal(a, b) for a, b in zip(*grads))
        assert all(bits_equal(a, b) for a, b in zip(*vals))
    with g.Tape(bname) as ft:
        m = ft.mark()

        def f(vals_):
            ft.reset_to(m)
            vs = _build(steps, [ft.const(x) for x in vals_])
            return float(host(ft, ft.value(g.sum(vs[-1] * r) + g.sum(vs[len(vs) // 2]))))

        fds = [central_fd(f, xs, k) for k in range(2)]
        # NOTE: one scale for both params: a parameter whose true gradient is 0 (e.g. through
        # sum(softmax(p)), constant in p) gets FD noise of ~eps*|f|/h, which a per-parameter
        # relative error would call a 100% error. The floor is far above that noise.
        scale = max(max(float(np.max(np.abs(d))) for d in fds), 1e-3 * (1.0 + abs(f(xs))))
        err = max(float(np.max(np.abs(grads[0][k] - fds[k]))) for k in range(2)) / scale
    report("hypothesis random-graph FD relative error", repr(steps), err)
    assert err < 1e-5
