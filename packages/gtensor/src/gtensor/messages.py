"""The one description of a received value used by every error message in the grad packages."""

from __future__ import annotations

from typing import Any

import numpy as np

_SCALARS = (bool, int, float, complex, str, bytes, np.generic, type(None))
_MAX_REPR = 40


def _a(name: str) -> str:
    """``name`` with its indefinite article."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _array_kind(x: Any, name: str) -> str:
    """What an array-like is: which backend's array, or just its type."""
    t = type(x)
    owner = getattr(t, "backend_name", "") if isinstance(x, np.ndarray) else ""
    if owner:  # a host kernel backend's array (gtensor.backends.host_arrays.HostArray)
        return f"an array of the {owner} backend"
    if t.__module__.split(".")[0] == "cupy":
        return "a cupy array of the cuda backend"
    if isinstance(x, np.ndarray):
        return "a plain numpy.ndarray (the numpy backend's array type)"
    return _a(name)


def describe(x: Any) -> str:
    """A short description of ``x`` for an error message: type, and dtype/shape/layout of arrays.

    >>> describe(1.5), describe(np.zeros((2, 3)))
    ('1.5 (a float)', "a plain numpy.ndarray (the numpy backend's array type) of dtype float64 \
and shape (2, 3)")
    """
    t = type(x)
    module = t.__module__.split(".")[0]
    name = t.__name__ if module == "builtins" else f"{module}.{t.__name__}"
    if isinstance(x, _SCALARS):
        text = repr(x)
        if len(text) > _MAX_REPR:
            text = text[: _MAX_REPR - 3] + "..."
        return f"{text} ({_a(name)})"
    dtype, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
    if dtype is None or shape is None:
        return _a(name)
    try:
        shape = tuple(shape)
    except TypeError:
        pass
    contiguous = getattr(getattr(x, "flags", None), "c_contiguous", True)
    layout = "" if contiguous else ", not C-contiguous"
    return f"{_array_kind(x, name)} of dtype {dtype} and shape {shape}{layout}"
