"""Triple-double building blocks of the accurate paths (relative error below 2^-138).

Plain Python over scalar-language values (see ``gtensor.scalar.multi``), inlined into the
cold functions of ``gtensor.scalar.crmath``; they run only where a fast path cannot decide the
rounding, so they favour simple loops over speed.
"""

from __future__ import annotations

from . import crdata_const as C
from . import multi as M
from .dsl import F64, scalar_fn

LN2 = tuple(C.LN2_TD)
EXP_TAYLOR_TERMS = 18  # |r| <= 2^-5.5 after the reduction: r^19/19! < 2^-158
EXP_SQUARINGS = 4


def td_exp(m, y0, y1):
    """exp(y0 + y1) = E * 2^k for a double-double argument with |y0| <= 746: (E as a TD in
    [0.7, 1.42], k as a float64 integer). One out-of-line function (``TD_EXP``), shared by
    every accurate path that needs it."""
    e0, e1, e2, k = m.call_multi(TD_EXP, y0, y1)
    return (e0, e1, e2), k


@scalar_fn("gt_td_exp", (F64, F64), (F64, F64, F64, F64), cold=True)
def _td_exp_body(m, y0, y1):
    """exp(y0 + y1) as (E0, E1, E2, k): E a TD in [0.7, 1.42], k a float64 integer.

    k = rint(y0 / ln 2); r = y - k ln2 as a TD (k ln2 from the TD ln 2 by exact products, the
    difference by exact two-sums: absolute error <= 2^-149 |k| + 2^-160); r' = r / 16 (exact);
    exp(r') by its Taylor polynomial nested as 1 + r'(1 + r'/2 (1 + ...)) with 18 terms (the
    remainder under 2^-158), each step a TD product, an exact-remainder division and a TD sum
    (2^-148 each); then four squarings (each doubling the relative error): <= 2^-139.5 in all.
    """
    k = m.rint(y0 * C.INVLN2)
    kl = M.td_mul_d(m, LN2, -k)
    r = M.td_add((y0, y1, y0 * 0.0), kl)
    r = (r[0] * 0.0625, r[1] * 0.0625, r[2] * 0.0625)
    p = M.td_add_d(M.td_div_small(m, r, float(EXP_TAYLOR_TERMS)), 1.0)

    def step(m, j, p0, p1, p2):
        n = m.i2f(EXP_TAYLOR_TERMS - 1 - j)  # n = 17 .. 1
        q = M.td_div_small(m, M.td_mul(m, r, (p0, p1, p2)), n)
        return M.td_add_d(q, 1.0)

    p = m.loop(EXP_TAYLOR_TERMS - 1, step, *p)
    for _ in range(EXP_SQUARINGS):
        p = M.td_mul(m, p, p)
    return (*p, k)


TD_EXP = _td_exp_body


def td_scale(m, t, k):
    """A TD times 2^k for an int64 ``k`` in [-1022, 1023] (exact when the parts stay normal)."""
    s = m.from_bits((k + 1023) << 52)
    return t[0] * s, t[1] * s, t[2] * s
