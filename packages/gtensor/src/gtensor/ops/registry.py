"""The op registry: every op is one ``Op`` object holding all of its definition."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..kernels import Kernel

# infer(shapes, attrs) -> (out_shape, normalized attrs); raises ValueError/TypeError naming the op.
Infer = Callable[[tuple, dict], tuple[tuple, dict]]
# reference(*numpy arrays, **attrs) -> numpy array: the definition, in numpy.
Reference = Callable[..., Any]
# launch(rt, inputs, out, **attrs): enqueue the op's kernels on a kernel runtime (sim or cuda).
Launch = Callable[..., None]
# vjp(be, g, inputs, out, needs, **attrs) -> one gradient (or None) per input, written only in
# backend ops; gradients may have the broadcast output shape (the tape reduces them once).
Vjp = Callable[..., tuple]
# kernels(dtype_suffix) -> the __global__ kernels of this op for one dtype ("f64" or "f32").
Kernels = Callable[[str], list[Kernel]]


@dataclass(frozen=True, eq=False)
class Op:
    """One op: shape rule, numpy reference, CUDA kernels + launch, and backward rule."""

    name: str
    inputs: tuple[str, ...]  # names of the array inputs; ("xs",) with arity -1 for a list
    attrs: tuple[str, ...]
    infer: Infer
    reference: Reference
    kernels: Kernels
    launch: Launch
    vjp: Vjp | None = None
    doc: str = ""
    # names of attrs that have defaults, with the defaults
    defaults: dict = field(default_factory=dict)

    @property
    def arity(self) -> int:
        """Number of array inputs; -1 when the op takes one list of arrays (concat)."""
        return -1 if self.variadic else len(self.inputs)

    @property
    def variadic(self) -> bool:
        """True when the op takes a list of arrays."""
        return self.inputs == ("*xs",)

    @property
    def differentiable(self) -> bool:
        """Whether the op has a backward rule."""
        return self.vjp is not None

    def __repr__(self) -> str:
        return f"<op {self.name}>"


REGISTRY: dict[str, Op] = {}


def register(op: Op) -> Op:
    """Add ``op`` to the registry (names are unique)."""
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is defined twice")
    REGISTRY[op.name] = op
    return op


def get(name: str) -> Op:
    """The op called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {sorted(REGISTRY)}") from None
