"""Recording kernel launches: run ops on a kernel backend and keep every launch for replay.

A ``Recorder`` is a backend (sim or cuda underneath) whose op calls execute as usual and are
also appended, launch by launch, to the current ``Tape of launches`` (a ``list[Launch]``).
Arrays a recorded op allocates, and the geometry arrays of its launches, are owned by the
recording (never evicted), so replaying the launches later re-runs exactly the same kernels on
exactly the same buffers: whatever was written into an input buffer since is what they read.

>>> import numpy as np, gtensor
>>> from gtensor.recording import Recorder
>>> rec = Recorder(gtensor.backend("sim"))
>>> x = rec.asarray(np.array([1.0, 2.0]))
>>> with rec.recording() as launches:
...     y = rec.exp(x)
>>> [l.kernel.name for l in launches]
['k_exp_f64']
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .backends.delegating import ArraysOf
from .backends.kernel_backend import KernelBackend
from .kernels import Kernel

T = TypeVar("T")


@dataclass(frozen=True)
class Launch:
    """One recorded kernel launch: the kernel, its checked arguments and launch dims.

    ``tag`` is whatever the recorder's ``tag`` was when the launch happened (a capture uses the
    tape node the launch belongs to); ``run`` re-enqueues the launch (prepared once).
    """

    kernel: Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple
    tag: Any
    run: Callable[[], None]


class Recorder(ArraysOf, KernelBackend):
    """A kernel backend that executes every op on ``inner`` and records its launches."""

    def __init__(self, inner: KernelBackend) -> None:
        if not isinstance(inner, KernelBackend):
            raise TypeError(f"Recorder: inner is {type(inner).__name__}; expected a kernel "
                            "backend (gtensor.backend('sim') or gtensor.backend('cuda'))")
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.uses_cpu_kernels = inner.uses_cpu_kernels
        self.tag: Any = None
        self._owned_geoms: dict[tuple, Any] = {}
        self._into: list[Launch] | None = None
        # per recorded launch (by id, while recording): the byte ranges it reads, and all it
        # touches (``redirect_output`` scans them; a replaced launch's entry is dropped)
        self._touches: dict[int, tuple[list, list]] = {}

    # ---------------------------------------------------------------- recording
    @contextlib.contextmanager
    def recording(self, into: list[Launch] | None = None) -> Iterator[list[Launch]]:
        """Append every launch made inside the block to ``into`` (a new list by default)."""
        launches = [] if into is None else into
        if self._into is not None:
            raise RuntimeError("Recorder: already recording; recordings do not nest")
        self._into = launches
        try:
            yield launches
        finally:
            self._into = None
            self._touches.clear()

    # ---------------------------------------------------------------- the kernel door
    @property
    def module(self) -> Any:
        """The inner backend's compiled module."""
        return self.inner.module

    def launch(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any]) -> None:
        """Run the launch now and, while recording, keep it (prepared) for replay."""
        kernel, values, g, b = self.module.checked(kernel, grid, block, args)
        run = self.module.bind(kernel, values, g, b)
        if self._into is not None:
            self._into.append(Launch(kernel, g, b, tuple(values), self.tag, run))
        run()

    def redirect_output(self, src: Any, dst: Any) -> bool:
        """Stand in for a copy of ``src`` into ``dst``: make the recorded launch that alone
        wrote ``src`` write ``dst`` instead (the same kernel on the same inputs, so the same
        bits), and copy ``src`` into ``dst`` now, unrecorded. Returns whether it did.

        Only when the replay cannot tell: ``src`` and ``dst`` have one shape, dtype and
        C-contiguous layout; exactly one launch of this recording touches ``src`` -- it writes
        ``src`` (that very array) as its one output and reads nothing of it (no const pointer
        over it, not a read-modify-write kind) -- and no launch from it on touches ``dst``.
        That one launch then wrote every element of ``src``: each op's launches write all of
        their output (the eager tape reuses output buffers unzeroed on that ground), and no
        other launch wrote any. The caller vouches that nothing else reads ``src`` from here
        on (a gradient nobody stores: ``gtape``'s backward for a parameter's own buffer).
        """
        launches = self._into
        if launches is None or not _same_layout(src, dst):
            return False
        s, d = _span(src), _span(dst)
        writer = None
        touches = self._touches
        for k in range(len(launches) - 1, -1, -1):
            launch = launches[k]
            known = touches.get(id(launch))
            if known is None:
                reads, writes = _touched(launch)
                known = touches[id(launch)] = (reads, reads + writes)
            reads, spans = known
            if writer is None and any(_overlap(d, w) for w in spans):
                return False  # dst touched after the writer (or the writer touches it)
            if any(_overlap(s, w) for w in spans):
                if writer is not None:
                    return False  # a second launch touches src
                outs = [j for j, p in enumerate(launch.kernel.params)
                        if p.is_pointer and not p.is_const]
                if (getattr(launch.kernel.form, "in_place", False) or len(outs) != 1
                        or launch.args[outs[0]] is not src
                        or any(_overlap(s, r) for r in reads)):
                    return False
                writer = (k, outs[0])
        if writer is None:
            return False
        k, j = writer
        old = launches[k]
        touches.pop(id(old), None)
        args = list(old.args)
        args[j] = dst
        kernel, values, g, b = self.module.checked(old.kernel, old.grid, old.block, args)
        launches[k] = Launch(kernel, g, b, tuple(values), old.tag,
                             self.module.bind(kernel, values, g, b))
        self._into = None
        try:
            self.copy(src, out=dst)
        finally:
            self._into = launches
        return True

    def geom(self, values: tuple) -> Any:
        """A geometry array owned by this recorder (one per distinct value, never evicted)."""
        key = tuple(int(v) for v in values)
        arr = self._owned_geoms.get(key)
        if arr is None:
            arr = self._owned_geoms[key] = self.inner.geom_array(key)
        return arr

    def __repr__(self) -> str:
        return f"<Recorder over {self.inner!r}>"


def address(a: Any) -> int:
    """The address of an array's first element (numpy, sim, cpu or cupy)."""
    data = getattr(a, "data", None)
    return int(data.ptr) if hasattr(data, "ptr") else int(a.__array_interface__["data"][0])


def _span(a: Any) -> tuple[int, int]:
    """The byte range [start, end) of array ``a``: its nbytes from its first element (every
    array a launch takes is C-contiguous -- the kernel door refuses others -- and
    ``redirect_output`` checks its own two)."""
    start = address(a)
    return start, start + int(a.nbytes)


def _overlap(x: tuple[int, int], y: tuple[int, int]) -> bool:
    """Whether two byte ranges share a byte."""
    return x[0] < x[1] and y[0] < y[1] and x[0] < y[1] and y[0] < x[1]


def _touched(launch: Launch) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The byte ranges ``launch`` reads and writes (its data arrays; geometry left out)."""
    reads, writes = [], []
    for p, v in zip(launch.kernel.params, launch.args):
        if p.is_pointer and not p.is_geometry:
            (reads if p.is_const else writes).append(_span(v))
    return reads, writes


def _same_layout(a: Any, b: Any) -> bool:
    """Same shape and dtype, both C-contiguous."""
    return (tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype
            and bool(a.flags.c_contiguous) and bool(b.flags.c_contiguous))


def replayable(rec: Recorder, launches: Sequence[Launch]) -> Callable[[], None]:
    """The recorded ``launches`` as one callable that re-runs them in order.

    On the cpu backend the list is encoded once as the module's plan, so a call is ONE native
    call (its interpreter walks the launches in C); on sim and cuda a call runs each launch's
    prepared ``run`` (on cuda: enqueued on the current stream). The callable keeps the launches
    (and so their buffers) alive.
    """
    kept = tuple(launches)
    if rec.name == "cpu":
        module = rec.module
        plan = module.plan([(x.kernel, x.grid, x.block, x.args) for x in kept], [])

        def run_plan() -> None:
            status = module.run(plan.addr)
            if status:
                raise RuntimeError(f"cpu: a recorded launch sequence failed (status {status})")

        run_plan.keep = (plan, kept)
        return run_plan
    runs = tuple(x.run for x in kept)

    def run_each() -> None:
        for run in runs:
            run()

    run_each.keep = kept
    return run_each


def recordable(be: Any) -> bool:
    """Whether ops on ``be`` can be recorded for replay: a kernel backend (cpu, sim, cuda)
    that is not itself recording (the numpy backend has no kernels to record)."""
    return isinstance(be, KernelBackend) and not isinstance(be, Recorder)


def record(be: KernelBackend, fn: Callable[[Recorder], T]) -> tuple[T, Callable[[], None]]:
    """Run ``fn(rec)`` on a Recorder over ``be``, recording every launch; returns what ``fn``
    returned and the launches as one replayable callable (``replayable``)."""
    rec = Recorder(be)
    with rec.recording() as launches:
        result = fn(rec)
    return result, replayable(rec, launches)
