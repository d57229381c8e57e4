"""expm1, correctly rounded in float64 and float32 (a fast path, a rare accurate path: Ziv).

Fast path (every element): N = rint(x 64/ln2), k = floor(N/64), j = N mod 64, and
r = x - N ln2/64 as a double-double (ln2/64 in three 36-bit pieces: N L_HI and N L_MID are
exact, x - N L_HI exact by Sterbenz, the rest by two-sums; |r| <= ln2/128). Then
e^x = 2^k T_j e^r with T_j = 2^(j/64) (a table of triple-doubles) and

    expm1(x) = A + B,  A = 2^k T_j - 1 (a two-sum: exact),  B = 2^k T_j expm1(r),

computed halved (2^(k-1) T_j - 1/2 and 2^(k-1) T_j expm1(r): k reaches 1024 below the
overflow threshold) and doubled after the rounding (exact),

expm1(r) = r_h (1 + r_h (1/2 + r_h (1/6 + r_h q(r_h)))) + r_l (1 + expm1(r_h)) (Taylor to degree
8, the tail q by fma-Horner, the last three steps in double-double). For x near 0 (N = 0)
A = 0 exactly and the result is expm1(r) itself, so no cancellation; elsewhere |A| and |B| are
at most 2.01 |expm1(x)| (checked over the table), so the double-double's relative error is at
most EPS = 2^-76.8 (``tools/gen_crmath_data.py exp``). The rounding test then decides, as for
erf (``multi.round_dd_f64`` / ``round_dd_f32``).

Decided lanes: |x| < 2^-54: x (expm1(x) = x + x^2/2 rounds to x; +-0 and subnormals kept);
x < -40: -1 (e^x < 2^-57: the result rounds to -1 below -54 ln2 = -37.43); x above
709.782712893384 (where exp overflows): +inf; NaN: NaN.

Accurate path (cold): |x| < 2^-6: the series sum x^n/n! in triple-double (17 terms); else
2 (e^x 2^-1 - 1/2) with e^x by ``accurate.td_exp`` (relative 2^-139.5; the subtraction of 1
loses at most 2^6.1): relative error < 2^-133.
"""

from __future__ import annotations

from . import accurate as A
from . import crdata_exp as D
from . import multi as M
from .dsl import F32, F64, ScalarFn, Table, scalar_fn

TINY = 2.0 ** -54
NEG_SAT = -40.0
OVERFLOW = 709.782712893384  # 0x40862e42fefa39ef: exp (and expm1) overflow above
SERIES_BELOW = 2.0 ** -6
SERIES_TERMS = 17  # (2^-6)^17 / 17! < 2^-150
ROUND_MARGIN = 1.0 + 2.0 ** -20
T_TAB = Table("gt_exp_t_tab", F64, tuple(D.T))


def reduce(m, x):
    """(k as int64, j as int64, r_h, r_l) with x = (64k + j) ln2/64 + r_h + r_l, for
    |x| <= 746 (finite)."""
    nf = m.rint(x * D.INV_STEP)
    a = x - nf * D.L_HI  # exact
    rh, rl = M.two_sum(a, -(nf * D.L_MID))  # nf L_MID is exact
    rl = rl - nf * D.L_LO
    rh, rl = M.fast_two_sum(rh, rl)
    n = m.f2i(nf) + (1 << 20)  # non-negative for the shifts
    return (n >> D.BITS) - (1 << (20 - D.BITS)), n & ((1 << D.BITS) - 1), rh, rl


def expm1_small(m, rh, rl):
    """expm1(r_h + r_l) as a double-double for |r_h| <= ln2/128 (relative error <= EPS_P)."""
    q = D.TAIL[-1]
    for c in reversed(D.TAIL[:-1]):
        q = m.fma(q, rh, c)
    p, e = M.two_prod(m, q, rh)  # 1/6 + r q
    h, lo = M.fast_two_sum(D.C3[0], p)
    lo = lo + (e + D.C3[1])
    zero = rh * 0.0
    h, lo = M.dd_fma(m, (h, lo), rh, (0.5 + zero, zero))
    h, lo = M.dd_fma(m, (h, lo), rh, (1.0 + zero, zero))
    ph, pl = M.dd_mul_d(m, (h, lo), rh)
    # the low part of r: expm1(rh + rl) = expm1(rh) + rl e^rh + O(rl^2)
    return M.fast_two_sum(ph, pl + rl * (1.0 + ph))


def table_dd(m, j):
    """T_j = 2^(j/64) as a double-double (and the triple-double's third part)."""
    return m.table(T_TAB, 3 * j), m.table(T_TAB, 3 * j + 1), m.table(T_TAB, 3 * j + 2)


def _pow2(m, k):
    """2^k for an int64 k in [-1022, 1023]."""
    return m.from_bits((k + 1023) << 52)


def _fast(m, x):
    """(h, lo, err, decided, value) for float64 x: expm1(x) / 2 as a double-double (halved so
    that 2^k T_j stays finite up to the overflow threshold, where k = 1024; the results are
    doubled after rounding, exactly), its error bound, and the decided lanes' values."""
    nan = m.isnan(x)
    tiny = m.fabs(x) < TINY
    sat = x < NEG_SAT
    over = x > OVERFLOW
    decided = nan | tiny | sat | over
    xs = m.where(decided, 0.5, x)
    k, j, rh, rl = reduce(m, xs)
    t0, t1, _ = table_dd(m, j)
    # 2^(k-1), k in [-58, 1024], as two exact factors
    k1 = ((k + 63) >> 1) - 32
    s1, s2 = _pow2(m, k1), _pow2(m, k - 1 - k1)
    th, tl = (t0 * s1) * s2, (t1 * s1) * s2
    ah, al = M.two_sum(th, -0.5)
    al = al + tl
    ph, pl = expm1_small(m, rh, rl)
    bh, bl = M.dd_mul(m, (th, tl), (ph, pl))
    h, lo = M.dd_add((ah, al), (bh, bl))
    err = m.fabs(h) * (D.EPS_EXPM1 * ROUND_MARGIN)
    value = m.where(nan, x + x, m.where(tiny, x, m.where(sat, m.const(-1.0, x),
                                                         float("inf"))))
    return h, lo, err, decided, value  # (h + lo) = expm1(x) / 2


def _accurate_td(m, x):
    """2^-1 expm1(x) as a TD (halved so that 2 * RN(.) covers the overflow edge), for finite
    x with 2^-54 <= |x| and -40 <= x <= 709.79."""
    small = m.fabs(x) < SERIES_BELOW
    xs = m.where(small, 2.0 ** -7, x)
    e, k = A.td_exp(m, xs, xs * 0.0)
    big = A.td_scale(m, e, m.f2i(k) - 1)
    big = M.td_add_d(big, -0.5)
    xt = m.where(small, x, 2.0 ** -7)
    zero = xt * 0.0
    one = (zero + 1.0, zero, zero)
    p = M.td_add_d(M.td_div_small(m, (xt, zero, zero), float(SERIES_TERMS)), 1.0)

    def step(m, i, p0, p1, p2):
        n = m.i2f(SERIES_TERMS - 1 - i)  # 16 .. 1: p = 1 + (x/n) p
        return M.td_add(one, M.td_div_small(m, M.td_mul_d(m, (p0, p1, p2), xt), n))

    p = m.loop(SERIES_TERMS - 1, step, *p)  # p = e^x as 1 + x (1 + x/2 (...))
    ser = M.td_mul_d(m, M.td_add_d(p, -1.0), 0.5)
    return tuple(m.where(small, a, b) for a, b in zip(ser, big))


@scalar_fn("gt_expm1_acc_f64", (F64,), F64, cold=True)
def expm1_acc_f64(m, x):
    """expm1(x) for float64 by the accurate path alone (correctly rounded)."""
    _, _, _, decided, value = _fast(m, x)
    r = M.round_td_f64(m, _accurate_td(m, m.where(decided, 0.5, x))) * 2.0
    return m.where(decided, value, r)


@scalar_fn("gt_expm1_acc_f32", (F64,), F32, cold=True)
def expm1_acc_f32(m, x):
    """expm1 of a widened float32 by the accurate path, rounded once to float32."""
    _, _, _, decided, value = _fast(m, x)
    t = _accurate_td(m, m.where(decided, 0.5, x))
    r = M.round_td_f32(m, (t[0] * 2.0, t[1] * 2.0, t[2] * 2.0))
    return m.where(decided, m.to_f32(value), r)


@scalar_fn("gt_expm1_f64", (F64,), F64)
def expm1_f64(m, x):
    """exp(x) - 1 for float64, correctly rounded (see the module docstring)."""
    h, lo, err, decided, value = _fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare(ok | decided, m.where(decided, value, r * 2.0), expm1_acc_f64, x)


@scalar_fn("gt_expm1_f32", (F32,), F32)
def expm1_f32(m, x32):
    """exp(x) - 1 for float32, correctly rounded (the float64 fast path rounded to float32)."""
    x = m.to_f64(x32)
    h, lo, err, decided, value = _fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, err)
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r * 2.0), expm1_acc_f32, x)


EXPM1_F64: ScalarFn = expm1_f64
EXPM1_F32: ScalarFn = expm1_f32
ALL = [EXPM1_F64, EXPM1_F32]


def accurate_needed(x, f32: bool = False):
    """Which float64 elements of ``x`` the accurate path computes (numpy; tests, the rate)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _ = _fast(NUMPY, x)
        _, ok = (M.round_dd_f32(NUMPY, h, lo, err) if f32 else M.round_dd_f64(h, lo, err))
    return ~(ok | decided)


def fast_dd(x):
    """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, _, decided, _ = _fast(NUMPY, x)
    return 2.0 * h, 2.0 * lo, np.full(x.shape, D.EPS_EXPM1), ~decided
