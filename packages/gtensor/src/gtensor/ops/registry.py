"""The op registry: every op is one ``Op`` object holding all of its definition."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import dtypes
from ..dtypes import ANY, BOOL, FLOAT, INT, NUMBER, TYPE_DTYPES, FloatType
from ..kernels import Kernel, KernelSet
from .checks import Checks

# infer(shapes, attrs) -> (out_shape, normalized attrs); raises ValueError/TypeError naming the op.
Infer = Callable[[tuple, dict], tuple[tuple, dict]]
# reference(*numpy arrays, **attrs) -> numpy array: the definition, in numpy.
Reference = Callable[..., Any]
# launch(rt, ks, inputs, out, **attrs): enqueue the op's kernels on a kernel runtime (sim, cpu
# or cuda); ``ks`` is the op's ``KernelSet`` for the call's float dtype (its CUDA kernels on
# sim and cuda, its cpu kernels on cpu) and ``rt.launch`` takes one of them.
Launch = Callable[..., None]
# vjp(be, g, inputs, out, needs, **attrs) -> one gradient (or None) per input, written only in
# backend ops; gradients may have the broadcast output shape (the tape reduces them once).
Vjp = Callable[..., tuple]
# kernels(ft) -> the __global__ kernels of this op for one float dtype (``dtypes.F64``/``F32``).
Kernels = Callable[[FloatType], list[Kernel]]

INFER_CACHE = 4096  # shape-rule results kept per op (cleared when full)


@dataclass(frozen=True, eq=False)
class Op:
    """One op: shape rule, numpy reference, CUDA and CPU kernels + launch, and backward rule.

    ``cpu`` gives the op's host kernels for the ``cpu`` backend: the same names and parameters
    as its CUDA kernels (so one ``launch`` drives both), bodies written as CPU loops that keep
    the op's order. ``infer`` is memoized by (input shapes, attrs) for hashable attrs.
    """

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
    cpu: Kernels | None = None
    # what each array input is (``gtensor.dtypes``: FLOAT, INT, BOOL); empty: all float
    types: tuple[str, ...] = ()
    out_type: str = FLOAT  # the result: the op's float dtype, int64, bool, or ANY's dtype
    # check(inputs, attrs): the checks that read input DATA (ids in range), run by every
    # backend before the op executes (never inside ``launch``, which plans may run on stand-ins)
    check: Callable[..., None] | None = None
    # what the op's test tables run (``gtensor.ops.checks``): declared here, an op needs no row
    # written in any table; None: the tables hold hand-written rows for it
    checks: Checks | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "infer", _memoized(self.infer))
        object.__setattr__(self, "nin", self.arity)  # read on every call: a plain attribute
        if self.types and len(self.types) != len(self.inputs):
            raise ValueError(f"op {self.name}: types {self.types} do not match inputs "
                             f"{self.inputs}")
        bad = [t for t in self.types if t not in (FLOAT, INT, BOOL, ANY, NUMBER)]
        bad += [self.out_type] if self.out_type not in (FLOAT, INT, BOOL, ANY) else []
        if bad:
            raise ValueError(f"op {self.name}: unknown input/result type(s) {bad}")
        if NUMBER in self.types and self.out_type != BOOL:
            raise ValueError(f"op {self.name}: NUMBER inputs give a bool result (a "
                             f"comparison); got {self.out_type}")
        # typed: some input or the result is never a float (the checked path); an ANY op
        # called on floats takes the fast path, on int64 / bool data the checked one
        object.__setattr__(self, "typed", any(t not in (FLOAT, ANY) for t in self.types)
                           or self.out_type not in (FLOAT, ANY))
        object.__setattr__(self, "_sets", {})

    def kernel_set(self, ft: FloatType, cpu: bool = False) -> KernelSet:
        """The op's kernels for ``ft`` (its cpu kernels with ``cpu``), built once: the very
        Kernel objects the modules compile and ``launch`` receives."""
        key = (ft, cpu)
        ks = self._sets.get(key)
        if ks is None:
            make = self.cpu if cpu else self.kernels
            made = [_intern(k, cpu) for k in (make(ft) if make else ())]
            ks = self._sets[key] = KernelSet(self.name, ft, made)
        return ks

    def float_type(self, inputs: Any, out: Any) -> FloatType:
        """The float dtype a call's kernels are chosen by: the result's when it is a float,
        else the first float input's (a comparison, argmax); an op with neither (int64 in and
        out) runs its float64 kernels."""
        if self.out_type == FLOAT:
            return dtypes.BY_DTYPE[out.dtype]
        if self.out_type == ANY:  # int64 / bool data moves with the float64 kernels' set
            return dtypes.BY_DTYPE.get(out.dtype, dtypes.F64)
        for i, x in enumerate(inputs):
            if self.variadic or self.input_type(i) == FLOAT:
                return dtypes.BY_DTYPE[x.dtype]
            if self.input_type(i) == NUMBER and x.dtype in dtypes.BY_DTYPE:
                return dtypes.BY_DTYPE[x.dtype]
        return dtypes.F64

    def result_dtype(self, inputs: Any, attrs: dict) -> np.dtype:
        """The dtype of the result on ``inputs`` (arrays) with normalized ``attrs``: int64 /
        bool for index and mask results, else the float inputs' dtype (or attrs["dtype"])."""
        if self.out_type == ANY:
            return np.dtype(inputs[0].dtype)
        if self.out_type != FLOAT:
            return TYPE_DTYPES[self.out_type]
        for i, x in enumerate(inputs):
            if self.variadic or self.input_type(i) == FLOAT:
                return np.dtype(x.dtype)
        return np.dtype(attrs["dtype"])

    def input_type(self, i: int) -> str:
        """What input ``i`` is: ``gtensor.dtypes.FLOAT``, ``INT``, ``BOOL`` or ``ANY`` (a
        variadic op's one type for every array)."""
        if not self.types:
            return FLOAT
        return self.types[0] if self.variadic else self.types[i]

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


def attr_key(value: Any) -> Any:
    """A hashable key of an attr value that tells apart values comparing equal: 1, 1.0 and
    True (by type), 0.0 and -0.0 (by sign). TypeError for unhashable values (lists, dicts)."""
    t = type(value)
    if t is bool or t is int or t is str or value is None:  # the common attrs: no more tests
        return (t, value)
    if t is float:
        return (t, value, math.copysign(1.0, value))
    if t is tuple:
        # ints alone (axes, shapes): the tuple itself; no other tuple's key equals it (their
        # element keys start with a type)
        for x in value:
            if type(x) is not int:
                return (tuple, *map(attr_key, value))
        return (tuple, value)
    if isinstance(value, (float, np.floating)):
        return (t, value, math.copysign(1.0, value))
    hash(value)
    return (t, value)


def _memoized(infer: Infer) -> Infer:
    """``infer`` remembering its results; a raising call is not remembered (so it raises again).

    Results are (shape, attrs) with a fresh attrs dict per call, so callers may keep or change
    it. The rules are pure functions of the shapes and attrs, so a hit returns what a call would.
    """
    if getattr(infer, "memoized", False):
        return infer
    cache: dict = {}

    def memo(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        key = (shapes_,)
        try:
            for k, v in attrs.items():
                key += (k, attr_key(v))
            hit = cache.get(key)
        except TypeError:
            return infer(shapes_, attrs)
        if hit is None:
            hit = infer(shapes_, attrs)
            if len(cache) >= INFER_CACHE:
                cache.clear()
            cache[key] = hit
        return hit[0], dict(hit[1])

    memo.memoized = True
    memo.__wrapped__ = infer
    memo.__doc__ = infer.__doc__
    return memo


REGISTRY: dict[str, Op] = {}
_KERNELS: dict[tuple[str, bool], Kernel] = {}  # (name, cpu) -> the one Kernel object


def _intern(k: Kernel, cpu: bool) -> Kernel:
    """The one object of kernel ``k`` (ops sharing a kernel, like the movement ops' copy, get
    the same object); RuntimeError when a name is defined twice with different text."""
    have = _KERNELS.setdefault((k.name, cpu), k)
    if have is not k and have.source() != k.source():
        raise RuntimeError(f"{'cpu ' if cpu else ''}kernel {k.name} is defined twice with "
                           "different text")
    return have


def register(op: Op) -> Op:
    """Add ``op`` to the registry (names are unique)."""
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is defined twice")
    REGISTRY[op.name] = op
    return op


# The in-place optimizer updates (``ops/updates.py``): not graph ops (no tape function, no
# backward), but kernels of the same modules, registered here beside the ops.
UPDATES: dict[str, Any] = {}


def register_update(update: Any) -> Any:
    """Add an in-place update (``ops.updates.Update``) to the registry (names are unique)."""
    if update.name in UPDATES or update.name in REGISTRY:
        raise ValueError(f"update {update.name!r} is defined twice")
    UPDATES[update.name] = update
    return update


def kernel_owners() -> tuple:
    """Everything that owns kernels of the CUDA / cpu modules: the ops, then the updates."""
    return (*REGISTRY.values(), *UPDATES.values())


def get(name: str) -> Op:
    """The op called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {sorted(REGISTRY)}") from None
