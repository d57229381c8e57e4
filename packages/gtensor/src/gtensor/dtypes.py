"""The two supported dtypes and the conversion rule for everything else."""

from __future__ import annotations

import numpy as np

SUPPORTED = ("float64", "float32")
# dtype objects hash fast; ``dtype.name`` is slow on numpy 2, and this is on every op call
SUPPORTED_DTYPES = frozenset(np.dtype(n) for n in SUPPORTED)


def normalize(dtype: object, where: str = "asarray") -> np.dtype:
    """``float32``/``float64`` in any spelling numpy accepts; TypeError for anything else."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"{where}: dtype {dtype!r} is not a dtype; expected float32 or float64"
        ) from None
    if dt.name not in SUPPORTED:
        raise TypeError(f"{where}: dtype {dt.name} is not supported; expected float32 or float64")
    return dt


def infer(x: object, dtype: object) -> np.dtype:
    """The dtype ``asarray`` gives ``x``.

    Rule: an explicit dtype wins; float32/float64 inputs keep their dtype; every other real
    input (bool, integers, float16, Python numbers, lists) becomes float64 (exact for integers
    of magnitude below 2**53). Complex, object and string inputs are rejected.
    """
    if dtype is not None:
        return normalize(dtype)
    dt = getattr(x, "dtype", None)
    if dt is None:
        dt = np.asarray(x).dtype
    dt = np.dtype(dt)
    if dt.name in SUPPORTED:
        return dt
    if dt.kind in "biuf":
        return np.dtype(np.float64)
    raise TypeError(f"asarray: cannot convert data of dtype {dt} to a float array "
                    "(expected real numbers: bool, int or float)")
