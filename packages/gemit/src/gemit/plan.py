"""From a traced episode to a straight-line program: local buffers, leaf layout, kernel calls.

The trace (``gtape.trace.trace``) ran the episode's forward and backward on the ``sim`` backend
and kept every kernel launch with its checked arguments: the very buffer arrays and scalars.
Planning only names things: every data array an argument points into becomes a local buffer of
its type -- float (``b``), int64 (``ix``: indices, labels, argmax results) or bool (``mk``:
masks) -- (arrays that share memory, e.g. views, become one buffer and offsets into it), every
int64 geometry array becomes a constant table, every scalar a literal. No arithmetic is written
here.
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
    """A pointer argument: ``offset`` elements into a local buffer of ``kind`` (or a geometry
    table)."""

    kind: str  # "buf" (float), "ibuf" (int64), "mbuf" (bool) or "geom"
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
    """A leaf's home: elements ``[start, start + size)`` of the params / example / example_ids
    vector; ``kind`` is its local buffer's kind (``Ref.kind``)."""

    buf: int
    offset: int
    start: int
    size: int
    kind: str = "buf"

# the typed data arrays a kernel may read or write: numpy dtype name -> Ref kind
TYPED_KINDS = {"int64": "ibuf", "bool": "mbuf"}


@dataclass
class Program:
    """A per-example loss and gradient as local buffers and a list of kernel calls."""

    dtype: np.dtype
    sizes: list[int] = field(default_factory=list)  # elements per local float buffer
    isizes: list[int] = field(default_factory=list)  # elements per local int64 buffer
    msizes: list[int] = field(default_factory=list)  # elements per local bool buffer
    geoms: list[np.ndarray] = field(default_factory=list)  # int64 tables
    # (kind, buf) -> (offset, data): leaves that are neither params nor inputs
    baked: dict[tuple[str, int], tuple[int, np.ndarray]] = field(default_factory=dict)
    params: list[Slot] = field(default_factory=list)  # copied in from ``params``
    inputs: list[Slot] = field(default_factory=list)  # copied in from ``example``
    ids: list[Slot] = field(default_factory=list)  # int64 / bool, from ``example_ids``
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

    @property
    def n_ids(self) -> int:
        """Length of the ``example_ids`` vector (0: the function has no such parameter)."""
        return sum(s.size for s in self.ids)


def _span(a: np.ndarray) -> tuple[int, int]:
    """The [first, past-last) byte addresses ``a`` occupies."""
    return byte_bounds(a)


class _Buffers:
    """Arrays of one kind grouped by the memory they occupy: overlapping spans are one buffer."""

    def __init__(self, arrays: list[np.ndarray], itemsize: int, kind: str = "buf") -> None:
        spans = sorted({_span(a) for a in arrays})
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.itemsize, self.kind = itemsize, kind

    def ref(self, a: np.ndarray) -> Ref:
        lo, _ = _span(a)
        for i, (s, e) in enumerate(zip(self.starts, self.ends)):
            if s <= lo < e:
                off, rem = divmod(lo - s, self.itemsize)
                if rem:
                    raise AssertionError(f"gemit: array at byte offset {lo - s} of buffer {i} "
                                         "is not aligned to its element size")
                return Ref(self.kind, i, off)
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
    arrays: dict[str, list[np.ndarray]] = {"buf": [], "ibuf": [], "mbuf": []}
    for v in [*t.values, *(g for g in t.grads if g is not None)]:
        arrays[_kind(v.dtype.name, dt)].append(v)
    geoms: dict[tuple, int] = {}
    prog = Program(dt)
    for launch in launches:
        for p, a in zip(launch.kernel.params, launch.args):
            if p.is_pointer and p.is_geometry:
                key = tuple(np.asarray(a).tolist())
                if key not in geoms:
                    geoms[key] = len(prog.geoms)
                    prog.geoms.append(np.array(key, dtype=np.int64))
            elif p.is_pointer:
                if p.dtype not in (dt.name, *TYPED_KINDS):
                    raise NotImplementedError(
                        f"gemit.plan: kernel {launch.kernel.name} reads {p.dtype} data "
                        f"({p.name}) on a {dt.name} episode; expected {dt.name}, int64 or bool")
                arrays[_kind(p.dtype, dt)].append(a)
    bufs = {kind: _Buffers(arrs, np.dtype(_DT.get(kind, dt)).itemsize, kind)
            for kind, arrs in arrays.items()}
    prog.sizes, prog.isizes = bufs["buf"].sizes(), bufs["ibuf"].sizes()
    prog.msizes = bufs["mbuf"].sizes()
    for launch in launches:
        args: list[Any] = []
        for p, a in zip(launch.kernel.params, launch.args):
            if p.is_pointer and p.is_geometry:
                args.append(Ref("geom", geoms[tuple(np.asarray(a).tolist())], 0))
            elif p.is_pointer:
                args.append(bufs[_kind(p.dtype, dt)].ref(a))
            else:
                args.append(a)
        prog.calls.append(Call(launch.kernel, tuple(args), launch.tag))
    _layout(prog, t, bufs, params, inputs)
    return prog


_DT = {"ibuf": np.int64, "mbuf": np.bool_}


def _kind(dtype_name: str, dt: np.dtype) -> str:
    """The buffer kind of a data array of ``dtype_name`` in a ``dt`` episode."""
    kind = TYPED_KINDS.get(dtype_name)
    if kind is not None:
        return kind
    if dtype_name != dt.name:
        raise AssertionError(f"gemit: a {dtype_name} array in a {dt.name} episode")
    return "buf"


def _ref(bufs: dict[str, _Buffers], a: np.ndarray, dt: np.dtype) -> Ref:
    return bufs[_kind(a.dtype.name, dt)].ref(a)


def _layout(prog: Program, t: Trace, bufs: dict[str, _Buffers], params: list[int],
            inputs: list[int]) -> None:
    """Leaf homes: params and inputs from the vectors (float inputs from ``example``, int64 /
    bool ones from ``example_ids``, each in the given order), every other leaf baked."""
    dt = t.dtype
    given = set(params) | set(inputs)
    floats = [i for i in inputs if _kind(t.values[i].dtype.name, dt) == "buf"]
    typed = [i for i in inputs if i not in floats]
    for slots, indices in ((prog.params, params), (prog.inputs, floats), (prog.ids, typed)):
        start = 0
        for i in indices:
            r = _ref(bufs, t.values[i], dt)
            size = int(np.prod(t.nodes[i].shape))
            slots.append(Slot(r.index, r.offset, start, size, r.kind))
            start += size
    start = 0
    for i in params:
        r = bufs["buf"].ref(t.grads[i])
        size = int(np.prod(t.nodes[i].shape))
        prog.grads.append(Slot(r.index, r.offset, start, size))
        start += size
    for n in t.nodes:
        if n.is_leaf and n.index not in given:
            r = _ref(bufs, t.values[n.index], dt)
            prog.baked[(r.kind, r.index)] = (r.offset, t.value(n.index).ravel())
    prog.loss = bufs["buf"].ref(t.values[t.loss])
    written = _written(prog)
    for slot in [*prog.params, *prog.inputs, *prog.ids]:
        if (slot.kind, slot.buf) in written:
            raise AssertionError(f"gemit: leaf buffer {slot.buf} is written by a kernel; leaves "
                                 "must be read-only during an episode")


def _written(prog: Program) -> set[tuple[str, int]]:
    """(kind, buffer)s some call writes (non-const pointer arguments)."""
    out = set()
    for c in prog.calls:
        for p, a in zip(c.kernel.params, c.args):
            if p.is_pointer and not p.is_const:
                out.add((a.kind, a.index))
    return out
