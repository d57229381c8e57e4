"""Backward of broadcasting binary ops that reduce several axes, pinned to row-major loops.

The gradient of a broadcast operand is its full-shape contribution (the op's rule applied
element by element) summed once, serially, over every broadcast axis in row-major order.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor.testing import bits_equal, first_difference

DTYPES = ["float64", "float32"]
# (a shape, b shape): b (or a) is broadcast over several axes, adjacent or not, leading or not
PAIRS = [((2, 3, 4, 5), (3, 1, 5)), ((2, 3, 4, 5), (4, 1)), ((2, 3, 4, 5), ()),
         ((1, 3, 1, 5), (2, 1, 4, 1)), ((2, 3, 4, 5), (1, 3, 1, 1))]
# d/da, d/db contributions at full shape, from the incoming gradient G (numpy scalars)
RULES = {
    "add": lambda G, a, b, y: (G, G),
    "sub": lambda G, a, b, y: (G, -G),
    "mul": lambda G, a, b, y: (G * b, G * a),
    "div": lambda G, a, b, y: (G / b, -((G / b) * y)),
}


def data(shape: tuple, dtype: str, seed: int) -> np.ndarray:
    """Seeded values over ~9 binades (order-sensitive sums), away from zero (for div)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape))
    return (x + np.sign(x) * 0.125).astype(dtype)


def loop_sum_to(x: np.ndarray, shape: tuple) -> np.ndarray:
    """Per output slot, the serial sum in row-major order of what broadcasts to it."""
    T = np.dtype(x.dtype).type
    lead = x.ndim - len(shape)
    full = (1,) * lead + tuple(shape)
    out = np.zeros(full, x.dtype)
    seen = np.zeros(full, bool)
    for idx in np.ndindex(x.shape):
        o = tuple(0 if full[d] == 1 else i for d, i in enumerate(idx))
        out[o] = T(x[idx]) if not seen[o] else T(out[o]) + T(x[idx])
        seen[o] = True
    return out.reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(RULES))
@pytest.mark.parametrize("sa,sb", PAIRS, ids=lambda s: "x".join(map(str, s)) or "()")
def test_broadcast_backward_reduces_in_row_major_order(bname, op, sa, sb, dtype):
    seed = len(op) * 101 + sum(sa) * 7 + len(sb)
    a, b = data(sa, dtype, seed), data(sb, dtype, seed + 1)
    out_shape = np.broadcast_shapes(sa, sb)
    G = data(out_shape, dtype, seed + 2)
    with g.Tape(bname, dtype) as tp:
        pa, pb = tp.param(a), tp.param(b)
        y = getattr(g, op)(pa, pb)
        tp.backward(g.sum(g.mul(y, tp.const(G))))  # the gradient reaching y is exactly G
        be = tp.backend
        yv, ga, gb = (be.to_numpy(v) for v in (tp.value(y), tp.grad(pa), tp.grad(pb)))
    T = np.dtype(dtype).type
    A, B = np.broadcast_to(a, out_shape), np.broadcast_to(b, out_shape)
    with np.errstate(all="ignore"):
        full = [np.empty(out_shape, dtype), np.empty(out_shape, dtype)]
        for idx in np.ndindex(out_shape):
            ca, cb = RULES[op](T(G[idx]), T(A[idx]), T(B[idx]), T(yv[idx]))
            full[0][idx], full[1][idx] = ca, cb
    for k, (got, c, shape) in enumerate(((ga, full[0], sa), (gb, full[1], sb))):
        want = loop_sum_to(c, shape) if shape != out_shape else c
        assert bits_equal(want, got), (f"{op} {sa} x {sb} {dtype}: d/d{'ab'[k]}: "
                                       f"{first_difference(want, got)}")
