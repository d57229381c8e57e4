"""What each recorded launch computes, read from its kernel's form and arguments.

For every launch: the buffers it writes (``writes``; ``out`` is the first, the only one unless
its form writes several through one index map) and the buffers it reads, and for each
iteration of its thread loop the element it writes and the elements it reads (index maps,
exact, computed from the very geometry arrays the kernel reads). Everything is asked of the
kernel's form (``Kernel.form``, ``gtensor.ops.forms``), never of its kind: whether a generated
kernel may compute the launch (``fuses``), its index maps, the operands it reads transposed in
place, its own row-alignment answer. A generated kernel computes the step's float type, so a
launch reading or writing int64 or bool data keeps its own. The planner asks two questions of
them:

* row-local for R rows: does iteration i, which writes row r of a row-shaped output (leading
  dimension R), read only row r of every row-shaped input? (block-per-row fusion)
* element-local: does iteration i write element i of its output, and read element i of an
  input (thread-local fusion)?
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gtensor.dtypes import FLOATS
from gtensor.kernels import Kernel, Kind
from gtensor.ops.forms import Copy, Form
from gtensor.recording import Launch, address

FLOAT_NAMES = frozenset(ft.name for ft in FLOATS)


@dataclass(frozen=True)
class Buffer:
    """A device array as the planner sees it: identity, extent, shape."""

    addr: int
    nbytes: int
    shape: tuple[int, ...]
    size: int

    def overlaps(self, other: Buffer) -> bool:
        """Whether the two byte ranges intersect."""
        return (self.nbytes > 0 and other.nbytes > 0 and self.addr < other.addr + other.nbytes
                and other.addr < self.addr + self.nbytes)


def buffer(a: Any) -> Buffer:
    """The Buffer of a device array."""
    return Buffer(address(a), int(a.nbytes), tuple(int(d) for d in a.shape), int(a.size))


def _host(a: Any) -> np.ndarray:
    """Host int64 values of a geometry array (numpy, sim or cupy)."""
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) and not isinstance(a, np.ndarray) else a,
                      dtype=np.int64)


@dataclass
class Info:
    """One launch, analysed."""

    index: int
    launch: Launch
    kind: Kind
    args: dict[str, Any]
    out: Buffer  # the first buffer written (a fusable launch writes only it)
    reads: list[tuple[str, Buffer]]  # (parameter name, buffer) of every array read
    n: int  # iterations of the thread loop
    # (parameter name, buffer) of every array written: every hazard is checked on each
    writes: list[tuple[str, Buffer]] = field(default_factory=list)
    oo: np.ndarray | None = None  # output element written by iteration i
    oi: dict[str, np.ndarray] = field(default_factory=dict)  # input element(s) read by it
    ranges: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # operands read transposed in place (a matmul's): the launch's own operand under its form's
    # flag, or the buffer a (dropped) transpose copy would read
    transposed: dict[str, Any] = field(default_factory=dict)
    form: Form | None = None  # the kernel's form: what fusion asks (None: keeps its launch)
    float_data: bool = True  # every data array of the launch has a float type

    @property
    def name(self) -> str:
        """The kernel's name."""
        return self.launch.kernel.name

    @property
    def written(self) -> list[Buffer]:
        """Every buffer the launch writes."""
        return [b for _, b in self.writes]

    def writes_into(self, b: Buffer) -> bool:
        """Whether the launch writes any byte of ``b``."""
        return any(w.overlaps(b) for _, w in self.writes)

    @property
    def reads_dropped(self) -> bool:
        """Whether an operand is read from a dropped transpose's source (not the recorded
        argument): the recorded launch alone would read the dead copy."""
        return any(src is not self.args[p] for p, src in self.transposed.items())

    @property
    def fusable(self) -> bool:
        """Whether a generated kernel can compute this launch's iterations: its form says it
        may, its data is of a float type, and a launch writing several buffers does so through
        its form's index maps, the same for each of them (``Form.writes_many``)."""
        if self.form is None or not self.float_data or not self.form.fuses(self.args):
            return False
        return len(self.writes) <= 1 or self.form.writes_many

    @property
    def out_identity(self) -> bool:
        """Iteration i writes output element i (and covers the whole output)."""
        return (self.oo is not None and self.n == self.out.size
                and bool(np.array_equal(self.oo, np.arange(self.n))))

    def aligned(self, param: str) -> bool:
        """Iteration i reads element i of input ``param`` (and only it)."""
        if param in self.ranges:
            lo, hi = self.ranges[param]
            return bool(np.array_equal(lo, np.arange(self.n)) and np.array_equal(lo, hi))
        return param in self.oi and bool(np.array_equal(self.oi[param], np.arange(self.n)))

    def row_local(self, rows: int) -> bool:
        """Block r can compute this launch's part of row r: the output is row-shaped and
        every row-shaped input is read only at the row being written (a launch writing several
        buffers never is: flat or tail segments only)."""
        return self.fusable and len(self.writes) == 1 and row_shaped(self.out, rows) and all(
            self.row_aligned(p, rows) or not row_shaped(b, rows) for p, b in self.reads)

    def row_aligned(self, param: str, rows: int) -> bool:
        """Iteration i reads input ``param`` only within the row of the element it writes."""
        b = dict(self.reads)[param]
        if not row_shaped(b, rows) or not row_shaped(self.out, rows):
            return False
        cb, co = b.size // rows, self.out.size // rows
        own = self.form.row_aligned(param, rows, self.args, self.transposed)
        if own is not None:  # the form's own answer (a matmul: row i of a, b read whole)
            return own
        row = self.oo // co
        if param in self.ranges:
            lo, hi = self.ranges[param]
            return bool(np.all(lo // cb == row) and np.all(hi // cb == row))
        return bool(np.all(self.oi[param] // cb == row))


def transpose_source(info: Info) -> Any | None:
    """The array a copy launch transposes (2-D, whole, contiguous output), else None."""
    if not isinstance(info.form, Copy) or len(info.out.shape) != 2 or not info.out_identity:
        return None
    x = info.args["x"]
    p_, q_ = info.out.shape
    if tuple(x.shape) != (q_, p_):
        return None
    i = np.arange(info.n)
    return x if np.array_equal(info.oi["x"], (i % q_) * p_ + i // q_) else None


def read_transposed(info: Info, param: str, source: Any) -> None:
    """Let matmul ``info`` read operand ``param`` as the transpose of ``source`` in place."""
    info.transposed[param] = source
    info.reads = [(p, buffer(source) if p == param else b) for p, b in info.reads]


def row_shaped(b: Buffer, rows: int) -> bool:
    """A buffer whose leading dimension is the R rows (row r: a contiguous run)."""
    return len(b.shape) >= 1 and b.shape[0] == rows and b.size > 0


def float_data(kernel: Kernel) -> bool:
    """Whether every data array of ``kernel`` has a float type (what generated kernels hold)."""
    return all(p.dtype in FLOAT_NAMES for p in kernel.params if p.is_pointer and not p.is_geometry)


def analyse(index: int, launch: Launch) -> Info:
    """The Info of one recorded launch (its kernel's form says how to read the args)."""
    k = launch.kernel
    form = k.form if isinstance(k.form, Form) else None
    args = {p.name: v for p, v in zip(k.params, launch.args)}
    writes = [(p.name, buffer(args[p.name])) for p in k.params
              if p.is_pointer and not p.is_const]
    reads = [(p.name, buffer(args[p.name])) for p in k.params
             if p.is_pointer and p.is_const and not p.is_geometry]
    if form is not None and form.in_place:  # written buffers read too (in-place updates)
        reads += writes
    out = writes[0][1] if writes else Buffer(0, 0, (), 0)
    info = Info(index, launch, k.kind, args, out, reads, 0, writes=writes, form=form,
                float_data=float_data(k))
    if info.fusable:  # the form owns its geometry's layout
        acc = form.index_maps(
            {p.name: _host(v) if p.is_geometry else v for p, v in zip(k.params, launch.args)})
        info.n, info.oo = acc.n, acc.oo
        info.oi.update(acc.oi)
        info.ranges.update(acc.ranges)
        info.transposed.update(form.transposed(args))
    return info
