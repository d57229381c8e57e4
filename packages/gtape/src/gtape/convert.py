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
from gtensor import describe
from gtensor.dtypes import TYPED_DTYPES


def to_backend(be: Any, x: Any, dtype: np.dtype, where: str) -> Any:
    """A fresh array of backend ``be`` and dtype ``dtype`` holding ``x`` (see the module rule)."""
    if be.is_array(x):
        _check_kind(x.dtype, where, x)
        with np.errstate(over="ignore"):
            return be.asarray(x, dtype=dtype)
    _check_foreign(be, x, where)
    arr = _host(x, where)
    with np.errstate(over="ignore"):
        return be.asarray(arr, dtype=dtype)


def into_backend(be: Any, x: Any, dtype: np.dtype, where: str, buf: Any) -> Any:
    """``x`` converted by the module rule, written into ``buf`` when it fits, else a fresh array.

    ``buf`` (an array of ``be`` with ``dtype``, or None) is reused when ``x`` has its shape: host
    data is written in (``Backend.write``, the same single rounding as ``to_backend``) and an
    array of the tape's backend and dtype is copied with the ``copy`` op.
    """
    if buf is None or buf.dtype != dtype:
        return to_backend(be, x, dtype, where)
    if be.is_array(x):
        _check_kind(x.dtype, where, x)
        if (x.dtype == dtype and tuple(x.shape) == tuple(buf.shape)
                and not be.overlaps(x, buf)):
            if dtype in TYPED_DTYPES:  # int64 ids / bool masks: no float copy op; a transfer
                return be.write(buf, be.to_numpy(x))
            return be.copy(x, out=buf)
        return to_backend(be, x, dtype, where)
    _check_foreign(be, x, where)
    arr = _host(x, where)
    if tuple(arr.shape) != tuple(buf.shape):
        return to_backend(be, arr, dtype, where)
    return be.write(buf, arr)


def _check_foreign(be: Any, x: Any, where: str) -> None:
    """Refuse an array of another gtensor backend (cupy, sim's or cpu's arrays) on this tape."""
    t = type(x)
    module = t.__module__.split(".")[0]
    if module == "cupy" or (module == "gtensor" and isinstance(x, np.ndarray)):
        raise TypeError(f"{where}: got {describe(x)}, an array of another backend ("
                        f"{t.__name__}), but this tape runs on the {be.name} backend; expected "
                        f"host data (numpy) or a {be.name} array (convert with that backend's "
                        "to_numpy)")


def _host(x: Any, where: str) -> np.ndarray:
    """``x`` as a host numpy array of real numbers (TypeError naming ``where`` otherwise)."""
    try:
        arr = np.asarray(x)
        if arr.dtype == object:  # Python ints beyond int64 (2**64): rounded like any int
            arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{where}: cannot convert {describe(x)} to an array ({e}); expected "
                        "real numbers (bool, int or float)") from None
    _check_kind(arr.dtype, where, x)
    return arr.view(np.ndarray)


def _check_kind(dt: np.dtype, where: str, x: Any) -> None:
    if np.dtype(dt).kind not in "biuf":
        raise TypeError(f"{where}: cannot convert {describe(x)} (dtype {dt}); expected real "
                        "numbers (bool, int or float), which become the tape's dtype")


def typed_dtype(x: Any, kind: str, where: str) -> np.dtype:
    """The dtype an index (``gtensor.dtypes.INT``) or mask (``BOOL``) operand ``x`` is held as.

    Index data must be integers (int64 exactly; other integer widths are widened when every
    value fits), masks must be bool; floats, and bools given as indices, are refused with a
    TypeError naming ``where``: a float index or a 0/1 mask written as floats is a mistake,
    never rounded silently.
    """
    from gtensor.dtypes import INT, TYPE_DTYPES

    dt = getattr(x, "dtype", None)
    if dt is None:
        try:
            dt = np.asarray(x).dtype
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"{where}: cannot convert {describe(x)} to an array ({e})") from None
    dt = np.dtype(dt)
    want = TYPE_DTYPES[kind]
    if kind == INT:
        if dt.kind not in "iu":
            raise TypeError(f"{where}: got {describe(x)} of dtype {dt}; expected integer "
                            "indices (int64)")
        if dt.kind == "u" and dt.itemsize == 8:
            arr = np.asarray(x)
            if arr.size and int(arr.max()) > np.iinfo(np.int64).max:
                raise TypeError(f"{where}: uint64 indices beyond int64's range; expected "
                                "int64 indices")
    elif dt != want:
        raise TypeError(f"{where}: got {describe(x)} of dtype {dt}; expected a bool mask")
    return want

