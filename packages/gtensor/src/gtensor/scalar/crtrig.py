"""sin and cos, correctly rounded in float64 and float32 over the whole domain (Ziv).

Fast path (|x| < 2^20): N = rint(x 128/pi), r = x - N pi/128 as a double-double (pi/128 in
four pieces, the first three of 27 bits so that N P1, N P2, N P3 are exact for N < 2^26;
x - N P1 exact by Sterbenz, the rest by two-sums): |r| <= pi/256, absolute error <= D_ABS =
2^-109.4. With the table sin(j pi/128) (double-doubles, exact 0 and +-1 at multiples of pi/2)
and the angle addition formula,

    sin(x) = sin(N pi/128) C(r) + cos(N pi/128) S(r),  cos(N pi/128) = sin((N + 64) pi/128),

and cos(x) = sin(x + pi/2) is the same with N + 64. S(r) = r (1 + z (-1/6 + ...)) and
C(r) = 1 - z/2 + z^2 (1/24 - ...), z = r^2 split exactly, the low terms as double-doubles.
Where sin(N pi/128) = 0 (x near a multiple of pi for sin) the result is +-S(r) itself, with its
relative accuracy; elsewhere the two terms are at most 3 times the result: relative error <=
EPS = 2^-80.2, plus D_ABS absolute (``tools/gen_crmath_data.py trig``). The rounding test uses
err = EPS |h| + D_ABS (so an x extremely close to a multiple of pi goes to the accurate path).

Second stage (cold), every |x| >= 2^20 and the fast path's failures: the exact reduction below,
then N' = rint(r 128/pi) and r' = r - N' pi/128 (a triple-double, |r'| <= pi/256, absolute
error < 2^-150) through the fast path's table and polynomials, and its rounding test (err =
EPS |h| + 2^-130); only its failures reach the accurate path.

Accurate path (cold): Payne-Hanek reduction in integers: x = M 2^E
(M < 2^53), 2/pi as 26-bit chunks g_i; the 12 chunks that matter (the ones before only add
multiples of 4) multiply M's two 26/27-bit halves exactly in int64 limbs, the limbs are carried,
shifted so that the binary point falls between two limbs, and read as n mod 4 (the quadrant)
and the fraction f in [0, 1); a fraction of 1/2 or more is complemented exactly in the limbs
(n + 1, f - 1 without cancellation); the fraction's limbs are summed into a triple-double (all
of one sign: no cancellation) and multiplied by pi/2: |r| <= pi/4 with relative error
< 2^-150 (the chunks cover 2^-232 absolute). Then sin r and cos r by their Taylor series
(18 terms each, triple-double), the quadrant selecting: relative error < 2^-140.

Decided lanes: sin(x) = x for |x| < 2^-26 (x - x^3/6 rounds to x; +-0 and subnormals kept);
cos(x) = 1 for |x| < 2^-27; +-inf and NaN give NaN.
"""

from __future__ import annotations

from . import crdata_trig as D
from . import multi as M
from .dsl import F32, F64, Table, scalar_fn

FAST_BELOW = 2.0 ** 20
SIN_TINY, COS_TINY = 2.0 ** -26, 2.0 ** -27
PIO4 = 0.7853981633974483  # pi/4 rounded (below pi/4): no reduction in the accurate path
PH_K = 12  # chunks of 2/pi in the product
TAYLOR_TERMS = 18  # the next term under 2^-160 of the result
ROUND_MARGIN = 1.0 + 2.0 ** -20
SIN_TAB = Table("gt_sin_tab", F64, tuple(D.SIN))
PH_TAB = Table("gt_two_over_pi_tab", "i64", tuple(D.TWO_OVER_PI))
PIO2 = tuple(D.PIO2_TD)
MASK = (1 << D.PH_BITS) - 1


# --------------------------------------------------------------------------- fast path
def _reduce(m, x):
    """(N as int64 shifted to be non-negative, r_h, r_l): x = N pi/128 + r, |x| < 2^20."""
    nf = m.rint(x * D.INV_STEP)
    a = x - nf * D.P1  # exact
    s, e1 = M.two_sum(a, -(nf * D.P2))
    s, e2 = M.two_sum(s, -(nf * D.P3))
    rh, rl = M.fast_two_sum(s, (e1 + e2) - nf * D.P4)
    return m.f2i(nf) + (1 << 30), rh, rl  # + 2^30 (a multiple of 256): & on a non-negative


def _sc(m, rh, rl):
    """(S(r), C(r)) as double-doubles for |r| <= pi/256 (r = rh + rl)."""
    zh, zl = M.two_prod(m, rh, rh)
    zl = zl + 2.0 * (rh * rl)
    w = D.S_REST[-1]
    for c in reversed(D.S_REST[:-1]):
        w = m.fma(w, zh, c)
    p, e = M.two_prod(m, zh, w)  # v = S1 + z w as a double-double
    vh, vl = M.fast_two_sum(D.S1[0], p)
    vl = vl + (e + D.S1[1])
    th, tl = M.two_prod(m, zh, vh)  # T = z v
    tl = tl + (zh * vl + zl * vh)
    ph, pe = M.two_prod(m, rh, th)  # S = r + r T
    pe = pe + (rh * tl + rl * th)
    sh, sl = M.fast_two_sum(rh, ph)
    s = M.fast_two_sum(sh, sl + (pe + rl))
    w = D.C_REST[-1]
    for c in reversed(D.C_REST[:-1]):
        w = m.fma(w, zh, c)
    ch, cl = M.fast_two_sum(1.0, zh * -0.5)
    c = M.fast_two_sum(ch, cl + (zl * -0.5 + zh * (zh * w)))
    return s, c


def _fast(m, x, offset, tiny_below, tiny_value):
    """(h, lo, err, decided, value, fast) for float64 x: sin(x + offset pi/128) as a
    double-double for |x| < 2^20 (``fast``), its error bound, and the decided lanes."""
    nan = m.isnan(x)
    a = m.fabs(x)
    inf = a == float("inf")
    tiny = a < tiny_below
    decided = nan | inf | tiny
    fast = a < FAST_BELOW
    xs = m.where(decided | ~fast, 0.5, x)
    n, rh, rl = _reduce(m, xs)
    ja = (n + offset) & 255
    jb = (n + (offset + 64)) & 255
    ta = (m.table(SIN_TAB, 2 * ja), m.table(SIN_TAB, 2 * ja + 1))
    tb = (m.table(SIN_TAB, 2 * jb), m.table(SIN_TAB, 2 * jb + 1))
    s, c = _sc(m, rh, rl)
    h, lo = M.dd_add(M.dd_mul(m, ta, c), M.dd_mul(m, tb, s))
    err = m.fabs(h) * (D.EPS * ROUND_MARGIN) + D.D_ABS
    value = m.where(nan | inf, x - x, tiny_value)
    return h, lo, err, decided, value, fast


# --------------------------------------------------------------------------- float32 first stage
# A float32 result needs ~2^-25 relative: its first stage is the same reduction and angle
# addition in plain double arithmetic (no double-doubles), with the rounding test of
# ``multi.round_d_f32`` against err = |y| EPS32 + ABS32; its failures (about 2^-23 of the
# inputs) take the double-double path above. Error: r = ((x - N P1) - N P2) - N P3 (x - N P1
# and the products exact, two roundings: 2u |r|, u = 2^-53; N P4 dropped: <= 2^-66 absolute
# for |N| < 2^25.4); S(r) = r + r z (-1/6 + z (1/120 - z/5040)) and C(r) = 1 + z (-1/2 +
# z (1/24 + z (-1/720 + z/40320))), z = r^2 (truncations below 2^-69 relative): each within
# 3u; the table's heads within u; y = fma(sin(a), C, sin(b) S) (one product, one fma). Both
# terms are at most 3 |y| (the double-double path's ratio), so |y - sin| <= 16 u |y| = 2^-49
# |y| plus 2^-66; EPS32 and ABS32 double that. Where sin(a) = 0 (x near a multiple of pi for
# sin) y = +-S(r), whose relative error is r's: the absolute term covers it, and inputs too
# close to a multiple of pi fail the test. Every float32 input is checked exhaustively
# (``tests/test_crmath_exhaustive.py``).
EPS32, ABS32 = 2.0 ** -48, 2.0 ** -65
S32 = (D.S1[0], D.S_REST[0], D.S_REST[1])  # -1/6, 1/120, -1/5040
C32 = (-0.5, D.C_REST[0], D.C_REST[1], D.C_REST[2])  # -1/2, 1/24, -1/720, 1/40320


def _fast32(m, x, offset, tiny_below, tiny_value):
    """(y, err, decided, value, fast) for a widened float32 x: sin(x + offset pi/128) in
    double for |x| < 2^20 (``fast``), its error bound, and the decided lanes."""
    nan = m.isnan(x)
    a = m.fabs(x)
    inf = a == float("inf")
    tiny = a < tiny_below
    decided = nan | inf | tiny
    fast = a < FAST_BELOW
    xs = m.where(decided | ~fast, 0.5, x)
    nf = m.rint(xs * D.INV_STEP)
    r = ((xs - nf * D.P1) - nf * D.P2) - nf * D.P3
    n = m.f2i(nf) + (1 << 30)
    sa = m.table(SIN_TAB, 2 * ((n + offset) & 255))
    sb = m.table(SIN_TAB, 2 * ((n + (offset + 64)) & 255))
    z = r * r
    ws = m.fma(m.fma(S32[2], z, S32[1]), z, S32[0])
    sr = m.fma(r * z, ws, r)
    wc = m.fma(m.fma(m.fma(C32[3], z, C32[2]), z, C32[1]), z, C32[0])
    cr = m.fma(z, wc, 1.0)
    y = m.fma(sa, cr, sb * sr)
    err = m.fabs(y) * (EPS32 * ROUND_MARGIN) + ABS32
    value = m.where(nan | inf, x - x, tiny_value)
    return y, err, decided, value, fast


# --------------------------------------------------------------------------- accurate path
def _payne_hanek(m, a):
    """(quadrant n mod 4 as int64, r as a TD) with a = n pi/2 + r, |r| <= pi/4 (a >= 2^-25,
    finite): the integer reduction of the module docstring."""
    b = m.bits(a)
    e = (b >> 52) - 1075
    mant = (b & ((1 << 52) - 1)) | (1 << 52)
    i0 = m.f2i(m.floor(m.i2f(e + 24) / 26.0)) - 1  # >= -3: the table starts with 3 zeros
    sh = e - 26 * (i0 + 1)  # in [-24, 1]
    mh, ml = mant >> 26, mant & MASK
    limbs = {u: mant * 0 for u in range(-4, PH_K)}
    for t in range(PH_K):
        g = m.table(PH_TAB, i0 + (D.PH_ZEROS + t))
        limbs[t] = limbs[t] + ml * g
        limbs[t - 1] = limbs[t - 1] + mh * g

    def carry(limbs):
        for u in range(PH_K - 1, -4, -1):
            limbs[u - 1] = limbs[u - 1] + (limbs[u] >> 26)
            limbs[u] = limbs[u] & MASK
        limbs[-4] = limbs[-4] & MASK  # its carries are multiples of 4 in the integer part
        return limbs

    limbs = carry(limbs)
    limbs = carry({u: v << (sh + 26) for u, v in limbs.items()})
    # fraction f = sum_{u >= 0} limbs[u] 2^(-26 (u+1)); f >= 1/2: use 1 - f, exactly
    half = limbs[0] >= (1 << 25)
    frac = {u: m.where(half, MASK - limbs[u], limbs[u]) for u in range(PH_K)}
    frac[PH_K - 1] = frac[PH_K - 1] + m.where(half, mant * 0 + 1, mant * 0)
    frac[-1] = mant * 0
    for u in range(PH_K - 1, -1, -1):  # the + 1 may carry (into frac[-1] when f was 1/2)
        frac[u - 1] = frac[u - 1] + (frac[u] >> 26)
        frac[u] = frac[u] & MASK
    q = (limbs[-1] + m.where(half, mant * 0 + 1, mant * 0)) & 3
    zero = a * 0.0
    t = (zero, zero, zero)
    for u in range(PH_K - 1, -2, -1):
        t = M.td_add_d(t, m.i2f(frac[u]) * 2.0 ** (-26 * (u + 1)))
    t = tuple(m.where(half, -v, v) for v in t)
    return q, M.td_mul(m, t, PIO2)


def _taylor(m, r, cos):
    """sin r (cos False) or cos r (True) as a TD for |r| <= pi/4 (nested Taylor series)."""
    z = M.td_mul(m, r, r)
    zero = r[0] * 0.0
    one = (zero + 1.0, zero, zero)

    def step(m, i, p0, p1, p2):
        k = m.i2f(TAYLOR_TERMS - i)  # 16 .. 1
        d = (k + k) * (k + k - 1.0) if cos else (k + k) * (k + k + 1.0)
        q = M.td_div_small(m, M.td_mul(m, z, (p0, p1, p2)), d)
        return M.td_add(one, (-q[0], -q[1], -q[2]))

    p = m.loop(TAYLOR_TERMS, step, *one)
    return p if cos else M.td_mul(m, p, r)


@scalar_fn("gt_trig_reduce", (F64,), (F64, F64, F64, F64), cold=True)
def _reduce_fn(m, a):
    """(quadrant as a float64 integer, r0, r1, r2): a = q pi/2 + r, |r| <= pi/4, for any
    finite a >= 0 (no reduction below pi/4, else Payne-Hanek); compiled once."""
    small = a < PIO4
    q, r = _payne_hanek(m, m.where(small, 1.0, a))
    r = tuple(m.where(small, v, w) for v, w in zip((a, a * 0.0, a * 0.0), r))
    return (m.i2f(m.where(small, q * 0, q)), *r)


def _reduce_any(m, a):
    """(quadrant as int64, r as a TD) with a = q pi/2 + r (``_reduce_fn``)."""
    qf, r0, r1, r2 = m.call_multi(_reduce_fn, a)
    return m.f2i(qf), (r0, r1, r2)


@scalar_fn("gt_trig_taylor", (F64, F64, F64), (F64, F64, F64, F64, F64, F64), cold=True)
def _sincos_td(m, r0, r1, r2):
    """(sin r, cos r) as two TDs for |r| <= pi/4 (compiled once)."""
    r = (r0, r1, r2)
    return (*_taylor(m, r, False), *_taylor(m, r, True))


def _big_dd(m, x, offset):
    """sin(x + offset pi/128) as (h, lo) for any finite x, by the exact reduction then the fast
    path's table and polynomials: |x| = (64 q + N) pi/128 + r', r' = r - N pi/128 (a TD, then
    its head as a double-double: absolute error < 2^-150), |r'| <= pi/256."""
    a = m.fabs(x)
    q, r = _reduce_any(m, a)
    nf = m.rint(r[0] * D.INV_STEP)  # in [-32, 32]
    nr = M.td_mul_d(m, tuple(D.PI128_TD), -nf)
    r2 = M.td_add(r, nr)
    rh, rl = M.fast_two_sum(r2[0], r2[1] + r2[2])
    n = (q << 6) + m.f2i(nf) + (1 << 30)  # non-negative: & below
    ja = (n + offset) & 255
    jb = (n + (offset + 64)) & 255
    ta = (m.table(SIN_TAB, 2 * ja), m.table(SIN_TAB, 2 * ja + 1))
    tb = (m.table(SIN_TAB, 2 * jb), m.table(SIN_TAB, 2 * jb + 1))
    s, c = _sc(m, rh, rl)
    h, lo = M.dd_add(M.dd_mul(m, ta, c), M.dd_mul(m, tb, s))
    if offset == 0:  # sin is odd
        h, lo = m.where(x < 0.0, -h, h), m.where(x < 0.0, -lo, lo)
    return h, lo, m.fabs(h) * (D.EPS * ROUND_MARGIN) + 2.0 ** -130


def _accurate_td(m, x, quarter):
    """sin(x + quarter pi/2) as a TD for finite x (quarter 0: sin, 1: cos)."""
    a = m.fabs(x)
    q, r = _reduce_any(m, a)
    # sin(x) = sign(x) sin(a); cos(x) = cos(a) = sin(a + pi/2)
    q = (q + quarter) & 3
    sc = m.call_multi(_sincos_td, *r)
    s, c = sc[:3], sc[3:]
    y = tuple(m.where((q & 1) == 1, cv, sv) for sv, cv in zip(s, c))
    neg = (q & 2) == 2
    if quarter == 0:  # sin is odd: the sign of x flips it
        xn = x < 0.0
        neg = (neg & ~xn) | (~neg & xn)
    return tuple(m.where(neg, -v, v) for v in y)


# --------------------------------------------------------------------------- the functions
def _make(name, offset, quarter, tiny_below, tiny_value):
    """The scalar functions of sin (offset 0) or cos (offset 64)."""

    def parts(m, x):
        tv = x if tiny_value is None else m.const(tiny_value, x)
        return _fast(m, x, offset, tiny_below, tv)

    def specials(m, x):
        nan = m.isnan(x)
        a = m.fabs(x)
        inf = a == float("inf")
        tv = x if tiny_value is None else m.const(tiny_value, x)
        return nan | inf | (a < tiny_below), m.where(nan | inf, x - x, tv)

    @scalar_fn(f"gt_{name}_acc_f64", (F64,), F64, cold=True)
    def acc_f64(m, x):
        decided, value = specials(m, x)
        r = M.round_td_f64(m, _accurate_td(m, m.where(decided, 1.0, x), quarter))
        return m.where(decided, value, r)

    @scalar_fn(f"gt_{name}_acc_f32", (F64,), F32, cold=True)
    def acc_f32(m, x):
        decided, value = specials(m, x)
        r = M.round_td_f32(m, _accurate_td(m, m.where(decided, 1.0, x), quarter))
        return m.where(decided, m.to_f32(value), r)

    # the second stage, out of line: any finite x (|x| >= 2^20, or a failed rounding test)
    # by the exact reduction and the fast evaluation, the accurate path behind it
    @scalar_fn(f"gt_{name}_big_f64", (F64,), F64, cold=True)
    def big_f64(m, x):
        decided, value = specials(m, x)
        h, lo, err = _big_dd(m, m.where(decided, 1.0, x), offset)
        r, ok = M.round_dd_f64(h, lo, err)
        return m.rare(ok | decided, m.where(decided, value, r), acc_f64, x)

    @scalar_fn(f"gt_{name}_big_f32", (F64,), F32, cold=True)
    def big_f32(m, x):
        decided, value = specials(m, x)
        h, lo, err = _big_dd(m, m.where(decided, 1.0, x), offset)
        r, ok = M.round_dd_f32(m, h, lo, err)
        return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), acc_f32, x)

    @scalar_fn(f"gt_{name}_f64", (F64,), F64)
    def f64(m, x):
        h, lo, err, decided, value, fast = parts(m, x)
        r, ok = M.round_dd_f64(h, lo, err)
        return m.rare((ok & fast) | decided, m.where(decided, value, r), big_f64, x)

    # float32's double-double stage, out of line: the first stage's failures
    @scalar_fn(f"gt_{name}_dd_f32", (F64,), F32, cold=True)
    def dd_f32(m, x):
        h, lo, err, decided, value, fast = parts(m, x)
        r, ok = M.round_dd_f32(m, h, lo, err)
        return m.rare((ok & fast) | decided, m.where(decided, m.to_f32(value), r), big_f32, x)

    @scalar_fn(f"gt_{name}_f32", (F32,), F32)
    def f32(m, x32):
        x = m.to_f64(x32)
        tv = x if tiny_value is None else m.const(tiny_value, x)
        y, err, decided, value, fast = _fast32(m, x, offset, tiny_below, tv)
        r, ok = M.round_d_f32(m, y, err)
        return m.rare((ok & fast) | decided, m.where(decided, m.to_f32(value), r), dd_f32, x)

    for fn, doc in ((acc_f64, f"{name}(x) for float64 by the accurate path alone"),
                    (acc_f32, f"{name} of a widened float32 by the accurate path alone"),
                    (big_f64, f"{name}(x) for float64 by the exact reduction, then Ziv"),
                    (big_f32, f"{name} of a widened float32 by the exact reduction, then Ziv"),
                    (dd_f32, f"{name} of a widened float32 by the double-double fast path"),
                    (f64, f"{name}(x) for float64, correctly rounded"),
                    (f32, f"{name}(x) for float32, correctly rounded")):
        fn.body.__doc__ = doc
    return parts, f64, f32, acc_f64, acc_f32


_sin_parts, SIN_F64, SIN_F32, sin_acc_f64, sin_acc_f32 = _make("sin", 0, 0, SIN_TINY, None)
_cos_parts, COS_F64, COS_F32, cos_acc_f64, cos_acc_f32 = _make("cos", 64, 1, COS_TINY, 1.0)
ALL = [SIN_F64, SIN_F32, COS_F64, COS_F32]


def _needed(parts, x, f32):
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _, fast = parts(NUMPY, x)
        _, ok = (M.round_dd_f32(NUMPY, h, lo, err) if f32 else M.round_dd_f64(h, lo, err))
    return ~((ok & fast) | decided)


def _fast_dd(parts, x):
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _, fast = parts(NUMPY, x)
    return h, lo, err / np.abs(h), ~decided & fast


class _Fn:
    """The test hooks of one of the two functions (``accurate_needed``, ``fast_dd``)."""

    def __init__(self, parts):
        self._parts = parts

    def accurate_needed(self, x, f32: bool = False):
        """Which float64 elements of ``x`` the accurate path computes (numpy)."""
        return _needed(self._parts, x, f32)

    def fast_dd(self, x):
        """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
        return _fast_dd(self._parts, x)


SIN_HOOKS, COS_HOOKS = _Fn(_sin_parts), _Fn(_cos_parts)
