"""Var's operators and numpy-style methods: each runs a gtape op (so ``var.py`` needs no ops).

``bind(Var)`` sets them on the class (``gtape/__init__`` does, before any Var exists): the
arithmetic operators (a Python scalar becomes ``adds`` / ``muls`` after one rounding to the
tape's dtype), the comparisons (bool Vars, masks for ``where``), ``@``, ``-x``, ``x ** n``,
indexing, and ``T``, ``sum``, ``mean``, ``reshape``.
"""

from __future__ import annotations

from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor.dtypes import INDEX, round_scalar

from . import ops
from .var import Var

if TYPE_CHECKING:
    from .tape import Tape


def is_scalar(x: Any) -> bool:
    """A real Python/numpy number (bool excluded): operators turn it into ``adds``/``muls``."""
    t = type(x)
    if t is float or t is int:  # the common cases first
        return True
    if t is Var:
        return False
    return isinstance(x, (Real, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _exact(tape: Tape, s: Any) -> float:
    """The scalar ``s`` rounded once to the tape's dtype (as a Python float), before any
    arithmetic on it: ``x - np.uint8(5)`` subtracts 5, not ``-np.uint8(5) == 251``, and a
    Python int is rounded exactly (``w * (2**60 + 2**36 + 1)`` on a float32 tape multiplies by
    the float32 nearest to that integer, not by float32(float64(it)))."""
    return float(round_scalar(s, tape.dtype))


def _torch_axis(where: str, axis: Any, keepdims: Any, torch_kw: dict) -> tuple[Any, Any]:
    """(axis, keepdims) with torch's ``dim=`` / ``keepdim=`` from ``torch_kw`` (nothing else)."""
    unknown = set(torch_kw) - {"dim", "keepdim"}
    if unknown:
        raise TypeError(f"{where}: unexpected keyword argument(s) {sorted(unknown)}; expected "
                        "axis / keepdims (or torch's dim / keepdim)")
    if "dim" in torch_kw:
        if axis is not None:
            raise TypeError(f"{where}: both axis and dim were given; expected one of them")
        axis = torch_kw["dim"]
    if "keepdim" in torch_kw:
        if keepdims is not False:
            raise TypeError(f"{where}: both keepdims and keepdim were given; expected one")
        keepdims = torch_kw["keepdim"]
    return axis, keepdims


# ---------------------------------------------------------------- methods as in numpy
def T(self) -> Var:  # noqa: N802 - numpy's name
    """The transpose (axes reversed)."""
    return ops.transpose(self)

def sum(self, axis: int | None = None, keepdims: bool = False, **torch_kw: Any) -> Var:
    """Serial sum over all elements or one axis (``gtape.sum``; torch's ``dim=`` /
    ``keepdim=`` accepted)."""
    axis, keepdims = _torch_axis("sum", axis, keepdims, torch_kw)
    return ops.sum(self, axis, keepdims)

def mean(self, axis: int | None = None, keepdims: bool = False, **torch_kw: Any) -> Var:
    """Serial mean over all elements or one axis (``gtape.mean``; ``dim=`` / ``keepdim=``
    accepted)."""
    axis, keepdims = _torch_axis("mean", axis, keepdims, torch_kw)
    return ops.mean(self, axis, keepdims)

def reshape(self, *shape: Any) -> Var:
    """Same elements, new shape: ``v.reshape(2, 3)`` or ``v.reshape((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return ops.reshape(self, shape)

def __getitem__(self, key: Any) -> Var:
    from .indexing import getitem
    return getitem(self, key)

def __pow__(self, n: Any) -> Var:
    from .indexing import power
    return power(self, n)


# ---------------------------------------------------------------- operators
def _is_index(x: Any) -> bool:
    """An int64 Var (ids, argmax's result)."""
    return type(x) is Var and x.dtype == INDEX


def _int_add(a: Any, b: Any, refused: TypeError) -> Var:
    """``a + b`` on int64 (``add_int``, wrapping as numpy and torch) where the float op refused
    an int64 Var: both int64 Vars, or an int64 Var and a Python / numpy integer (a 0-d int64
    const) or an integer numpy array (recorded as an int64 const by the op); anything else
    re-raises the float op's error."""
    var = a if type(a) is Var else b
    other = b if var is a else a
    if _is_index(var):
        if isinstance(other, (int, np.integer)) and not isinstance(other, (bool, np.bool_)):
            if not -2**63 <= int(other) < 2**63:
                raise ValueError(f"add_int: {other} is outside int64's range "
                                 f"[{-2**63}, {2**63 - 1}]") from refused
            other = var._tape.const(np.int64(other), dtype=INDEX)
        if _is_index(other) or (isinstance(other, np.ndarray) and other.dtype.kind in "iu"):
            return ops.add_int(var, other) if var is a else ops.add_int(other, var)
    raise refused


def __add__(self, other: Any) -> Var:
    try:  # the float ops first: an int64 Var is refused by them before anything is recorded
        if is_scalar(other):
            return ops.adds(self, _exact(self._tape, other))
        return ops.add(self, other)
    except TypeError as e:
        return _int_add(self, other, e)

def __radd__(self, other: Any) -> Var:
    try:
        if is_scalar(other):
            return ops.adds(self, _exact(self._tape, other))
        return ops.add(other, self)
    except TypeError as e:
        return _int_add(other, self, e)

def __sub__(self, other: Any) -> Var:
    if is_scalar(other):  # x - s == x + (-s): negating the rounded scalar is exact
        return ops.adds(self, -_exact(self._tape, other))
    return ops.sub(self, other)

def __rsub__(self, other: Any) -> Var:
    # s - x == (-x) + s exactly in IEEE arithmetic
    if is_scalar(other):
        return ops.adds(ops.neg(self), _exact(self._tape, other))
    return ops.sub(other, self)

def __mul__(self, other: Any) -> Var:
    if is_scalar(other):
        return ops.muls(self, _exact(self._tape, other))
    return ops.mul(self, other)

def __rmul__(self, other: Any) -> Var:
    if is_scalar(other):
        return ops.muls(self, _exact(self._tape, other))
    return ops.mul(other, self)

def __truediv__(self, other: Any) -> Var:
    # x / s is NOT x * (1/s) bitwise, so a scalar divisor becomes a 0-d const and ``div``
    return ops.div(self, other)

def __rtruediv__(self, other: Any) -> Var:
    return ops.div(other, self)

def __matmul__(self, other: Any) -> Var:  # torch.matmul's rules (gtape.linalg)
    return ops.matmul(self, other)

def __rmatmul__(self, other: Any) -> Var:
    return ops.matmul(other, self)

# comparisons: bool Vars (masks for ``where``), not differentiable. ``==`` / ``!=`` compare
# values too, so a Var is hashed by identity and a bool Var has no truth value.
def __gt__(self, other: Any) -> Var:
    return ops.greater(self, other)

def __ge__(self, other: Any) -> Var:
    return ops.greater_equal(self, other)

def __lt__(self, other: Any) -> Var:
    return ops.less(self, other)

def __le__(self, other: Any) -> Var:
    return ops.less_equal(self, other)

def __eq__(self, other: Any) -> Var:  # type: ignore[override]
    return ops.equal(self, other)

def __ne__(self, other: Any) -> Var:  # type: ignore[override]
    return ops.not_equal(self, other)


def __neg__(self) -> Var:
    return ops.neg(self)

def __pos__(self) -> Var:
    return self


# the functions bound, by attribute name (``T`` a property)
BOUND = {name: globals()[name] for name in (
    'T', 'sum', 'mean', 'reshape', '__getitem__', '__pow__', '__add__', '__radd__',
    '__sub__', '__rsub__', '__mul__', '__rmul__', '__truediv__', '__rtruediv__',
    '__matmul__', '__rmatmul__', '__gt__', '__ge__', '__lt__', '__le__', '__eq__', '__ne__',
    '__neg__', '__pos__')}


def bind(cls: type) -> None:
    """Set each function of ``BOUND`` on ``cls`` (``Var``); ``T`` as a property."""
    for name, fn in BOUND.items():
        setattr(cls, name, property(fn) if name == "T" else fn)
