"""exp, log, expm1, tanh and sigmoid before issue 38 (fdlibm-based, within 0.62-0.83 ulp).

No op uses them any more: the ops exp, log, tanh and sigmoid are the correctly rounded ones of
``gtensor.scalar.crmath`` (issue 38). They stay, under the C names ``gt_<f>_fd_<f64|f32>``, for
the side-by-side benchmark (``benchmarks/bench_cpu_kernels.py --functions``: the new functions'
cost against these), for host-side tables that pinned their bits (gdemos' rotary frequencies)
and for the accuracy history (``benchmarks/results/ulp.md``); their tests pin their bits.

Each function is written once (see :mod:`gtensor.scalar.dsl`) with correctly rounded
``+ - * /`` only (no FMA), integer bit manipulation and ``where`` selections, so the numpy
reference and the emitted CUDA (or the same source compiled for a CPU) agree bit for bit.

The float64 algorithms start from the classic fdlibm ones (Sun Microsystems, ``e_exp.c``,
``e_log.c``, ``s_expm1.c``, ``s_tanh.c``; published error analysis: < 1 ulp for exp, log and
expm1), re-expressed without branches: every lane is computed and the result selected with
``m.where``; wherever a branch of fdlibm was only a shortcut of the general formula the
general formula is used (noted below), and the ``2**k`` scaling is done with exact
power-of-two products instead of editing the exponent field, which also covers subnormal
results and ``k = 1024``. On top of fdlibm:

* exp sums ``1 + r + q`` with error-free transformations (Fast2Sum) into a double-double and
  rounds once at the end, also for subnormal results (max ~0.62 ulp instead of ~0.82);
* tanh uses a fitted odd polynomial for ``|x| < 0.75`` (fdlibm's ``-t/(t+2)`` with
  ``t = expm1(-2|x|)`` reaches ~2 ulp there) and a compensated ``1 - 2/(t+2)`` above;
* sigmoid (not in fdlibm) is ``1/(1+E)`` or ``E/(1+E)``, ``E = exp(-|x|)``, all in
  double-double arithmetic (Dekker products by Veltkamp splitting, since there is no FMA).

Measured maxima on 1e6 inputs each (benchmarks/results/ulp.md): 0.62 (exp), 0.83 (log),
0.79 (expm1), 0.82 (tanh), 0.62 (sigmoid) ulp for float64, 0.5 for every float32 function.

Every constant is written as the IEEE bit pattern fdlibm documents (``_w(hi, lo)`` builds
the double from its two 32-bit words), so there is no decimal-conversion question.

Rules kept for the C side (all lanes are evaluated, so even unselected lanes must have
defined behaviour): ``f2i`` only sees finite, small, integral values (inputs are clamped and
NaN replaced first); integer arithmetic never overflows; ``<<`` only shifts non-negative
values; ``>>`` is only applied to non-negative values.

The float32 functions evaluate the float64 function on the exactly widened argument and
round once to float32: the float64 result is within 1 ulp (float64) of the exact value,
i.e. ~2**-29 float32 ulp, so the float32 result is within 0.5 + 2**-29 float32 ulp
(correctly rounded except in ~2**-29 of the cases).
"""

from __future__ import annotations

import struct

from .dsl import F64, ScalarFn, scalar_fn, widened_f32

INF = float("inf")
NAN = float("nan")


def _w(hi: int, lo: int) -> float:
    """The float64 whose IEEE bit pattern is the two 32-bit words ``hi``, ``lo``."""
    return struct.unpack("<d", struct.pack("<Q", (hi << 32) | lo))[0]


def _pow2(m, k):
    """``2.0**k`` for an int64 ``k`` with ``-1022 <= k <= 1023`` (exact, by construction)."""
    return m.from_bits((k + 1023) << 52)


def _scale(m, y, k):
    """``y * 2**k`` for ``-1100 <= k <= 1100``, with a single rounding.

    ``k = k1 + k2`` with ``k1 = floor(k/2)``; ``y * 2**k1`` is exact (normal range for our
    ``y`` in [0.5, 2]), and the second product rounds at most once (only when the result is
    subnormal, or overflows to inf). ``>>`` is applied to the non-negative ``k + 1100``.
    """
    k1 = ((k + 1100) >> 1) - 550
    k2 = k - k1
    return (y * _pow2(m, k1)) * _pow2(m, k2)


def _scale_dd(m, hi, lo, k):
    """``(hi + lo) * 2**k`` rounded once, for ``hi`` in [0.5, 2], ``|lo| <= 2**-50 |hi|``,
    ``-1100 <= k <= 1024``, also when the result is subnormal.

    S = hi * 2**k1 and L = lo * 2**k1 are exact (k1 = floor(k/2) >= -550 keeps them normal).
    h = S * 2**k2 is exact for a normal result and the correctly rounded S * 2**k2 for a
    subnormal one; its rounding error S - h * 2**-k2 is computed exactly (Sterbenz), the
    tail L added, and the sum scaled back: that product rounds to the fixed subnormal grid
    once, the integer number of grid steps to add to h, and h + it is exact. For a normal
    result (h >= 2**-1022, including overflow to inf) the sum hi + lo is rounded first and
    then scaled exactly, so the tail never goes through the subnormal grid.
    """
    k1 = ((k + 1100) >> 1) - 550
    k2 = k - k1
    up = _pow2(m, k1)
    down = _pow2(m, k2)
    big = hi * up
    h = big * down
    rest = ((big - h * _pow2(m, -k2)) + lo * up) * down
    return m.where(h >= MIN_NORMAL, ((hi + lo) * up) * down, h + rest)


def _fast_two_sum(a, b):
    """``s + e == a + b`` exactly, ``s`` the rounded sum; needs ``|a| >= |b|`` (Dekker)."""
    s = a + b
    return s, b - (s - a)


def _two_sum(a, b):
    """``s + e == a + b`` exactly, ``s`` the rounded sum, any order (Knuth, 6 operations)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    """Veltkamp split ``a = hi + lo`` with 26-bit halves (|a| < 2**995)."""
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    """``p + e == a * b`` exactly (Dekker, no FMA), barring under/overflow."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _exp_dd(m, xs):
    """``exp(xs) = (y_hi + y_lo) * 2**k`` for finite ``-746 <= xs <= 710``, ``y`` in [0.7, 1.42].

    The reduction and the polynomial are fdlibm's (see ``exp_f64``); the pieces are then
    summed with error-free transformations instead of plain additions:
    r = hi - lo loses rc = (hi - r) - lo (exact), and exp(r + rc) = exp(r) (1 + rc), so
    exp(hi - lo) = 1 + r + B with B = q + rc*(1 + r), q = r*c/(2 - c) = exp(r) - 1 - r.
    1 + r is split exactly by Fast2Sum (|r| < 0.35 < 1), and the last addition too; what is
    left is the rounding of q (|q| < 0.066, a few 2**-53 relative, i.e. < ~0.2 ulp of y in the
    worst case), 2**-58 from rounding B + e1, and the polynomial's 2**-59.
    """
    kf = m.rint(xs * INVLN2)
    hi = xs - kf * LN2_HI
    lo = kf * LN2_LO
    r = hi - lo
    rc = (hi - r) - lo
    t = r * r
    c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))))
    q = (r * c) / (2.0 - c)
    b = q + rc * (1.0 + r)
    s1, e1 = _fast_two_sum(1.0, r)
    y_hi, y_lo = _fast_two_sum(s1, b + e1)
    return y_hi, y_lo, m.f2i(kf)


# --------------------------------------------------------------------------- constants
# ln2 split in two (fdlibm): LN2_HI has only 32 significant bits (its low 21 bits are zero),
# so k*LN2_HI is exact for |k| < 2**20; LN2_HI + LN2_LO = ln2 to ~2**-85.
LN2_HI = _w(0x3FE62E42, 0xFEE00000)  # 6.93147180369123816490e-01
LN2_LO = _w(0x3DEA39EF, 0x35793C76)  # 1.90821492927058770002e-10
INVLN2 = _w(0x3FF71547, 0x652B82FE)  # 1.44269504088896338700e+00

# exp: thresholds (fdlibm e_exp.c).
EXP_O_THRESHOLD = _w(0x40862E42, 0xFEFA39EF)  # 7.09782712893383973096e+02: above, exp overflows
EXP_U_THRESHOLD = _w(0xC0874910, 0xD52D3051)  # -7.45133219101941108420e+02: exp(x) < 2**-1075 below
# exp: Remez polynomial for R(r*r) = r*(exp(r)+1)/(exp(r)-1) ~ 2 + P1 r^2 + ... + P5 r^10 on
# |r| <= 0.5 ln2, error < 2**-59 (fdlibm e_exp.c).
P1 = _w(0x3FC55555, 0x5555553E)  # 1.66666666666666019037e-01
P2 = _w(0xBF66C16C, 0x16BEBD93)  # -2.77777777770155933842e-03
P3 = _w(0x3F11566A, 0xAF25DE2C)  # 6.61375632143793436117e-05
P4 = _w(0xBEBBBD41, 0xC5D26BF1)  # -1.65339022054652515390e-06
P5 = _w(0x3E663769, 0x72BEA4D0)  # 4.13813679705723846039e-08

# log: Remez polynomial for R(z) ~ Lg1 s^2 + ... + Lg7 s^14 with s = f/(2+f),
# log(1+f) = 2s + s*R, on [1/sqrt2 - 1, sqrt2 - 1], error < 2**-58.45 (fdlibm e_log.c).
LG1 = _w(0x3FE55555, 0x55555593)  # 6.666666666666735130e-01
LG2 = _w(0x3FD99999, 0x9997FA04)  # 3.999999999940941908e-01
LG3 = _w(0x3FD24924, 0x94229359)  # 2.857142874366239149e-01
LG4 = _w(0x3FCC71C5, 0x1D8E78AF)  # 2.222219843214978396e-01
LG5 = _w(0x3FC74664, 0x96CB03DE)  # 1.818357216161805012e-01
LG6 = _w(0x3FC39A09, 0xD078C69F)  # 1.531383769920937332e-01
LG7 = _w(0x3FC2F112, 0xDF3E5244)  # 1.479819860511658591e-01
TWO54 = _w(0x43500000, 0x00000000)  # 2**54, scales subnormals up
MIN_NORMAL = _w(0x00100000, 0x00000000)  # 2**-1022

# expm1: scaled Remez coefficients of R1(r*r/2) (fdlibm s_expm1.c), error < 2**-61.
Q1 = _w(0xBFA11111, 0x111110F4)  # -3.33333333333331316428e-02
Q2 = _w(0x3F5A01A0, 0x19FE5585)  # 1.58730158725481460165e-03
Q3 = _w(0xBF14CE19, 0x9EAADBB7)  # -7.93650757867487942473e-05
Q4 = _w(0x3ED0CFCA, 0x86E65239)  # 4.00821782732936239552e-06
Q5 = _w(0xBE8AFDB7, 0x6E09C32D)  # -2.01099218183624371326e-07
EXPM1_NEG_SAT = _w(0x4043687A, 0x00000000)  # ~56*ln2 = 38.816...: expm1(x) rounds to -1 below -this
TINY54 = _w(0x3C900000, 0x00000000)  # 2**-54: expm1(x) = x below
# sigmoid(x) is exactly 1 above this: E = exp(-x) < 2**-57, so d_hi = 1, w_lo = -(e_hi + e_lo)
# and q + w_lo = 1 - E(1 + ~2**-56) rounds to 1 (1 - 2**-54 is the midpoint below 1)
SIGMOID_ONE = 40.0


def _live_argument(m, xs, above, below):
    """xs with the lanes whose result is decided (xs > above, xs < below) set to 0.0.

    Those lanes' results are overwritten afterwards (``_decided``); computing on 0.0 keeps a
    large |x| from driving the scaling through subnormal intermediates, each a microcode
    assist on x86 (softmax's masked entries ran ~4x slower).
    """
    return m.where(xs > above, 0.0, m.where(xs < below, 0.0, xs))


def _decided(m, x, res, above, at_above, below):
    """res with the decided lanes overwritten: at_above where x > above, +0 where x < below."""
    res = m.where(x > above, at_above, res)
    return m.where(x < below, 0.0, res)


# --------------------------------------------------------------------------- exp
@scalar_fn("gt_exp_fd_f64", (F64,), F64)
def exp_f64(m, x):
    """exp(x) for float64, < 1 ulp (measured max ~0.6; fdlibm e_exp.c plus a double-double sum).

    1. Reduction (fdlibm): k = rint(x/ln2), r = x - k*ln2 with |r| <= 0.5*ln2 (+ a rounding
       hair), held as hi - lo with hi = x - k*LN2_HI (k*LN2_HI is exact, LN2_HI having 32
       significant bits and |k| <= 1076; the subtraction is exact by Sterbenz, x and
       k*LN2_HI being within a factor 2 for k != 0) and lo = k*LN2_LO, the tail.
    2. Approximation (fdlibm): with c = r - r^2*(P1 + ... + P5 r^8), exp(r) = 1 + r + q,
       q = r*c/(2 - c), the P's a Remez fit with error < 2**-59 on |r| <= 0.5 ln2.
       fdlibm then rounds y = 1 - ((lo - q) - hi) in plain arithmetic (< 1 ulp, ~0.82
       measured); here 1 + (hi - lo) + q is summed with error-free transformations into
       y_hi + y_lo (see ``_exp_dd``), leaving ~2**-56 relative error before the last rounding.
    3. Scaling: exp(x) = (y_hi + y_lo) * 2**k rounded once, also for subnormal results
       (``_scale_dd``).
    Specials: x > 709.78... -> +inf, x < -745.13... -> +0, NaN -> NaN (quiet, x+x), and
    exp(+-0) = exp(subnormal) = 1 come out of the general path.
    """
    nan = m.isnan(x)
    xs = m.where(nan, 0.0, x)
    # decided lanes: +inf above EXP_O_THRESHOLD, +0 below EXP_U_THRESHOLD; the rest keep k
    # in [-1075, 1024]
    y_hi, y_lo, k = _exp_dd(m, _live_argument(m, xs, EXP_O_THRESHOLD, EXP_U_THRESHOLD))
    res = _decided(m, x, _scale_dd(m, y_hi, y_lo, k), EXP_O_THRESHOLD, INF, EXP_U_THRESHOLD)
    return m.where(nan, x + x, res)


# --------------------------------------------------------------------------- log
@scalar_fn("gt_log_fd_f64", (F64,), F64)
def log_f64(m, x):
    """log(x) for float64, < 1 ulp (fdlibm e_log.c).

    1. Reduction: x = 2**k * (1+f) with sqrt(2)/2 < 1+f < sqrt(2), read off the bit pattern:
       subnormals are first multiplied by 2**54 (exact) and k lowered by 54; the mantissa
       field hx (high 20 bits) decides (``(hx + 0x95f64) & 0x100000``, i.e. mantissa >=
       sqrt2 - 1) whether 1+f gets exponent 0 or -1 (then k += 1). All of this is exact.
       f = (1+f) - 1 is exact (Sterbenz).
    2. Approximation: s = f/(2+f), log(1+f) = 2s + s*R(s^2), R the Remez polynomial in
       z = s^2 (even/odd split t1 + t2 as in fdlibm), written as
       f - (hfsq - s*(hfsq+R)) with hfsq = f^2/2 for the larger f (0x6147a <= hx <= 0x6b851,
       i.e. 1+f in [1.38, 1.42]-ish) and f - s*(f-R) otherwise (fdlibm's choice of form).
    3. Reconstruction: log(x) = k*LN2_HI + (log(1+f) + k*LN2_LO), the product k*LN2_HI
       exact, the small terms added first. fdlibm's k == 0 and |f| < 2**-20 branches are
       shortcuts of the same formulas (with k = 0 every k-term is an exact zero) and are not
       needed.
    Specials: log(+-0) = -inf, log(x<0) = NaN, log(+inf) = +inf, log(NaN) = NaN, log(1) = +0.
    """
    nan = m.isnan(x)
    bad = nan | (x <= 0.0) | (x == INF)
    xs = m.where(bad, 1.0, x)
    sub = xs < MIN_NORMAL
    xs = m.where(sub, xs * TWO54, xs)
    ix = m.bits(xs)  # positive, finite, normal
    hx = ix >> 32
    k = (hx >> 20) - 1023
    k = m.where(sub, k - 54, k)
    hx = hx & 0xFFFFF
    i = (hx + 0x95F64) & 0x100000  # 0 or 0x100000
    # set exponent to 0 (i == 0) or -1 (i == 0x100000): fdlibm's hx | (i ^ 0x3ff00000)
    xn = m.from_bits(((hx | (0x3FF00000 - i)) << 32) | (ix & 0xFFFFFFFF))
    k = k + (i >> 20)
    f = xn - 1.0
    s = f / (2.0 + f)
    dk = m.i2f(k)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    big = ((hx - 0x6147A) | (0x6B851 - hx)) > 0
    rr = t2 + t1
    hfsq = 0.5 * f * f
    res_big = dk * LN2_HI - ((hfsq - (s * (hfsq + rr) + dk * LN2_LO)) - f)
    res_small = dk * LN2_HI - ((s * (f - rr) - dk * LN2_LO) - f)
    res = m.where(big, res_big, res_small)
    res = m.where(x == INF, INF, res)
    res = m.where(x == 0.0, -INF, res)
    res = m.where(x < 0.0, NAN, res)
    return m.where(nan, x + x, res)


# --------------------------------------------------------------------------- expm1
@scalar_fn("gt_expm1_fd_f64", (F64,), F64)  # fdlibm, tanh's; the op expm1 is crexp's
def expm1_f64(m, x):
    """exp(x) - 1 for float64, < 1 ulp (fdlibm s_expm1.c).

    1. Reduction as in exp: k = rint(x/ln2), hi = x - k*LN2_HI (exact), lo = k*LN2_LO,
       r = hi - lo and its rounding error c = (hi - r) - lo (exact).
    2. Approximation of expm1(r) on |r| <= 0.5 ln2 through the scaled Remez polynomial
       r1 = 1 + hxs*(Q1 + ... + Q5 hxs^4), hxs = r*r/2, t = 3 - r1*r/2,
       e = hxs*((r1 - t)/(6 - r*t)), expm1(r) = r - (r*e - hxs); the correction c enters as
       e := (r*(e - c) - c) - hxs.
    3. Reconstruction expm1(x) = 2**k * (expm1(r) + 1) - 1 written, as fdlibm does, so
       that the cancelling terms are combined exactly for each range of k:
       k = 0: r - (r*e - hxs); k = -1: (r - e)/2 - 1/2; k = 1: -2(e - (r + 1/2)) for
       r < -1/4 else 1 + 2(r - e); 2 <= k <= 19: (1 - 2**-k - (e - r)) * 2**k (1 - 2**-k is
       exact); 20 <= k <= 56: ((r - (e + 2**-k)) + 1) * 2**k; otherwise
       (1 - (e - r)) * 2**k - 1.
    Specials: |x| < 2**-54 -> x (so +-0 and subnormals are kept), x <= -38.816... -> -1,
    x > 709.78... -> +inf, NaN -> NaN.
    """
    nan = m.isnan(x)
    xs = m.where(nan, 0.0, x)
    xs = m.where(xs > 709.875, 709.875, m.where(xs < -45.0, -45.0, xs))  # k in [-65, 1024]
    kf = m.rint(xs * INVLN2)
    hi = xs - kf * LN2_HI
    lo = kf * LN2_LO
    r = hi - lo
    c = (hi - r) - lo
    k = m.f2i(kf)
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))))
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    res_k0 = r - (r * e - hxs)
    e = (r * (e - c) - c) - hxs
    res_km1 = 0.5 * (r - e) - 0.5
    res_k1 = m.where(r < -0.25, -2.0 * (e - (r + 0.5)), 1.0 + 2.0 * (r - e))
    kc = m.where(k < 0, 0, m.where(k > 60, 60, k))  # clamped for 2**-k
    two_mk = _pow2(m, -kc)  # 2**-k (exact for 0 <= k <= 60)
    res_small_k = _scale(m, (1.0 - two_mk) - (e - r), k)  # 2 <= k <= 19
    res_mid_k = _scale(m, (r - (e + two_mk)) + 1.0, k)  # 20 <= k <= 56
    res_far_k = _scale(m, 1.0 - (e - r), k) - 1.0  # k <= -2 or k > 56
    res = m.where((k <= -2) | (k > 56), res_far_k, m.where(k >= 20, res_mid_k, res_small_k))
    res = m.where(k == 1, res_k1, res)
    res = m.where(k == -1, res_km1, res)
    res = m.where(k == 0, res_k0, res)
    res = m.where(m.fabs(x) < TINY54, x, res)
    res = m.where(x <= -EXPM1_NEG_SAT, -1.0, res)
    res = m.where(x > EXP_O_THRESHOLD, INF, res)
    return m.where(nan, x + x, res)


# --------------------------------------------------------------------------- tanh
# tanh(x) = x + x * s * G(s), s = x*x, for |x| < 0.75: G is the degree-12 polynomial fitted
# by Chebyshev interpolation (mpmath.chebyfit, 13 nodes, 400-bit arithmetic) to
# G(s) = (tanh(sqrt s) - sqrt s) / sqrt(s)**3 on s in [0, 9/16]; with the coefficients
# rounded to float64 the relative error of x + x*s*G(s) is < 2**-56 over the interval.
# Highest degree first.
TANH_G = [
    float.fromhex(h)
    for h in (
        "-0x1.b87709c583a0fp-20",
        "0x1.51282042d0b9ap-17",
        "-0x1.215cdb73c8b35p-15",
        "0x1.8b4d9f3447ab6p-14",
        "-0x1.f351c7b8d9d91p-13",
        "0x1.353280941795ap-11",
        "-0x1.7d9fdd51d36fap-10",
        "0x1.d6d397c6172ccp-9",
        "-0x1.226e3434333f1p-7",
        "0x1.664f487b7c37ep-6",
        "-0x1.ba1ba1ba03fdep-5",
        "0x1.111111111101fp-3",
        "-0x1.5555555555555p-2",
    )
]


@scalar_fn("gt_tanh_fd_f64", (F64,), F64)
def tanh_f64(m, x):
    """tanh(x) for float64.

    With a = |x|:
    * a < 2**-55: tanh(x) = x (rounded; also keeps the sign of -0 and subnormals).
    * a < 0.75: a + a*(s*G(s)), s = a*a, G the polynomial above; the correction a*s*G(s) is at
      most 0.15*a, so its rounding errors are a fraction of an ulp and the last addition
      dominates.
    * 0.75 <= a < 22: with t = expm1(2a) (>= 3.48, fdlibm expm1, < 1 ulp),
      tanh(a) = 1 - 2/(t + 2) (fdlibm s_tanh.c). The sum d = t + 2 is kept exactly as
      d_hi + d_lo (TwoSum), the quotient 2/d is q + w_lo with the residual 2 - q*d_hi
      computed exactly (Dekker product), and 1 - q is split exactly (TwoSum) before the
      last rounding; so only t's error, damped by 2t/(t+2)**2 <= 0.23 relative, remains.
    * a >= 22: tanh(a) rounds to 1.
    The result gets the sign of x; tanh(+-inf) = +-1, tanh(NaN) = NaN.
    """
    nan = m.isnan(x)
    a0 = m.fabs(x)
    # polynomial lane
    a = m.where(nan | (a0 > 0.75), 0.75, a0)
    s = a * a
    g = TANH_G[0]
    for coef in TANH_G[1:]:
        g = coef + s * g
    z_small = a + a * (s * g)
    # expm1 lane
    b = m.where(nan | (a0 > 22.0), 22.0, m.where(a0 < 0.75, 0.75, a0))
    t = m.call(EXPM1_F64, b + b)
    d_hi, d_lo = _two_sum(t, 2.0)
    q = 2.0 / d_hi
    p_hi, p_lo = _two_prod(q, d_hi)
    w_lo = (((2.0 - p_hi) - p_lo) - q * d_lo) / d_hi
    one_q, one_q_err = _two_sum(1.0, -q)
    z_big = one_q + (one_q_err - w_lo)
    z = m.where(a0 < 0.75, z_small, z_big)
    z = m.where(a0 >= 22.0, 1.0, z)
    z = m.where(x < 0.0, -z, z)
    z = m.where(a0 < 2.7755575615628914e-17, x, z)  # 2**-55
    return m.where(nan, x + x, z)


# --------------------------------------------------------------------------- sigmoid
@scalar_fn("gt_sigmoid_fd_f64", (F64,), F64)
def sigmoid_f64(m, x):
    """sigmoid(x) = 1/(1 + exp(-x)) for float64.

    With E = exp(-|x|) in (0, 1] kept as a double-double (``_exp_dd``: E = (y_hi + y_lo)*2**k):
    W = 1/(1 + E) is formed as q + w_lo (1 + E split exactly by Fast2Sum, q = 1/d_hi, the
    residual 1 - q*d_hi exact by a Dekker product); then
    sigmoid(x) = W for x >= 0, and sigmoid(x) = E*W = 2**k * (y_hi + y_lo)(q + w_lo) for x < 0
    (the same value in real arithmetic; this form neither overflows nor cancels, and keeps
    full relative accuracy down through the subnormals). Each lane ends with one rounding
    of a sum accurate to a few 2**-58, so the error stays near 0.5 ulp.
    sigmoid(x) = 1 for x > SIGMOID_ONE (40), +0 below EXP_U_THRESHOLD (what the general path
    gives there); sigmoid(+inf) = 1, sigmoid(-inf) = +0, sigmoid(+-0) = 0.5, sigmoid(NaN) = NaN.
    """
    nan = m.isnan(x)
    xs = m.where(nan, 0.0, x)
    # decided lanes: 1 above SIGMOID_ONE, +0 below EXP_U_THRESHOLD (what the general path
    # gives there)
    u = -m.fabs(_live_argument(m, xs, SIGMOID_ONE, EXP_U_THRESHOLD))
    y_hi, y_lo, k = _exp_dd(m, u)
    e_hi = _scale(m, y_hi, k)
    e_lo = _scale(m, y_lo, k)
    d_hi, d_lo = _fast_two_sum(1.0, e_hi)
    d_lo = d_lo + e_lo
    q = 1.0 / d_hi
    p_hi, p_lo = _two_prod(q, d_hi)
    w_lo = (((1.0 - p_hi) - p_lo) - q * d_lo) * q
    pos = q + w_lo
    n_hi, n_lo = _two_prod(y_hi, q)
    neg = _scale_dd(m, n_hi, n_lo + (y_hi * w_lo + y_lo * q), k)
    res = _decided(m, x, m.where(x < 0.0, neg, pos), SIGMOID_ONE, 1.0, EXP_U_THRESHOLD)
    return m.where(nan, x + x, res)


EXP_F64: ScalarFn = exp_f64
EXP_F32: ScalarFn = widened_f32(exp_f64)
LOG_F64: ScalarFn = log_f64
LOG_F32: ScalarFn = widened_f32(log_f64)
EXPM1_F64: ScalarFn = expm1_f64
EXPM1_F32: ScalarFn = widened_f32(expm1_f64)
TANH_F64: ScalarFn = tanh_f64
TANH_F32: ScalarFn = widened_f32(tanh_f64)
SIGMOID_F64: ScalarFn = sigmoid_f64
SIGMOID_F32: ScalarFn = widened_f32(sigmoid_f64)

ALL = [
    EXP_F64,
    EXP_F32,
    LOG_F64,
    LOG_F32,
    EXPM1_F64,
    EXPM1_F32,
    TANH_F64,
    TANH_F32,
    SIGMOID_F64,
    SIGMOID_F32,
]
