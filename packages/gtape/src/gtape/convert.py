"""The one conversion rule for data entering a tape (params, consts, set_value, array operands).

Rule: every real input (bool, signed/unsigned integers, float16/32/64, Python numbers, nested
lists, arrays of the tape's backend) is converted to the tape's dtype, rounding to nearest
(ties to even) where the value is not representable: integers above 2**53 (float64) or 2**24
(float32) round, float64 data on a float32 tape rounds to float32 and overflows to +-inf, NaN
and inf pass through. Complex, object and string data are rejected with TypeError. The result
is always a fresh copy owned by the tape.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def describe(x: Any) -> str:
    """A short description of a value for error messages."""
    t = type(x)
    mod = t.__module__.split(".")[0]
    if isinstance(x, np.ndarray) or mod == "cupy":
        return f"a {t.__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {'' if mod == 'builtins' else mod + '.'}{t.__name__}"


def to_backend(be: Any, x: Any, dtype: np.dtype, where: str) -> Any:
    """A fresh array of backend ``be`` and dtype ``dtype`` holding ``x`` (see the module rule)."""
    if be.is_array(x):
        _check_kind(x.dtype, where, x)
        with np.errstate(over="ignore"):
            return be.asarray(x, dtype=dtype)
    if type(x).__module__.split(".")[0] == "cupy":
        raise TypeError(f"{where}: got {describe(x)} (a cuda array) but this tape runs on the "
                        f"{be.name} backend; expected host data or a {be.name} array")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: cannot convert {describe(x)} to an array ({e}); expected "
                        "real numbers (bool, int or float)") from None
    _check_kind(arr.dtype, where, x)
    with np.errstate(over="ignore"):
        return be.asarray(arr.view(np.ndarray), dtype=dtype)


def _check_kind(dt: np.dtype, where: str, x: Any) -> None:
    if np.dtype(dt).kind not in "biuf":
        raise TypeError(f"{where}: cannot convert {describe(x)} (dtype {dt}); expected real "
                        "numbers (bool, int or float), which become the tape's dtype")
