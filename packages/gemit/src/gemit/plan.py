"""From a traced episode to a straight-line program: local buffers, leaf layout, kernel calls.

The trace (``gtape.trace.trace``) ran the episode's forward and backward on the ``sim`` backend
and kept every kernel launch with its checked arguments: the very buffer arrays and scalars.
Planning only names things: every float array an argument points into becomes a local buffer
(arrays that share memory, e.g. views, become one buffer and offsets into it), every int64
geometry array becomes a constant table, every scalar a literal. No arithmetic is written here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gtape.trace import Trace
from gtensor.kernels import Kernel
from numpy.lib.array_utils import byte_bounds


@dataclass(frozen=True)
class Ref:
    """A pointer argument: ``offset`` elements into float buffer ``buf`` (or geometry table)."""

    kind: str  # "buf" or "geom"
    index: int
    offset: int


@dataclass(frozen=True)
class Call:
    """One kernel launch: the kernel and its arguments (Refs and numpy scalars)."""

    kernel: Kernel
    args: tuple
    node: Any  # the tape node the launch belongs to (the trace's tag)


@dataclass(frozen=True)
class Slot:
    """A leaf's home: elements ``[start, start + size)`` of the params / example vector."""

    buf: int
    offset: int
    start: int
    size: int


@dataclass
class Program:
    """A per-example loss and gradient as local buffers and a list of kernel calls."""

    dtype: np.dtype
    sizes: list[int] = field(default_factory=list)  # elements per local float buffer
    geoms: list[np.ndarray] = field(default_factory=list)  # int64 tables
    baked: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)  # buf -> (off, data)
    params: list[Slot] = field(default_factory=list)  # copied in from ``params``
    inputs: list[Slot] = field(default_factory=list)  # copied in from ``example``
    grads: list[Slot] = field(default_factory=list)  # copied out to ``grad_out``
    calls: list[Call] = field(default_factory=list)
    loss: Ref | None = None

    @property
    def kernels(self) -> list[Kernel]:
        """The distinct kernels the calls use, in first-use order."""
        seen: dict[str, Kernel] = {}
        for c in self.calls:
            seen.setdefault(c.kernel.name, c.kernel)
        return list(seen.values())

    @property
    def n_params(self) -> int:
        """Length of the ``params`` (and ``grad_out``) vector."""
        return sum(s.size for s in self.params)

    @property
    def n_example(self) -> int:
        """Length of the ``example`` vector."""
        return sum(s.size for s in self.inputs)


def _span(a: np.ndarray) -> tuple[int, int]:
    """The [first, past-last) byte addresses ``a`` occupies."""
    return byte_bounds(a)


class _Buffers:
    """Float arrays grouped by the memory they occupy: overlapping spans are one buffer."""

    def __init__(self, arrays: list[np.ndarray], itemsize: int) -> None:
        spans = sorted({_span(a) for a in arrays})
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.itemsize = itemsize

    def ref(self, a: np.ndarray) -> Ref:
        lo, _ = _span(a)
        for i, (s, e) in enumerate(zip(self.starts, self.ends)):
            if s <= lo < e:
                off, rem = divmod(lo - s, self.itemsize)
                if rem:
                    raise AssertionError(f"gemit: array at byte offset {lo - s} of buffer {i} "
                                         "is not aligned to its element size")
                return Ref("buf", i, off)
        raise AssertionError("gemit: an array of the trace lies in no planned buffer")

    def sizes(self) -> list[int]:
        return [(e - s) // self.itemsize for s, e in zip(self.starts, self.ends)]


def plan(t: Trace, params: list[int], inputs: list[int]) -> Program:
    """The program of trace ``t``: ``params`` / ``inputs`` are node indices, in vector order."""
    dt = t.dtype
    if t.rec.name != "sim":
        raise ValueError(f"gemit.plan: the trace ran on {t.rec.name!r}; expected 'sim' (host "
                         "arrays whose addresses identify buffers)")
    launches = [*t.forward, *t.backward]
    floats: list[np.ndarray] = [v for v in t.values] + [g for g in t.grads if g is not None]
    geoms: dict[tuple, int] = {}
    prog = Program(dt)
    for launch in launches:
        for p, a in zip(launch.kernel.params, launch.args):
            if p.is_pointer and not p.is_geometry and p.dtype != dt.name:
                raise NotImplementedError(
                    f"gemit.plan: kernel {launch.kernel.name} reads {p.dtype} data ({p.name}); "
                    "the emitted program holds only float buffers, so ops with int64 / bool "
                    "inputs are not emittable yet")
            if p.is_pointer and p.is_geometry:
                key = tuple(np.asarray(a).tolist())
                if key not in geoms:
                    geoms[key] = len(prog.geoms)
                    prog.geoms.append(np.array(key, dtype=np.int64))
            elif p.is_pointer:
                floats.append(a)
    bufs = _Buffers(floats, dt.itemsize)
    prog.sizes = bufs.sizes()
    for launch in launches:
        args: list[Any] = []
        for p, a in zip(launch.kernel.params, launch.args):
            if p.is_pointer and p.is_geometry:
                args.append(Ref("geom", geoms[tuple(np.asarray(a).tolist())], 0))
            elif p.is_pointer:
                args.append(bufs.ref(a))
            else:
                args.append(a)
        prog.calls.append(Call(launch.kernel, tuple(args), launch.tag))
    _layout(prog, t, bufs, params, inputs)
    return prog


def _layout(prog: Program, t: Trace, bufs: _Buffers, params: list[int],
            inputs: list[int]) -> None:
    """Leaf homes: params and inputs from the vectors, every other leaf baked as constants."""
    given = set(params) | set(inputs)
    for slots, indices in ((prog.params, params), (prog.inputs, inputs)):
        start = 0
        for i in indices:
            r = bufs.ref(t.values[i])
            size = int(np.prod(t.nodes[i].shape))
            slots.append(Slot(r.index, r.offset, start, size))
            start += size
    start = 0
    for i in params:
        r = bufs.ref(t.grads[i])
        size = int(np.prod(t.nodes[i].shape))
        prog.grads.append(Slot(r.index, r.offset, start, size))
        start += size
    for n in t.nodes:
        if n.is_leaf and n.index not in given:
            r = bufs.ref(t.values[n.index])
            prog.baked[r.index] = (r.offset, t.value(n.index).ravel())
    prog.loss = bufs.ref(t.values[t.loss])
    written = _written(prog)
    for slot in [*prog.params, *prog.inputs]:
        if slot.buf in written:
            raise AssertionError(f"gemit: leaf buffer {slot.buf} is written by a kernel; leaves "
                                 "must be read-only during an episode")


def _written(prog: Program) -> set[int]:
    """Buffers some call writes (non-const pointer arguments)."""
    out = set()
    for c in prog.calls:
        for p, a in zip(c.kernel.params, c.args):
            if p.is_pointer and not p.is_const:
                out.add(a.index)
    return out
