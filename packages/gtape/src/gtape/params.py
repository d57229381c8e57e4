"""The parameter-store protocol: what an optimizer (gopt) reads and writes of its parameters.

A ``gtape.Tape`` is one; so are a replay program's store (``ggpu_replay``'s ``ParamStore``,
the device buffers of a captured step) and a gdist replica's (``gdist.store.GradStore``).
gopt accepts exactly the objects that implement it (``isinstance(x, ParamStore)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from .var import Var


@runtime_checkable
class ParamStore(Protocol):
    """Parameters as an optimizer sees them: their values, gradients and writable buffers."""

    @property
    def backend(self) -> Any:
        """The backend the buffers live on (an optimizer runs its update kernels there)."""

    @property
    def dtype(self) -> np.dtype:
        """The parameters' float dtype."""

    @property
    def backward_count(self) -> int:
        """Backward passes so far (an optimizer refuses a second step without a new one)."""

    def check_param(self, where: str, p: Any) -> Var:
        """``p`` checked to be a live parameter of this store (errors name ``where``)."""

    def value(self, p: Var) -> Any:
        """The parameter's value."""

    def grad(self, p: Var) -> Any:
        """The parameter's gradient from the last backward."""

    def param_buffer(self, p: Var) -> Any:
        """The parameter's value buffer, writable: an in-place update, then ``note_updated``."""

    def note_updated(self, p: Var) -> None:
        """The parameter's buffer was overwritten in place (by ``param_buffer``'s user)."""

    def set_value(self, p: Var, x: Any) -> None:
        """Overwrite the parameter's value with ``x`` (a copy)."""


MEMBERS = ("backend", "dtype", "backward_count", "check_param", "value", "grad", "param_buffer",
           "note_updated", "set_value")


def missing_members(x: Any) -> list[str]:
    """The members of ``ParamStore`` that ``x`` (a class or an object) lacks."""
    return [m for m in MEMBERS if not hasattr(x, m)]
