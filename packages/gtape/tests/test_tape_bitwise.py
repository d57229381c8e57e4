"""Bitwise identities: d/dx sum(x*x) == 2x, forward sums == plain loops in the defined order."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits, bits_equal, host

DTYPES = [np.float64, np.float32]
SPECIALS = [0.0, -0.0, 1.5, -3.25, 5e-324, -1e-310, 1e150, -7.0e-20, 123456.789, np.pi]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_grad_of_sum_of_squares_is_exactly_2x(bname, dtype):
    rng = np.random.default_rng(5)
    x = np.concatenate([np.array(SPECIALS), rng.normal(size=30) * 10.0 ** rng.integers(-8, 8, 30)])
    with g.Tape(bname, dtype=dtype) as tp:
        xv = tp.param(x.reshape(5, 8))
        tp.backward(g.sum(xv * xv))
        xs = host(tp, tp.value(xv))
        assert bits_equal(host(tp, tp.grad(xv)), xs * xs.dtype.type(2))
        assert bits(host(tp, tp.grad(xv)))[0, 1] == bits(np.array(-0.0, dtype))  # -0.0 kept


def _loop_sum(values, dtype):
    acc = None
    for v in values:
        acc = dtype(v) if acc is None else dtype(acc + dtype(v))
    return dtype(0.0) if acc is None else acc


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_forward_sums_equal_plain_loops(bname, dtype):
    rng = np.random.default_rng(6)
    x = (rng.normal(size=(7, 5)) * 10.0 ** rng.integers(-6, 6, (7, 5))).astype(dtype)
    with g.Tape(bname, dtype=dtype) as tp:
        v = tp.const(x)
        total = host(tp, tp.value(g.sum(v)))
        rows = host(tp, tp.value(g.sum(v, axis=1)))
        cols = host(tp, tp.value(g.sum(v, axis=0, keepdims=True)))
        means = host(tp, tp.value(g.mean(v, axis=0)))
        prod = host(tp, tp.value(v @ g.transpose(v)))
    assert bits(total) == bits(np.array(_loop_sum(x.ravel(), dtype)))
    assert bits_equal(rows, np.array([_loop_sum(r, dtype) for r in x], dtype))
    assert bits_equal(cols, np.array([[_loop_sum(c, dtype) for c in x.T]], dtype))
    assert bits_equal(means, np.array([_loop_sum(c, dtype) / dtype(7) for c in x.T], dtype))
    want = np.empty((7, 7), dtype)
    for i in range(7):
        for j in range(7):
            acc = dtype(x[i, 0] * x[j, 0])
            for k in range(1, 5):
                acc = dtype(acc + dtype(x[i, k] * x[j, k]))
            want[i, j] = acc
    assert bits_equal(prod, want)


def test_broadcast_gradient_is_reduced_once_in_row_major_order(bname):
    """d/db sum(r * (a + b)) for b broadcast over rows: the serial column sums of r."""
    rng = np.random.default_rng(7)
    r = rng.normal(size=(6, 4)) * 1e3
    with g.Tape(bname) as tp:
        a = tp.param(rng.normal(size=(6, 4)))
        b = tp.param(rng.normal(size=(4,)))
        tp.backward(g.sum((a + b) * r))
        assert bits_equal(host(tp, tp.grad(b)), np.array([_loop_sum(c, np.float64) for c in r.T]))
        assert bits_equal(host(tp, tp.grad(a)), r)
        assert tp.stats()["reductions"] == 1


def test_fan_out_accumulates_in_reverse_node_order(bname):
    """x used by three consumers: grad = ((c3 + c2) + c1), consumers in descending index order."""
    x0 = np.array([0.1, 1e16, -3.0])
    with g.Tape(bname) as tp:
        x = tp.param(x0)
        y1 = x * 1e-3
        y2 = x * 7.0
        y3 = x * 1e16
        tp.backward(g.sum(y1 + y2 + y3))
        d1, d2, d3 = (np.float64(s) for s in (1e-3, 7.0, 1e16))
        assert bits_equal(host(tp, tp.grad(x)), np.full(3, (d3 + d2) + d1))
        assert tp.stats()["accumulations"] == 2
