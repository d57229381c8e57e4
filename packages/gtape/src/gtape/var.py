"""Var: a handle to one node of a Tape (an index plus the node's serial number)."""

from __future__ import annotations

from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor.dtypes import round_scalar

if TYPE_CHECKING:
    from .tape import Tape


class StaleVarError(RuntimeError):
    """A Var whose node was dropped by ``reset_to`` (or whose tape was closed) was used."""


def _is_scalar(x: Any) -> bool:
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


class Var:
    """A node of a Tape. Holds no array: its value and gradient live in the tape."""

    __slots__ = ("_tape", "_index", "_serial")
    __array_ufunc__ = None  # make ``ndarray + Var`` call Var.__radd__ instead of looping

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        """torch functions called on Vars run gtape's ops (``gtape.torch_functions``)."""
        from .torch_functions import dispatch
        return dispatch(func, args, kwargs or {})

    def __init__(self, tape: Tape, index: int, serial: int) -> None:
        self._tape = tape
        self._index = index
        self._serial = serial

    # ---------------------------------------------------------------- identity
    @property
    def tape(self) -> Tape:
        """The tape this Var belongs to."""
        return self._tape

    @property
    def index(self) -> int:
        """The node's position on the tape (inputs always have smaller indices)."""
        return self._index

    @property
    def serial(self) -> int:
        """The node's serial number: unique over the tape's life (indices are reused after
        ``reset_to``, serials never are)."""
        return self._serial

    @property
    def alive(self) -> bool:
        """False once ``reset_to`` dropped the node or the tape was closed."""
        return self._tape._alive(self)

    @property
    def shape(self) -> tuple[int, ...]:
        """The node's shape."""
        return self._tape._node_field(self, "shape")

    def _rank(self) -> int:
        """len(shape), read directly for a live Var (``shape`` raises for a stale one)."""
        tape = self._tape
        return len(tape._shape[self._index]) if tape._alive(self) else len(self.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The node's dtype: the tape's float dtype, or int64 / bool for index and mask nodes
        (an ``argmax``, a comparison, integer labels)."""
        self._tape._check_var(self, "dtype")
        return np.dtype(self._tape._values[self._index].dtype)

    @property
    def requires_grad(self) -> bool:
        """True when a parameter lies upstream of this node (it gets a gradient)."""
        return self._tape._node_field(self, "requires_grad")

    @property
    def op(self) -> str:
        """The op name, or ``"param"`` / ``"const"`` for leaves."""
        return self._tape._node_field(self, "op")

    # ---------------------------------------------------------------- gradients, torch-style
    def backward(self, create_graph: bool = False) -> list[Var] | None:
        """``tp.backward(self)``: gradients of this one-element Var for every param (as torch's
        ``loss.backward()``; gradients are recomputed, not accumulated)."""
        return self._tape.backward(self, create_graph=create_graph)

    @property
    def grad(self) -> Any:
        """d loss / d self from the last backward: ``tp.grad(self)`` (a read-only array), the
        gradient Var after ``backward(create_graph=True)``, None before a backward (none since
        the last ``reset_to``, or one whose loss came before this node)."""
        tape = self._tape
        tape._check_var(self, "grad")
        held = tape._grad_vars
        if held is not None and held[0] == tape.backward_count:
            v = held[1].get(self._index)
            if v is not None and v.alive:
                return v
        loss = tape._grad_loss
        if loss is None or self._index > loss:
            return None
        return tape.grad(self)

    # ---------------------------------------------------------------- values out
    def item(self) -> float:
        """The value of a one-element Var as a Python float (a host read)."""
        n = int(np.prod(self.shape))
        if n != 1:
            raise ValueError(f"item: {self!r} has {n} elements; expected exactly one "
                             "(e.g. a loss); use numpy() for arrays")
        return float(self.numpy().reshape(()))

    def __float__(self) -> float:
        return self.item()

    def numpy(self) -> np.ndarray:
        """A host numpy copy of the value (valid after any later reset or close)."""
        tape = self._tape
        tape._check_var(self, "numpy")
        return np.array(tape.backend.to_numpy(tape.value(self)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    # ---------------------------------------------------------------- methods as in numpy
    @property
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

    def __repr__(self) -> str:
        if not self.alive:
            return f"<Var of dropped node {self._index}>"
        rg = " requires_grad" if self.requires_grad else ""
        return f"<Var {self._index}: {self.op} {self.shape} {self.dtype.name}{rg}>"

    # ---------------------------------------------------------------- operators
    def __add__(self, other: Any) -> Var:
        if _is_scalar(other):
            return ops.adds(self, _exact(self._tape, other))
        return ops.add(self, other)

    def __radd__(self, other: Any) -> Var:
        if _is_scalar(other):
            return ops.adds(self, _exact(self._tape, other))
        return ops.add(other, self)

    def __sub__(self, other: Any) -> Var:
        if _is_scalar(other):  # x - s == x + (-s): negating the rounded scalar is exact
            return ops.adds(self, -_exact(self._tape, other))
        return ops.sub(self, other)

    def __rsub__(self, other: Any) -> Var:
        # s - x == (-x) + s exactly in IEEE arithmetic
        if _is_scalar(other):
            return ops.adds(ops.neg(self), _exact(self._tape, other))
        return ops.sub(other, self)

    def __mul__(self, other: Any) -> Var:
        if _is_scalar(other):
            return ops.muls(self, _exact(self._tape, other))
        return ops.mul(self, other)

    def __rmul__(self, other: Any) -> Var:
        if _is_scalar(other):
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

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self._tape._alive(self) and self.dtype == np.bool_:
            raise TypeError(f"the truth value of {self!r} is ambiguous (a bool Var is a mask, "
                            "not a Python bool): use it in g.where, or .numpy() to read it; "
                            "compare Vars by identity with `is`")
        return True

    def __neg__(self) -> Var:
        return ops.neg(self)

    def __pos__(self) -> Var:
        return self


from . import ops  # noqa: E402  (ops imports Var: bound after the class exists)
