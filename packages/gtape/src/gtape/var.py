"""Var: a handle to one node of a Tape (an index plus the node's serial number)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .tape import Tape


class StaleVarError(RuntimeError):
    """A Var whose node was dropped by ``reset_to`` (or whose tape was closed) was used."""


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

    def __repr__(self) -> str:
        if not self.alive:
            return f"<Var of dropped node {self._index}>"
        rg = " requires_grad" if self.requires_grad else ""
        return f"<Var {self._index}: {self.op} {self.shape} {self.dtype.name}{rg}>"

    # operators and numpy-style methods: ``gtape.operators`` binds them (they run ops)
    __hash__ = object.__hash__  # ``==`` compares values (a mask): a Var hashes by identity

    def __bool__(self) -> bool:
        if self._tape._alive(self) and self.dtype == np.bool_:
            raise TypeError(f"the truth value of {self!r} is ambiguous (a bool Var is a mask, "
                            "not a Python bool): use it in g.where, or .numpy() to read it; "
                            "compare Vars by identity with `is`")
        return True
