"""erf, correctly rounded in float64 and float32 (a fast path, a rare accurate path: Ziv).

Fast path (every element), a = |x| (erf is odd; the sign is put back exactly):

* R1, 2^-960 <= a < 1/4: erf(a) = a P(a^2), P a degree-8 polynomial; s = a^2 is split
  exactly (s_h + s_l by fma), the tail c3 + c4 s + ... by fma-Horner in double, then
  c2, c1, c0 as double-double Horner steps (the c1 and c0 steps with s_l), then the product
  by a as a double-double.
* R2, 1/4 <= a < THRESHOLD (5.92158...): 182 intervals [i/32, (i+1)/32); on each, a degree-9
  polynomial in t = a - (i + 1/2)/32 (exact: Sterbenz); the tail from t^3 by fma-Horner, the
  coefficients c2, c1, c0 as double-double steps.
* a >= THRESHOLD: erf rounds to 1 (erfc(a) <= 2^-54); +-0 and NaN come out as themselves.

R1 and R2 are one evaluation (``_poly``): R1's coefficients are one more row of R2's table, each
lane reads its own row and runs the steps of its region (the other region's extra terms exact
zeros or selected away), so a lane's double-double is the one its region's own evaluation
gives, at the cost of one polynomial a lane (was both, the lanes being SIMD).

The double-double h + lo has relative error <= EPS (2^-70.0 in R1, 2^-70.2 in R2: the
polynomial's measured approximation error with a 25% margin plus the evaluation's rounding
errors, ``tools/gen_crmath_data.py``). The rounding test (``multi.round_dd_f64`` /
``round_dd_f32``) returns RN(h + lo) when both ends of [h + lo - err, h + lo + err] round alike,
err = EPS |h| (1 + 2^-20); otherwise, and for 0 < a < 2^-960 (results near or in the subnormal
range), the cold accurate path decides: erf(a) = (2/sqrt pi) exp(-a^2) sum_n (2a^2)^n a /
(2n+1)!! (all terms positive: no cancellation), 150 terms in triple-double (enough up to a =
THRESHOLD), exp(-a^2) by ``accurate.td_exp``; total relative error < 2^-135. Tiny a (below
2^-480) use erf(a) = (2/sqrt pi) a in a scaled triple-double and round onto the subnormal grid
exactly (``multi.grid_round``).
"""

from __future__ import annotations

from . import accurate as A
from . import crdata_const as C
from . import crdata_erf as D
from . import multi as M
from .dsl import F32, F64, ScalarFn, Table, scalar_fn

THRESHOLD = D.THRESHOLD
TINY = 2.0 ** -960  # below: the accurate path (products would leave the normal range)
SERIES_TERMS = 150  # sum_n (2a^2)^n a / (2n+1)!!: the remainder under 2^-150 for a <= 5.93
ACC_TINY = 2.0 ** -480  # below: erf(a) = (2/sqrt pi) a to 2^-950 relative
ACC_SCALE = 600  # tiny a scaled by 2^600 in the accurate path
ROUND_MARGIN = 1.0 + 2.0 ** -20  # covers the roundings inside the rounding test's bounds

R1 = D.R1
# R2's rows, then R1's coefficients as one more row (R1_ROW) padded with a zero top
# coefficient: every lane evaluates one polynomial from its own row
R1_ROW = D.R2_COUNT
TAB = Table("gt_erf_tab", F64, (*D.R2, *R1, 0.0))
assert len(R1) + 1 == D.R2_ROW and len(D.R2) == D.R2_COUNT * D.R2_ROW
K_TD = tuple(C.TWO_OVER_SQRTPI_TD)


def _row(m, a, small):
    """(row, a1, t) for a = |x| (decided lanes already replaced): the lane's table row (R1's
    where ``small``, else R2's interval's), R1's argument (a, raised to TINY) and R2's
    t = a - (i + 1/2)/32 (exact: Sterbenz)."""
    a1 = m.where(small, m.where(a < TINY, TINY, a), 0.125)
    a2 = m.where(small, 0.25, a)
    f = m.floor(a2 * float(D.R2_WIDTH))
    t = a2 - (f + 0.5) * (1.0 / D.R2_WIDTH)
    i = m.where(small, float(R1_ROW + D.R2_LO), f)
    base = (m.f2i(i) - D.R2_LO) * D.R2_ROW
    return [m.table(TAB, base + j) for j in range(D.R2_ROW)], a1, t


def _poly(m, a, small):
    """erf(a) as a double-double, 2^-960 <= a < THRESHOLD: R1 (``small``, a < 1/4) a P(s),
    s = a^2 = s_h + s_l exactly (by fma); R2 a polynomial in t. One evaluation for both, in
    z = z_h + z_l (s, or t + 0): the tail from z^3 by fma-Horner on z_h (R1's top coefficient
    a zero: its first step gives c8 exactly), c2 + z q in double-double, then c1 and c0 as
    double-double Horner steps -- R1's (the two-sum of c and the product, its error exact:
    |c| > |product| there, so the same bits as a fast two-sum, no renormalization), R2's
    renormalized (``multi.dd_fma``) -- then R1's product by a. A lane's double-double is the
    one its region's own evaluation gives (the z_l terms vanish in R2): EPS_R1 and EPS_R2
    bound them."""
    row, a1, t = _row(m, a, small)
    zh, zl = M.two_prod(m, a1, a1)
    zh = m.where(small, zh, t)
    zl = m.where(small, zl, 0.0)
    q = row[-1]
    for ck in reversed(row[6:-1]):  # c8 .. c3
        q = m.fma(q, zh, ck)
    p, e = M.two_prod(m, q, zh)  # c2 + z q
    e = m.fma(q, zl, e)
    h, lo = M.fast_two_sum(row[4], p)
    lo = lo + (e + row[5])
    for ch, cl in ((row[2], row[3]), (row[0], row[1])):  # c1 + z (h, lo), c0 + z (h, lo)
        p, e = M.two_prod(m, h, zh)
        e = m.fma(lo, zh, m.fma(h, zl, e))
        s, f = M.two_sum(ch, p)
        lo = f + (e + cl)
        rh, rl = M.fast_two_sum(s, lo)
        h, lo = m.where(small, s, rh), m.where(small, lo, rl)
    p, e = M.two_prod(m, h, a1)  # R1: a (h, lo)
    ph, pl = M.fast_two_sum(p, m.fma(lo, a1, e))
    return m.where(small, ph, h), m.where(small, pl, lo)


def _fast(m, x):
    """(h, lo, err, decided, value) for float64 x: the double-double of erf(|x|), its error
    bound, and the lanes decided without it (NaN, +-0, |x| >= THRESHOLD) with their value."""
    nan = m.isnan(x)
    a = m.fabs(x)
    big = a >= THRESHOLD
    zero = a == 0.0
    small = a < 0.25
    h, lo = _poly(m, m.where(nan | big | zero, 0.5, a), small)
    eps = m.where(small, m.const(D.EPS_R1 * ROUND_MARGIN, h), D.EPS_R2 * ROUND_MARGIN)
    err = m.fabs(h) * eps
    decided = nan | big | zero
    value = m.where(nan, x + x, m.where(zero, x, _signed(m, x, m.const(1.0, x))))
    return h, lo, err, decided, value


def _signed(m, x, r):
    """r with the sign of x (erf is odd; negation is exact)."""
    return m.where(x < 0.0, -r, r)


def _accurate_td(m, a):
    """erf(a) as a TD for 2^-480 <= a <= THRESHOLD (the positive series)."""
    sh, sl = M.two_prod(m, a, a)
    two_s = (sh + sh, sl + sl)
    term = (a, a * 0.0, a * 0.0)

    def step(m, n, t0, t1, t2, s0, s1, s2):
        t = M.td_div_small(m, M.td_mul_dd(m, (t0, t1, t2), two_s), m.i2f(n + n + 3))
        # a term under 2^-170 of the sum no longer counts: an exact zero from then on (the
        # rest would only run into the subnormal range)
        gone = t[0] < s0 * 2.0 ** -170
        t = tuple(m.where(gone, 0.0, v) for v in t)
        return (*t, *M.td_add((s0, s1, s2), t))

    out = m.loop(SERIES_TERMS, step, *term, *term)
    series = out[3:]
    e, k = A.td_exp(m, -sh, -sl)
    y = M.td_mul(m, M.td_mul(m, K_TD, e), series)
    return A.td_scale(m, y, m.f2i(k))


@scalar_fn("gt_erf_td", (F64,), (F64, F64, F64), cold=True)
def _erf_td(m, a):
    """erf(a) as a TD (the accurate path's core, compiled once)."""
    return _accurate_td(m, a)


def _accurate_parts(m, x):
    """(main TD, tiny TD scaled by 2^ACC_SCALE, which) for the accurate paths."""
    a = m.fabs(x)
    bad = m.isnan(x) | (a >= THRESHOLD)
    tiny = a < ACC_TINY
    y = m.call_multi(_erf_td, m.where(bad | tiny, 0.5, a))
    at = m.where(tiny, a, ACC_TINY) * (2.0 ** ACC_SCALE)  # exact
    yt = M.td_mul_d(m, K_TD, at)
    return y, yt, tiny


@scalar_fn("gt_erf_acc_f64", (F64,), F64, cold=True)
def erf_acc_f64(m, x):
    """erf(x) for float64 by the accurate path alone (correctly rounded; see the module)."""
    y, yt, tiny = _accurate_parts(m, x)
    r = M.round_td_f64(m, y)
    down = 2.0 ** -ACC_SCALE
    # tiny: a normal result rounds in the scaled domain and scales back exactly; a subnormal
    # one rounds onto the subnormal grid (2^-1074, scaled) exactly
    normal = yt[0] >= 2.0 ** (-1022 + ACC_SCALE)
    rt = m.where(normal, M.round_td_f64(m, yt), M.grid_round(m, yt, 2.0 ** (-1074 + ACC_SCALE)))
    r = m.where(tiny, rt * down, r)
    a = m.fabs(x)
    r = _signed(m, x, m.where(a >= THRESHOLD, 1.0, r))
    return m.where(m.isnan(x) | (a == 0.0), x + x, r)  # NaN; +-0 + +-0 = +-0


@scalar_fn("gt_erf_acc_f32", (F64,), F32, cold=True)
def erf_acc_f32(m, x):
    """erf of a widened float32 by the accurate path, rounded once to float32."""
    y, _, _ = _accurate_parts(m, x)
    r = M.round_td_f32(m, y)
    a = m.fabs(x)
    r = m.where(a >= THRESHOLD, m.const(1.0, r), r)
    r = m.where(x < 0.0, -r, r)
    return m.where(m.isnan(x) | (a == 0.0), m.to_f32(x + x), r)


@scalar_fn("gt_erf_f64", (F64,), F64)
def erf_f64(m, x):
    """erf(x) for float64, correctly rounded (see the module docstring)."""
    h, lo, err, decided, value = _fast(m, x)
    r, ok = M.round_dd_f64(h, lo, err)
    ok = (ok & (m.fabs(x) >= TINY)) | decided
    r = m.where(decided, value, _signed(m, x, r))
    return m.rare(ok, r, erf_acc_f64, x)


# float32's double-double stage, out of line: the first stage's failures (below)
@scalar_fn("gt_erf_dd_f32", (F64,), F32, cold=True)
def erf_dd_f32(m, x):
    """erf of a widened float32 by the float64 fast path rounded to float32, then the
    accurate path."""
    h, lo, _, decided, value = _fast(m, x)
    r, ok = M.round_dd_f32(m, h, lo, None)  # EPS < 2^-60: no err check
    ok = ok | decided
    r = m.where(decided, m.to_f32(value), m.where(x < 0.0, -r, r))
    return m.rare(ok, r, erf_acc_f32, x)


# float32's first stage: a float32 result needs ~2^-25 relative, so the fast path's polynomials
# run in plain double on the coefficients' heads (Horner by fma: R1's a P(a^2), R2's degree-9
# polynomial in t). Every term after the constant is at most 7% of it (R1: c1 s / c0 < 1/48
# for s < 1/16; R2: |t| <= 1/64 and erf' / erf <= 1.04 at a = 1/4), so each fma step adds at
# most u |y| (u = 2^-53), the dropped low parts of c0, c1, c2 another u, the product by a
# (R1) u/2: |y - erf| <= 5u |y| + the polynomials' 2^-70 < 2^-50 |y|. The rounding test of
# ``multi.round_d_f32`` uses err = EPS32 |y| (16x that); its failures (about 2^-21 of the
# inputs) take the double-double stage above. Every float32 input is checked exhaustively
# (``tests/test_crmath_exhaustive.py``, against mpmath where a midpoint is near).
EPS32 = 2.0 ** -46


def fast32(m, x):
    """(y, err, decided, value) for a widened float32 x: erf(x) in plain double within err,
    and the decided lanes (NaN, +-0, |x| >= THRESHOLD) with their value."""
    nan = m.isnan(x)
    a = m.fabs(x)
    big = a >= THRESHOLD
    zero = a == 0.0
    small = a < 0.25
    decided = nan | big | zero
    value = m.where(nan, x + x, m.where(zero, x, _signed(m, x, m.const(1.0, x))))
    row, a1, t = _row(m, m.where(decided, 0.5, a), small)
    z = m.where(small, a1 * a1, t)
    q = row[-1]  # R1's row: a zero, then c8
    for ck in [*reversed(row[6:-1]), row[4], row[2], row[0]]:  # c8 .. c3, c2, c1, c0's heads
        q = m.fma(q, z, ck)
    y = _signed(m, x, m.where(small, a1 * q, q))
    return y, m.fabs(y) * EPS32, decided, value


@scalar_fn("gt_erf_f32", (F32,), F32)
def erf_f32(m, x32):
    """erf(x) for float32, correctly rounded: the plain-double first stage, its failures by
    the double-double stage."""
    x = m.to_f64(x32)
    y, err, decided, value = fast32(m, x)
    r, ok = M.round_d_f32(m, y, err)
    return m.rare(ok | decided, m.where(decided, m.to_f32(value), r), erf_dd_f32, x)


ERF_F64: ScalarFn = erf_f64
ERF_F32: ScalarFn = erf_f32
ALL = [ERF_F64, ERF_F32]


def accurate_needed(x, f32: bool = False):
    """Which float64 elements of ``x`` the accurate path computes (numpy; for tests and the
    measured rate): the fast path's rounding test fails, or 0 < |x| < 2^-960 (float64)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _ = _fast(NUMPY, x)
        if f32:
            _, ok = M.round_dd_f32(NUMPY, h, lo, err)
        else:
            _, ok = M.round_dd_f64(h, lo, err)
            ok = ok & (np.abs(x) >= TINY)
    return ~(ok | decided)


def fast_dd(x):
    """(h, lo, relative error bound, lanes the bound covers) of the fast path (numpy)."""
    import numpy as np

    from .dsl import NUMPY

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        h, lo, err, decided, _ = _fast(NUMPY, x)
    a = np.abs(x)
    eps = np.where(a < 0.25, D.EPS_R1, D.EPS_R2)
    return h, lo, eps, ~decided & (a >= TINY)
