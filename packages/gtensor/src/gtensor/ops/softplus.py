"""softplus: torch's ``Softplus()`` (beta 1, threshold 20) as one elementwise op.

The whole op in one file: the scalar function (the numpy reference and the kernels' text), the
backward rule, and what its checks need. Forward::

    softplus(x) = x                  where x > 20
                  log1p(exp(x))      elsewhere (NaN stays NaN)

with ``exp`` and ``log1p`` the correctly rounded functions of the op set, so the result is
the composite ``where(x > 20, x, log1p(exp(where(x > 20, 0, x))))`` bit for bit. Backward
(torch's ``softplus_backward``, its order)::

    z = exp(x)          (x <= 20; 0 is used where x > 20, so nothing overflows)
    dx = g              where x > 20
         (g * z) / (z + 1)  elsewhere
"""

from __future__ import annotations

from .checks import unary_checks
from .elementwise import EXP, LOG1P, pair, ref, unary

THRESHOLD = 20.0  # torch's default: above it softplus(x) is x

SOFTPLUS = pair("softplus", 1, lambda m, x: m.where(
    x > THRESHOLD, x, m.call(LOG1P, m.call(EXP, x))))


def _vjp(be, g, ins, out, needs):
    x = ins[0]
    over = be.greater(x, be.fill((), THRESHOLD, x.dtype))
    z = be.exp(be.where(over, be.fill((), 0.0, x.dtype), x))
    return (be.where(over, g, be.div(be.mul(g, z), be.adds(z, 1.0))),)


def _pin(T, q, x, y):
    if x > T(THRESHOLD):
        return (q,)
    z = ref(EXP, x)
    return ((q * z) / (z + T(1.0)),)


unary("softplus", SOFTPLUS, _vjp,
      "log1p(exp(x)), x itself where x > 20 (torch's Softplus with beta 1)",
      checks=unary_checks(_pin, lambda t, x: t.nn.functional.softplus(x)))
