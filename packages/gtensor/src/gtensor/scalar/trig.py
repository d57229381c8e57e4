"""sin and cos in the scalar language, for host-side tables (rotary embeddings); not tape ops.

(C names ``gt_sin20_*`` / ``gt_cos20_*``: the tape ops sin and cos are the correctly rounded
ones of :mod:`gtensor.scalar.crtrig`, over the whole domain.)

Written once (see :mod:`gtensor.scalar.dsl`) with correctly rounded ``+ - * /``, ``rint``,
int64 bit manipulation and ``where`` only (no FMA, no libm), so the numpy evaluation and the
emitted C/CUDA agree bit for bit, and a table of angles is the same bits on every machine.

Domain: finite ``|x| <= TRIG_MAX = 2**20``; outside it (and for NaN, inf) the result is NaN.
That covers rotary tables (angles ``position * inv_freq``, ``inv_freq <= 1``) up to a million
positions; a full Payne-Hanek reduction for huge arguments is deliberately not provided.

1. Reduction (Cody-Waite in three exact steps): ``n = rint(x * 2/pi)``; pi/2 is split as
   ``P1 + P2 + P3 + P3T`` (fdlibm ``e_rem_pio2.c``: P1, P2, P3 carry 33 significant bits, so
   ``n*P1``, ``n*P2``, ``n*P3`` are exact for ``|n| < 2**20``). ``a = x - n*P1`` is exact
   (Sterbenz); ``a - n*P2`` and ``- n*P3`` are summed with TwoSum (exact, no ordering
   precondition); the small tail ``(e1 + e2) - n*P3T`` is added last, giving the reduced
   argument as ``hi + lo`` with ``|hi| <= pi/4 + 2**-30`` and an absolute error of a few
   ``2**-106 |x|``. Where the reduced argument is tiny (``x`` near a multiple of pi/2) both
   TwoSums are exact by Sterbenz and the error is that of ``n*P3T`` alone, so the relative
   accuracy of the reduced argument is kept there too.
2. Kernels (fdlibm ``k_sin.c`` / ``k_cos.c``, FreeBSD form, error < 2**-58 for the
   polynomials on ``|x| <= pi/4``), both with the tail ``lo``:
   ``sin(hi+lo) ~ hi - ((z*(lo/2 - v*r) - lo) - v*S1)``, ``cos(hi+lo) ~ w + (((1-w) - z/2)
   + (z*r - hi*lo))`` with ``w = 1 - z/2``.
3. Quadrant ``n mod 4`` selects +-sin or +-cos of the reduced argument.
Tiny arguments ``|x| < 2**-27``: ``sin x = x`` (keeps the sign of -0 and subnormals),
``cos x = 1`` (both correctly rounded there).

float32: the float64 function of the exactly widened argument, rounded once.
Every constant is an IEEE bit pattern (``_w(hi, lo)``), as in ``transcendental``.
"""

from __future__ import annotations

from .dsl import F64, ScalarFn, scalar_fn, widened_f32
from .transcendental import _two_sum, _w

NAN = float("nan")
TRIG_MAX = 1048576.0  # 2**20: n = rint(x*2/pi) stays below 2**20, so n*P1, n*P2, n*P3 are exact
TINY27 = _w(0x3E400000, 0x00000000)  # 2**-27

INVPIO2 = _w(0x3FE45F30, 0x6DC9C883)  # 6.36619772367581382433e-01 (2/pi)
P1 = _w(0x3FF921FB, 0x54400000)  # 1.57079632673412561417e+00, first 33 bits of pi/2
P2 = _w(0x3DD0B461, 0x1A600000)  # 6.07710050630396597660e-11, next 33 bits
P3 = _w(0x3BA3198A, 0x2E000000)  # 2.02226624871116645580e-21, next 33 bits
P3T = _w(0x397B839A, 0x252049C1)  # 8.47842766036889956997e-32, pi/2 - (P1 + P2 + P3)

# k_sin.c: sin(x) ~ x + S1 x^3 + ... + S6 x^13 on |x| <= pi/4
S1 = _w(0xBFC55555, 0x55555549)  # -1.66666666666666324348e-01
S2 = _w(0x3F811111, 0x1110F8A6)  # 8.33333333332248946124e-03
S3 = _w(0xBF2A01A0, 0x19C161D5)  # -1.98412698298579493134e-04
S4 = _w(0x3EC71DE3, 0x57B1FE7D)  # 2.75573137070700676789e-06
S5 = _w(0xBE5AE5E6, 0x8A2B9CEB)  # -2.50507602534068634195e-08
S6 = _w(0x3DE5D93A, 0x5ACFD57C)  # 1.58969099521155010221e-10
# k_cos.c: cos(x) ~ 1 - x^2/2 + C1 x^4 + ... + C6 x^14 on |x| <= pi/4
C1 = _w(0x3FA55555, 0x5555554C)  # 4.16666666666666019037e-02
C2 = _w(0xBF56C16C, 0x16C15177)  # -1.38888888888741095749e-03
C3 = _w(0x3EFA01A0, 0x19CB1590)  # 2.48015872894767294178e-05
C4 = _w(0xBE927E4F, 0x809C52AD)  # -2.75573143513906633035e-07
C5 = _w(0x3E21EE9E, 0xBDB4B1C4)  # 2.08757232129817482790e-09
C6 = _w(0xBDA8FAE9, 0xBE8838D4)  # -1.13596475577881948265e-11


def _reduce(m, x):
    """``x = n*pi/2 + (hi + lo)``: returns ``hi, lo`` and ``n mod 4`` (int64 in 0..3)."""
    n = m.rint(x * INVPIO2)
    a = x - n * P1  # exact
    s, e1 = _two_sum(a, -(n * P2))
    s, e2 = _two_sum(s, -(n * P3))
    hi, lo = _two_sum(s, (e1 + e2) - n * P3T)
    q = (m.f2i(n) + 4194304) & 3  # shifted by 2**22 (a multiple of 4): & on a non-negative
    return hi, lo, q


def _ksin(hi, lo):
    """sin(hi + lo) for ``|hi| <= pi/4``, ``|lo| <= ulp(hi)`` (fdlibm k_sin.c, tail form)."""
    z = hi * hi
    w = z * z
    r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6)
    v = z * hi
    return hi - ((z * (0.5 * lo - v * r) - lo) - v * S1)


def _kcos(hi, lo):
    """cos(hi + lo) for ``|hi| <= pi/4`` (fdlibm k_cos.c, FreeBSD form)."""
    z = hi * hi
    w = z * z
    r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6))
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + (z * r - hi * lo))


def _lanes(m, x):
    """(bad, tiny, sin of the reduced argument, cos of it, quadrant) for ``x``."""
    bad = m.isnan(x) | (m.fabs(x) > TRIG_MAX)
    xs = m.where(bad, 0.0, x)
    hi, lo, q = _reduce(m, xs)
    return bad, m.fabs(x) < TINY27, _ksin(hi, lo), _kcos(hi, lo), q


@scalar_fn("gt_sin20_f64", (F64,), F64)
def sin_f64(m, x):
    """sin(x) for float64, ``|x| <= 2**20`` (NaN outside); see the module docstring."""
    bad, tiny, s, c, q = _lanes(m, x)
    res = m.where(q == 0, s, m.where(q == 1, c, m.where(q == 2, -s, -c)))
    res = m.where(tiny, x, res)
    return m.where(bad, NAN, res)


@scalar_fn("gt_cos20_f64", (F64,), F64)
def cos_f64(m, x):
    """cos(x) for float64, ``|x| <= 2**20`` (NaN outside); see the module docstring."""
    bad, tiny, s, c, q = _lanes(m, x)
    res = m.where(q == 0, c, m.where(q == 1, -s, m.where(q == 2, -c, s)))
    res = m.where(tiny, 1.0, res)
    return m.where(bad, NAN, res)


SIN_F64: ScalarFn = sin_f64
COS_F64: ScalarFn = cos_f64
SIN_F32: ScalarFn = widened_f32(sin_f64)
COS_F32: ScalarFn = widened_f32(cos_f64)

ALL = [SIN_F64, COS_F64, SIN_F32, COS_F32]
