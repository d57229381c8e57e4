"""Double-double and triple-double arithmetic in the scalar language, and correct rounding of them.

The correctly rounded functions (``gtensor.scalar.crmath``) compute a fast approximation as a
double-double ``hi + lo`` with a proven relative error bound and, where that bound does not
decide the rounding, an accurate one as a triple-double ``t0 + t1 + t2`` (relative error
below 2^-130). These helpers are plain Python over scalar-language values (``m`` the numpy
or C mode, see ``gtensor.scalar.dsl``): traced once, they inline into the caller.

Conventions: a double-double (DD) is a pair ``(h, lo)`` with ``h = RN(h + lo)``; a
triple-double (TD) a triple ``(a0, a1, a2)`` with ``|a1| <= ulp(a0)`` and ``|a2| <=
ulp(a1)`` after ``td_norm``. Exactness statements assume no overflow and no underflow (every
caller keeps its intermediates in the normal range, scaling where needed). The error bounds
quoted are relative to the exact result of the operation on the represented values:
``u = 2^-53``.

* ``two_sum`` / ``fast_two_sum`` / ``two_prod``: error-free transformations (Knuth, Dekker;
  the product's error by one fma).
* ``dd_*``: |error| <= 2^-102 relative (products: at most 2^-103.4; sums of like-signed or
  non-cancelling values: 2^-104).
* ``td_*``: |error| <= 2^-144 relative for products and like-signed sums (the terms dropped
  are below u^3 times a small constant; see each function).
* ``round_dd_f64`` / ``round_dd_f32`` / ``round_td_f64`` / ``round_td_f32``: the rounding test
  of a fast approximation and the correct rounding of an accurate one.
"""

from __future__ import annotations


# --------------------------------------------------------------------------- exact pieces
def two_sum(a, b):
    """``s + e == a + b`` exactly, ``s = RN(a + b)`` (Knuth, any order)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    """``s + e == a + b`` exactly, ``s = RN(a + b)``; needs ``|a| >= |b|`` (or a = 0) (Dekker)."""
    s = a + b
    return s, b - (s - a)


def two_prod(m, a, b):
    """``p + e == a * b`` exactly, ``p = RN(a * b)`` (the error by one fma)."""
    p = a * b
    return p, m.fma(a, b, -p)


# --------------------------------------------------------------------------- double-double
def dd_add(a, b):
    """DD + DD (any signs): two_sum of the heads, the tails added, one renormalization."""
    s, e = two_sum(a[0], b[0])
    e = e + (a[1] + b[1])
    return fast_two_sum(s, e)


def dd_add_d(a, b):
    """DD + double."""
    s, e = two_sum(a[0], b)
    return fast_two_sum(s, e + a[1])


def dd_mul(m, a, b):
    """DD * DD: the heads' exact product, the cross terms by fma (|error| <= 2^-103.4 rel)."""
    p, e = two_prod(m, a[0], b[0])
    e = m.fma(a[0], b[1], m.fma(a[1], b[0], e))
    return fast_two_sum(p, e)


def dd_mul_d(m, a, b):
    """DD * double."""
    p, e = two_prod(m, a[0], b)
    return fast_two_sum(p, m.fma(a[1], b, e))


def dd_fma(m, a, x, c):
    """``c + a * x`` for DD ``a`` and ``c``, double ``x`` (a Horner step)."""
    p, e = two_prod(m, a[0], x)
    e = m.fma(a[1], x, e)
    s, f = two_sum(c[0], p)
    return fast_two_sum(s, f + (e + c[1]))


# --------------------------------------------------------------------------- triple-double
def td_norm(a0, a1, a2):
    """Renormalize three doubles into a TD (exact unless the sum cancels below 2^-150 rel)."""
    s, e = two_sum(a1, a2)
    h, e2 = two_sum(a0, s)
    m1, m2 = two_sum(e2, e)
    h, m1 = fast_two_sum(h, m1)
    return h, m1, m2


def td_add(a, b):
    """TD + TD: the six parts merged by exact two-sums; the last rounding dropped below
    u^3 of the larger operand."""
    s0, e0 = two_sum(a[0], b[0])
    s1, e1 = two_sum(a[1], b[1])
    s2 = a[2] + b[2]
    s1, f = two_sum(s1, e0)
    s2 = s2 + (e1 + f)
    h, m1 = two_sum(s0, s1)
    m1, m2 = two_sum(m1, s2)
    return td_norm(h, m1, m2)


def td_add_d(a, b):
    """TD + double."""
    s0, e0 = two_sum(a[0], b)
    s1, e1 = two_sum(a[1], e0)
    return td_norm(s0, s1, e1 + a[2])


def td_mul(m, a, b):
    """TD * TD: the exact products a0b0, a0b1, a1b0, the terms a0b2 + a1b1 + a2b0 rounded
    (each under u^2 of the product, so their errors are under u^3); a1b2 and below dropped."""
    p00, e00 = two_prod(m, a[0], b[0])
    p01, e01 = two_prod(m, a[0], b[1])
    p10, e10 = two_prod(m, a[1], b[0])
    t2 = m.fma(a[0], b[2], m.fma(a[1], b[1], m.fma(a[2], b[0], e01 + e10)))
    s1, f1 = two_sum(p01, p10)
    s1, f2 = two_sum(s1, e00)
    return td_norm(p00, s1, t2 + (f1 + f2))


def td_mul_dd(m, a, b):
    """TD * DD."""
    return td_mul(m, a, (b[0], b[1], b[0] * 0.0))


def td_mul_d(m, a, b):
    """TD * double."""
    p0, e0 = two_prod(m, a[0], b)
    p1, e1 = two_prod(m, a[1], b)
    t2 = m.fma(a[2], b, e1)
    s1, f = two_sum(p1, e0)
    return td_norm(p0, s1, t2 + f)


def td_div_small(m, a, d):
    """TD / d for a small integer ``d`` (exact as a double): long division, each partial
    remainder exact by fma and kept exactly by a two-sum (|error| <= 2^-150 d rel)."""
    q0 = a[0] / d
    r0h, r0l = two_sum(m.fma(-q0, d, a[0]), a[1])  # a0 - q0 d is exact (q0 = RN(a0/d))
    q1 = r0h / d
    r1 = (m.fma(-q1, d, r0h) + r0l) + a[2]
    return td_norm(q0, q1, r1 / d)


def td_div(m, a, b):
    """TD / TD: three quotient digits, each remainder a - q b formed as a TD (relative error
    below 2^-145 for quotients of normal magnitude)."""
    q0 = a[0] / b[0]
    p = td_neg(td_mul_d(m, b, q0))
    r = td_add(a, p)
    q1 = r[0] / b[0]
    r = td_add(r, td_neg(td_mul_d(m, b, q1)))
    return td_norm(q0, q1, r[0] / b[0])


def td_neg(t):
    """-t for a TD (exact)."""
    return -t[0], -t[1], -t[2]


# --------------------------------------------------------------------------- rounding
def _round_odd(m, s, e):
    """Round ``s + e`` to odd (``s = RN(s + e)``, float64, ``s`` finite and nonzero or e = 0)."""
    b = m.bits(s)
    fix = ((b & 1) == 0) & (e != 0.0)
    away = ((e > 0.0) & (s > 0.0)) | ((e < 0.0) & (s < 0.0))  # toward e: magnitude up
    return m.where(fix & away, m.from_bits(b + 1), m.where(fix, m.from_bits(b - 1), s))


def ro_sum(m, a, b):
    """``RO(a + b)``: the sum rounded to odd (exact two-sum, then the odd fix)."""
    s, e = two_sum(a, b)
    return _round_odd(m, s, e)


def round_dd_f64(h, lo, err):
    """(RN(h + lo), ok): ``ok`` when every value within ``err`` of ``h + lo`` rounds the same
    (monotonicity: RN(h + (lo - err)) <= RN(v) <= RN(h + (lo + err)); ``err`` must cover the
    rounding of ``lo +- err`` too, i.e. be inflated by a hair). Normal range only."""
    left = h + (lo - err)
    right = h + (lo + err)
    return h + lo, left == right


def round_dd_f32(m, h, lo, err):
    """(RN32(h + lo), ok) for a float64 DD whose error ``err`` is far below an ulp of ``h``.

    With g the float32 spacing at |h| (2^(e-23) in h's binade, at least 2^-149: subnormals),
    t = |h|/g is exact and the float32 midpoints are the t with fraction 1/2; t < 2^24 and its
    float64 ulp is at most 2^-29. The exact value lies within |lo| + err <= 0.5 ulp64(h) + err
    of h, i.e. within 2^-30 + 2^-36 of t: if t's fraction is at least 2^-28 away from 1/2, no
    midpoint lies between them and RN32(exact) = RN32(h) = ``to_f32(h)`` (float32's overflow
    threshold is such a midpoint too). Otherwise ``ok`` is false. ``err=None``: the caller's
    bound is relative and below 2^-60 (no runtime check needed)."""
    a = m.fabs(h)
    ge = (m.bits(a) >> 52) - 23
    ge = m.where(ge < 1023 - 149, ge * 0 + (1023 - 149), ge)  # the subnormal spacing 2^-149
    t = a * m.from_bits((2046 - ge) << 52)  # |h| / g, exact
    d = (t - m.floor(t)) - 0.5
    ok = m.fabs(d) >= 2.0 ** -28
    if err is not None:
        ok = ok & (err < a * 2.0 ** -60)
    return m.to_f32(h), ok


def round_d_f32(m, y, err):
    """(RN32(y), ok) for a float64 ``y`` within ``err`` of the exact value, ``err`` up to a
    quarter of a float32 ulp: ``ok`` when no float32 midpoint lies within ``err`` of ``y``
    (then RN32(exact) = RN32(y), by monotonicity). As ``round_dd_f32``: t = |y|/g is exact and
    its fraction's distance to 1/2 exact; err/g is an exact scaling, so the test is exact."""
    a = m.fabs(y)
    ge = (m.bits(a) >> 52) - 23
    ge = m.where(ge < 1023 - 149, ge * 0 + (1023 - 149), ge)  # the subnormal spacing 2^-149
    inv_g = m.from_bits((2046 - ge) << 52)
    t = a * inv_g  # |y| / g, exact
    d = (t - m.floor(t)) - 0.5
    return m.to_f32(y), m.fabs(d) > err * inv_g


def clear_of_midpoint32(m, y, ulps):
    """Whether no float32 midpoint lies within ``ulps`` of y's float64 ulps of ``y``, for a
    float64 ``y`` whose float32 rounding is a normal number (2^-126 <= |y| < 2^128): that
    rounding drops y's 29 low mantissa bits exactly, and a midpoint is where they are 2^28.
    The float32 first stages' rounding test in two integer comparisons (``round_d_f32``'s
    general one takes a dozen operations); ``ulps`` below 2^27."""
    d = (m.bits(y) & ((1 << 29) - 1)) - (1 << 28)
    return (d > ulps) | (d < -ulps)


def round_td_f64(m, t):
    """RN(t0 + t1 + t2), the correctly rounded sum of three (Boldo-Melquiond: two two-sums,
    the low parts rounded to odd, one last rounding)."""
    uh, ul = two_sum(t[1], t[2])
    th, tl = two_sum(t[0], uh)
    return th + ro_sum(m, tl, ul)


def round_td_f32(m, t):
    """RN32(t0 + t1 + t2) of a normalized TD: RO64 of the sum (t0 + t1 split exactly, the
    remainder's sign from e + t2, exact in sign), then one rounding to float32."""
    s, e = two_sum(t[0], t[1])
    r = e + t[2]
    return m.to_f32(_round_odd(m, s, r))


def grid_round(m, t, g):
    """RN of the exact ``t0 + t1 + t2`` to the grid of multiples of ``g`` (a power of two with
    ``|t0| < 2^53 g``), ties to even, as a double; every operation exact: q = t0 rounded to the
    grid (rint of t0/g, a scaling by a power of two), then the remainder (t0 - q) + t1 + t2
    compared with +-g/2 and q moved one step. Used for results in the subnormal range (scaled
    up)."""
    q = m.rint(t[0] * (1.0 / g)) * g
    rh, rl = two_sum(t[0] - q, t[1])  # t0 - q is exact (|t0 - q| <= g/2, both multiples of ulp)
    rl = rl + t[2]
    half = 0.5 * g
    # compare rh + rl with +-half exactly: rh - half is exact near the boundary (Sterbenz)
    up = ((rh - half) + rl > 0.0) | (((rh - half) + rl == 0.0) & _odd_step(m, q, g))
    down = ((rh + half) + rl < 0.0) | (((rh + half) + rl == 0.0) & _odd_step(m, q, g))
    return m.where(up, q + g, m.where(down, q - g, q))


def _odd_step(m, q, g):
    """Whether ``q / g`` (an integer below 2^52) is odd."""
    n = m.f2i(q / g)
    return (n & 1) == 1


__all__ = [
    "two_sum", "fast_two_sum", "two_prod", "dd_add", "dd_add_d", "dd_mul", "dd_mul_d",
    "dd_fma", "td_norm", "td_add", "td_add_d", "td_mul", "td_mul_dd", "td_mul_d",
    "td_div_small", "td_div", "td_neg", "ro_sum", "round_dd_f64", "round_dd_f32", "round_td_f64",
    "round_td_f32", "grid_round",
]
