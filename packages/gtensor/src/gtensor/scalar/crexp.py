"""exp and expm1, correctly rounded in float64 and float32 (a fast path, a rare accurate path:
Ziv). exp's own fast path is described at ``exp_dd`` below; expm1's shares its reduction.

expm1's fast path (every element): N = rint(x 4096/ln2), k = floor(N/4096), i1 = (N >> 6) mod
64, i2 = N mod 64, and r = x - N ln2/4096 as a double-double (ln2/4096 in three 30-bit pieces:
N E_HI and N E_MID are exact for |N| < 2^23, x - N E_HI exact by Sterbenz, the rest by
two-sums; |r| <= ln2/8192). Then e^x = 2^k T e^r with T = 2^(i1/64) 2^(i2/4096) (a
double-double: two tables, their heads' product exact by fma) and

    expm1(x) = A + B,  A = 2^k T - 1 (a two-sum: exact but for T's 2^-104),  B = 2^k T expm1(r),

computed halved (2^(k-1) T - 1/2 and 2^(k-1) T expm1(r): k reaches 1024 below the overflow
threshold) and doubled after the rounding (exact), with

    expm1(r) = r_h + r_h^2/2 + (r_h^3 (1/6 + r_h (1/24 + r_h/120)) + r_l (1 + r_h) + e/2)

(Taylor to degree 5; r_h^2 = s + e exactly by fma, so the first two terms are a double-double
and only terms below 2^-27 |r| are rounded in double). For x near 0 (N = 0) A = 0 exactly
and the result is expm1(r) itself (r = x), so no cancellation; elsewhere |A| and |B| are at
most 2.0001 |expm1(x)| (checked over the table's grid), so the double-double's relative error
is at most EPS_EXPM1 = 2^-75.6 (``tools/gen_crmath_data.py exp``: the truncation and the
coefficients measured at 256 bits with a 25% margin, the roundings counted). The rounding test
then decides, as for erf (``multi.round_dd_f64`` / ``round_dd_f32``).

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


def _pow2(m, k):
    """2^k for an int64 k in [-1022, 1023]."""
    return m.from_bits((k + 1023) << 52)


def expm1_r(m, rh, rl):
    """expm1(r_h + r_l) as a double-double for |r| <= ln2/8192 (relative error <= the
    polynomial part of EPS_EXPM1): r_h + r_h^2/2 (the square exact) + r_h^3 P(r_h) + r_l (1 +
    r_h), Taylor to degree 5."""
    sh, sl = M.two_prod(m, rh, rh)
    p = m.fma(m.fma(rh, D.P[2], D.P[1]), rh, D.P[0])
    low = m.fma(sh, rh * p, m.fma(rl, rh, rl) + sl * 0.5)
    h, lo = M.fast_two_sum(rh, sh * 0.5)
    return h, lo + low


def _fast(m, x):
    """(h, lo, err, decided, value) for float64 x: expm1(x) / 2 as a double-double (halved so
    that 2^k T stays finite up to the overflow threshold, where k = 1024; the results are
    doubled after rounding, exactly), its error bound, and the decided lanes' values."""
    nan = m.isnan(x)
    tiny = m.fabs(x) < TINY
    sat = x < NEG_SAT
    over = x > OVERFLOW
    decided = nan | tiny | sat | over
    k, th, tl, rh, rl = reduce2(m, m.where(decided, 0.5, x))
    s = _pow2(m, k - 1)  # k in [-58, 1024]: 2^(k-1) is a normal double, th s and tl s exact
    th, tl = th * s, tl * s
    ah, al = M.two_sum(th, -0.5)  # A/2 = 2^(k-1) T - 1/2
    al = al + tl
    ph, pl = expm1_r(m, rh, rl)
    bh, bl = M.dd_mul(m, (th, tl), (ph, pl))  # B/2 = 2^(k-1) T expm1(r)
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


@scalar_fn("gt_expm1_td", (F64,), (F64, F64, F64), cold=True)
def expm1_td(m, x):
    """expm1(x) / 2 as a TD (the accurate path's core, compiled once; tanh's too)."""
    return _accurate_td(m, x)


def _specials(m, x):
    """(decided, value) of expm1: the lanes the fast path decides, without computing it."""
    nan = m.isnan(x)
    tiny = m.fabs(x) < TINY
    sat = x < NEG_SAT
    over = x > OVERFLOW
    value = m.where(nan, x + x, m.where(tiny, x, m.where(sat, m.const(-1.0, x),
                                                         float("inf"))))
    return nan | tiny | sat | over, value


@scalar_fn("gt_expm1_acc_f64", (F64,), F64, cold=True)
def expm1_acc_f64(m, x):
    """expm1(x) for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _specials(m, x)
    r = M.round_td_f64(m, m.call_multi(expm1_td, m.where(decided, 0.5, x))) * 2.0
    return m.where(decided, value, r)


@scalar_fn("gt_expm1_acc_f32", (F64,), F32, cold=True)
def expm1_acc_f32(m, x):
    """expm1 of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _specials(m, x)
    t = m.call_multi(expm1_td, m.where(decided, 0.5, x))
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
    h, lo, _, decided, value = _fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, None)  # EPS_EXPM1 < 2^-60: no err check
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


# --------------------------------------------------------------------------- exp
# exp(x), correctly rounded: a leaner fast path with two tables, N = rint(x 4096/ln2),
# x = (4096 k + 64 i1 + i2) ln2/4096 + r, |r| <= ln2/8192 (ln2/4096 in three 30-bit pieces:
# N E_HI and N E_MID exact for |N| < 2^23), e^x = 2^k T[i1] T2[i2] e^r with T[i1] = 2^(i1/64)
# and T2[i2] = 2^(i2/4096) (double-doubles; their product by one exact fma product), and
# e^r = 1 + r_h + (r_l + r_h^2 (1/2 + r_h (1/6 + r_h/24))): |r_h^2 q| < 2^-27, so this double
# part's roundings are ~2^-80 of the result; the Taylor truncation is 2^-74.4. The product
# T e^r is formed as a double-double: relative error <= EPS_EXP = 2^-74.2
# (``tools/gen_crmath_data.py exp``). Results in the subnormal range (x < -708.39) and the
# rounding test's failures go to the accurate path: accurate.td_exp, rounded once (onto the
# subnormal grid exactly where needed).
T2_TAB = Table("gt_exp_t2_tab", F64, tuple(D.T2))
EXP_OVER = OVERFLOW  # exp(x) = +inf above
EXP_UNDER = -745.1332191019411  # 0xc0874910d52d3051: exp(x) rounds to +0 below
EXP_SUB = -708.39  # below: a result in (or next to) the subnormal range: the accurate path


def reduce2(m, x):
    """(k as int64, T = 2^(i1/64) 2^(i2/4096) as a double-double (th, tl), r_h, r_l) with
    x = (4096 k + 64 i1 + i2) ln2/4096 + r_h + r_l, |r| <= ln2/8192, for finite |x| <= 746."""
    nf = m.rint(x * D.INV_STEP2)
    a = x - nf * D.E_HI  # exact
    rh, rl = M.two_sum(a, -(nf * D.E_MID))
    rh, rl = M.fast_two_sum(rh, rl - nf * D.E_LO)
    n = m.f2i(nf) + (1 << 30)  # non-negative for the shifts and masks
    k = (n >> 12) - (1 << 18)
    i1 = (n >> 6) & 63
    i2 = n & 63
    t1h, t1l = m.table(T_TAB, 3 * i1), m.table(T_TAB, 3 * i1 + 1)
    t2h, t2l = m.table(T2_TAB, 2 * i2), m.table(T2_TAB, 2 * i2 + 1)
    th, tl = M.two_prod(m, t1h, t2h)
    tl = m.fma(t1h, t2l, m.fma(t1l, t2h, tl))
    return k, th, tl, rh, rl


def exp_dd(m, x):
    """(h, lo, k as int64): e^x = (h + lo) 2^k, h in [0.7, 1.5), for finite |x| <= 746."""
    k, th, tl, rh, rl = reduce2(m, x)
    q = m.fma(m.fma(rh, D.Q[2], D.Q[1]), rh, D.Q[0])
    pl = m.fma(rh * rh, q, rl)  # e^r - 1 = rh + pl
    uh, ue = M.two_prod(m, th, rh)
    low = m.fma(th, pl, m.fma(tl, rh, ue))
    s, e2 = M.fast_two_sum(th, uh)
    h, lo = M.fast_two_sum(s, e2 + (low + tl))
    return h, lo, k


def _scale(m, y, k):
    """y 2^k for an int64 k in [-1100, 1100] (two factors; exact for normal results)."""
    k1 = ((k + 1100) >> 1) - 550
    return (y * _pow2(m, k1)) * _pow2(m, k - k1)


def _exp_specials(m, x):
    """(decided, value) of exp."""
    nan = m.isnan(x)
    over = x > EXP_OVER
    value = m.where(nan, x + x, m.where(over, float("inf"), m.const(0.0, x)))
    return nan | over | (x < EXP_UNDER), value


def _exp_fast(m, x):
    """(h, lo, k, err, decided, value, sub) for float64 x: e^x = (h + lo) 2^k."""
    decided, value = _exp_specials(m, x)
    h, lo, k = exp_dd(m, m.where(decided, 0.0, x))
    err = h * (D.EPS_EXP * ROUND_MARGIN)
    return h, lo, k, err, decided, value, x < EXP_SUB


def _exp_round_acc(m, x, f32):
    """The accurate e^x: accurate.td_exp, rounded once (float64: onto the subnormal grid
    exactly where the result is below 2^-1022; float32: its grid is normal in float64)."""
    e, kf = A.td_exp(m, x, x * 0.0)
    k = m.f2i(kf)
    if f32:  # float32's range is k in [-150, 128]: clamped beyond (inf, or 0, all the same)
        kc = m.where(k < -1022, k * 0 - 1022, m.where(k > 200, k * 0 + 200, k))
        return M.round_td_f32(m, A.td_scale(m, e, kc))
    normal = _scale(m, M.round_td_f64(m, e), k)
    # subnormal: round e to the grid 2^(-1074 - k) (a power of two), then scale exactly
    ks = m.where(k < -1021, k, k * 0 - 1075)  # the unused lanes get a harmless grid
    sub = _scale(m, _grid(m, e, -1074 - ks), ks)
    return m.where(k < -1021, sub, normal)


def _grid(m, e, ge):
    """multi.grid_round onto the multiples of g = 2^ge, ge an int64 in [-1022, 1023]."""
    g, inv = _pow2(m, ge), _pow2(m, -ge)
    q = m.rint(e[0] * inv) * g
    rh, rl = M.two_sum(e[0] - q, e[1])
    rl = rl + e[2]
    half = 0.5 * g
    odd = (m.f2i(q * inv) & 1) == 1
    up = ((rh - half) + rl > 0.0) | (((rh - half) + rl == 0.0) & odd)
    down = ((rh + half) + rl < 0.0) | (((rh + half) + rl == 0.0) & odd)
    return m.where(up, q + g, m.where(down, q - g, q))


@scalar_fn("gt_exp_acc_f64", (F64,), F64, cold=True)
def exp_acc_f64(m, x):
    """e^x for float64 by the accurate path alone (correctly rounded)."""
    decided, value = _exp_specials(m, x)
    return m.where(decided, value, _exp_round_acc(m, m.where(decided, 0.0, x), False))


@scalar_fn("gt_exp_acc_f32", (F64,), F32, cold=True)
def exp_acc_f32(m, x):
    """e^x of a widened float32 by the accurate path, rounded once to float32."""
    decided, value = _exp_specials(m, x)
    r = _exp_round_acc(m, m.where(decided, 0.0, x), True)
    return m.where(decided, m.to_f32(value), r)


@scalar_fn("gt_exp_f64", (F64,), F64)
def exp_f64(m, x):
    """e^x for float64, correctly rounded."""
    h, lo, k, err, decided, value, sub = _exp_fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    return m.rare((ok & ~sub) | decided, m.where(decided, value, _scale(m, r, k)), exp_acc_f64,
                  x)


def _clamp200(m, k):
    """k clamped to [-200, 200]: float32's range is k in [-150, 128]; beyond, 2^+-200 gives the
    same (inf or 0) rounding."""
    return m.where(k < -200, k * 0 - 200, m.where(k > 200, k * 0 + 200, k))


# float32's double-double stage, out of line: the first stage's failures (below)
@scalar_fn("gt_exp_dd_f32", (F64,), F32, cold=True)
def exp_dd_f32(m, x):
    """e^x of a widened float32 by the double-double fast path, then the accurate path
    (scaled first: float32's subnormals are normal float64 numbers)."""
    h, lo, k, _, decided, value, _ = _exp_fast(m, x)
    r, ok = M.round_dd_f32(m, h * _pow2(m, _clamp200(m, k)), lo, None)  # EPS_EXP < 2^-60
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), exp_acc_f32, x)


# float32's first stage: a float32 result needs ~2^-25 relative, so exp_dd's reduction and
# tables run in plain double arithmetic: r = ((x - N E_HI) - N E_MID) - N E_LO (x - N E_HI and
# N E_MID exact, N E_LO below 2^-56: |r - r*| <= 2u |r| + 2^-107, u = 2^-53), T = T[i1] T2[i2]
# from the tables' heads (within 1.5u), e^r - 1 = r + r^2 (1/2 + r/6) (Taylor truncation
# r^4/24 <= 2^-59, roundings u |q| + 2^-80), y = fma(T, q, T) 2^k (one rounding, an exact
# scaling): |y - e^x| <= (2.5u + 2^-64) |y| < 2^-51 |y|. The rounding test of
# ``multi.round_d_f32`` uses err = EPS32 |y| (8x that); its failures (about 2^-23 of the inputs)
# take the double-double stage above. Every float32 input is checked exhaustively
# (``tests/test_crmath_exhaustive.py``, against mpmath where a midpoint is near).
EPS32 = 2.0 ** -48
SIXTH = 1.0 / 6.0


def fast32(m, x):
    """(y, err, decided, value) for a widened float32 x: e^x in plain double within err, and
    the decided lanes (NaN, overflow, underflow) with their value."""
    decided, value = _exp_specials(m, x)
    xs = m.where(decided, 0.0, x)
    nf = m.rint(xs * D.INV_STEP2)
    r = ((xs - nf * D.E_HI) - nf * D.E_MID) - nf * D.E_LO
    n = m.f2i(nf) + (1 << 30)  # non-negative for the shifts and masks
    k = (n >> 12) - (1 << 18)
    t = m.table(T_TAB, 3 * ((n >> 6) & 63)) * m.table(T2_TAB, 2 * (n & 63))
    q = m.fma(r * r, m.fma(r, SIXTH, 0.5), r)
    y = m.fma(t, q, t) * _pow2(m, _clamp200(m, k))
    return y, m.fabs(y) * EPS32, decided, value


# exp's own float32 first stage, leaner than fast32 (which sigmoid's keeps): one table, 2^(j/64)
# (T's heads: within 2^-53 relative), N = rint(x 64/ln2), r = (x - N L_HI) - N L_LO (ln2/64 as
# 64 E_HI, 30 bits: N L_HI and x - N L_HI exact for |N| < 2^13; L_LO = 64 (E_MID + E_LO)
# rounded once, the fma's rounding and |N| |L_LO - its exact part| < 2^-76 absolute), |r| <=
# ln2/128; e^r - 1 = r + r^2 (1/2 + r (1/6 + r (1/24 + r/120))) (Taylor truncation r^6/720 <=
# 2^-54.7; the roundings of r^2 and of the Horner steps below 2^-60 absolute), y = fma(T, p,
# T) 2^k (one rounding, an exact scaling): |y - e^x| <= (2^-53 + 2^-53 + 2^-54.7 + 2^-59) |y|
# < LEAN_EPS |y| = 2^-51 |y|, under 4 of y's float64 ulps (|y| < 2^(E+1) for an ulp of
# 2^(E-52)). For |x| < 87 the result is a normal float32 and its rounding drops y's 29 low
# mantissa bits exactly: a float32 midpoint lies within that error only if those bits are
# within 4 of 2^28, so the test (within 16: a 4x margin) is two integer comparisons, where
# fast32's takes a dozen operations. x < -104 (e^x < 2^-150: +0, -inf included) and x > 89
# (+inf) are decided; the rest (NaN, subnormal results, the overflow edge, the tested
# midpoints: about 2^-24 of the inputs) take the double-double stage. About half of fast32's
# operations: 98 K normal values on one thread of the Emerald Rapids Xeon, the first stage's
# loop 4.3 -> 1.55 ns a value (both compiled into one program, as the cpu kernels are). Every
# float32 input is checked exhaustively (``tests/test_crmath_exhaustive.py``: all correctly
# rounded, and every one the double-double stage's bits).
LEAN_EPS = 2.0 ** -51
LEAN_LIVE = 87.0  # |x| below: a normal float32 result
LEAN_ZERO = -104.0  # x below: +0
LEAN_INF = 89.0  # x above: +inf
LEAN_HI = 64.0 * D.E_HI  # ln2/64's head (exact scaling of ln2/4096's)
LEAN_LO = 64.0 * (D.E_MID + D.E_LO)
LEAN_INV = D.INV_STEP2 / 64.0  # 64/ln2 (exact scaling)
LEAN_C = (0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0)
MAGIC = 6755399441055744.0  # 1.5 * 2^52: N + MAGIC holds the integer N in its low bits
MAGIC_BITS = 0x4338000000000000
MIDPOINT_ULPS = 16  # lean32's rounding test: within 16 ulps of y (its error: under 4)


def lean32(m, x):
    """(y, ok) for a widened float32 x: e^x in plain double within LEAN_EPS |y| where ok says
    the float32 rounding of y is e^x's (or y is the decided +0 / +inf)."""
    live = m.fabs(x) < LEAN_LIVE
    xs = m.where(live, x, 0.0)
    nf = m.rint(xs * LEAN_INV)
    r = m.fma(nf, -LEAN_LO, xs - nf * LEAN_HI)
    n = m.bits(nf + MAGIC) - (MAGIC_BITS - (1 << 30))  # N + 2^30: non-negative
    t = m.table(T_TAB, 3 * (n & 63))
    q = m.fma(m.fma(m.fma(r, LEAN_C[3], LEAN_C[2]), r, LEAN_C[1]), r, LEAN_C[0])
    y = m.fma(t, m.fma(r * r, q, r), t) * _pow2(m, (n >> 6) - (1 << 24))
    ok = live & M.clear_of_midpoint32(m, y, MIDPOINT_ULPS)
    zero, inf = x < LEAN_ZERO, x > LEAN_INF
    y = m.where(zero, 0.0, m.where(inf, float("inf"), y))
    return y, ok | zero | inf


@scalar_fn("gt_exp_f32", (F32,), F32)
def exp_f32(m, x32):
    """e^x for float32, correctly rounded: the lean plain-double first stage, its failures by
    the double-double stage."""
    x = m.to_f64(x32)
    y, ok = lean32(m, x)
    return m.rare(ok, m.to_f32(y), exp_dd_f32, x)


EXP_F64: ScalarFn = exp_f64
EXP_F32: ScalarFn = exp_f32


class _ExpHooks:
    """exp's test hooks (``accurate_needed``, ``fast_dd``), as crmath.Function reads them."""

    @staticmethod
    def accurate_needed(x, f32: bool = False):
        """Which float64 elements of ``x`` the accurate path computes (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            h, lo, k, err, decided, _, sub = _exp_fast(NUMPY, x)
            if f32:
                kk = np.clip(k, -200, 200)
                _, ok = M.round_dd_f32(NUMPY, h * _pow2(NUMPY, kk), lo, None)
            else:
                _, ok = M.round_dd_f64(h, lo, err)
                ok = ok & ~sub
        return ~(ok | decided)

    @staticmethod
    def fast_dd(x):
        """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
        import numpy as np

        from .dsl import NUMPY

        x = np.asarray(x, dtype=np.float64)
        with np.errstate(all="ignore"):
            h, lo, k, _, decided, _, sub = _exp_fast(NUMPY, x)
            # (where the scaled low part stays normal: below, the check itself would round)
            return (_scale(NUMPY, h, k), _scale(NUMPY, lo, k), np.full(x.shape, D.EPS_EXP),
                    ~decided & ~sub & (k > -960))


EXP_HOOKS = _ExpHooks()
