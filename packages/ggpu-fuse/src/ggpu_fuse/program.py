"""The fused program: the replay program's interface, its launches replaced by fused kernels."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ggpu_replay import Program
from gtape.recording import Recording
from gtensor.cuda_source import device_text
from gtensor.kernels import Kind
from gtensor.recording import Launch

from .analysis import analyse, buffer
from .codegen import generate
from .planner import Segment, plan

_HEADER = """\
// ggpu-fuse: generated kernels of one captured training step (do not edit).
// Every statement is one iteration of a recorded launch, computed with the launch's own
// __device__ functions in the same order: fusion moves work between threads, never changes it.
"""


@dataclass
class Fused:
    """One phase (forward, backward or the whole step) after fusion."""

    units: list[Launch]
    segments: list[Segment]
    rows: int
    launches_before: int
    compile_seconds: float
    module: Any
    keep: list[Any]  # index tables

    def lines(self) -> list[str]:
        """The plan, one line per launch of the fused phase."""
        out = []
        for k, seg in enumerate(self.segments):
            tags = sorted({str(i.launch.tag) for i in seg.items}, key=_tag_order)
            what = f"{seg.cls:4s} x{len(seg.items):<3d}" if seg.fused else \
                f"node {seg.items[0].name}"
            out.append(f"{k:3d}  {what}  nodes {', '.join(tags)}")
        return out


def _tag_order(tag: str) -> tuple:
    return (0, int(tag)) if tag.isdigit() else (1, tag)


class FusedProgram(Program):
    """A captured program whose forward, backward and whole step run as fused kernels.

    Made by ``ggpu_fuse.fuse(prog)``; it shares ``prog``'s device buffers (parameters,
    inputs, gradients), so it is a different way of running the same step, with the same
    interface (``set_input``, ``forward``, ``backward``, ``step``, ``loss``, ``adam``...).
    """

    def __init__(self, prog: Program, rows: int | None = None,
                 alone: tuple[Kind | str, ...] | None = None) -> None:
        super().__init__(prog.tape, prog.trace)
        self._rows = batch_rows(prog) if rows is None else rows
        self._alone = kinds(ALONE if alone is None else alone)
        # per phase, the latest fusion, recorded from (keyed by) exactly those launches, which
        # it keeps alive (so their ids stay theirs); a re-recorded optimizer segment re-fuses
        self._fused: dict[str, Recording[tuple[Fused, tuple[Launch, ...]]]] = {}
        self._compile_seconds = 0.0

    def units(self, phase: str, launches: list[Launch]) -> list[Launch]:
        """The fused kernels of ``phase`` (planned and compiled on first use, then reused)."""
        rec = self._fused.setdefault(phase, Recording(f"the fused {phase}"))
        key = tuple(id(launch) for launch in launches)
        held = rec.current(key)
        if held is None:
            fused = self._fuse(phase, launches)
            self._compile_seconds += fused.compile_seconds
            held = rec.keep((fused, tuple(launches)), key)
        return held[0].units

    def fused(self, phase: str) -> Fused | None:
        """The latest fusion of ``phase`` ("forward", "backward", "step"), or None."""
        rec = self._fused.get(phase)
        held = None if rec is None else rec.held
        return None if held is None else held[0]

    @property
    def plan(self) -> list[str]:
        """One line per launch of the whole step (or of forward + backward before the first
        ``step``): index, class (row / tail / flat, or the per-node kernel), nodes."""
        step = self.fused("step")
        if step is not None:
            return step.lines()
        return [*self._phase("forward").lines(), *self._phase("backward").lines()]

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling generated kernels so far (0 when the disk cache had them)."""
        return self._compile_seconds

    def _phase(self, phase: str) -> Fused:
        launches = self.trace.forward if phase == "forward" else self.trace.backward
        self.units(phase, launches)
        return self._fused[phase].require(tuple(id(launch) for launch in launches))[0]

    def _fuse(self, phase: str, launches: list[Launch]) -> Fused:
        infos = [analyse(i, launch) for i, launch in enumerate(launches)]
        tr = self.trace  # node values and gradients: read by later phases and the user
        keep = [buffer(a) for a in [*tr.values, *tr.grads] if a is not None]
        segments, rows = plan(infos, self._rows, self._alone, keep)
        rec = self.trace.rec
        digest = hashlib.sha256(repr([launch.tag for launch in launches]).encode()).hexdigest()
        tables: list[Any] = []
        generated = []
        for k, seg in enumerate(segments):
            if seg.fused:
                g = generate(seg, f"kfuse_{phase}_{digest[:8]}_{k}_{seg.cls}", rows,
                             lambda host: rec.inner.geom_array(tuple(int(x) for x in host)))
                tables += g.tables
                generated.append((k, g))
        module, seconds = None, 0.0
        if generated:
            kernels = [g.kernel for _, g in generated]
            calls = list({id(fn): fn for kern in kernels for fn in kern.calls}.values())
            source = "\n".join([_HEADER, device_text(calls), *(kern.source() for kern in kernels)])
            t0 = time.perf_counter()
            module = rec.inner.compile_module(source, tuple(kernels))
            seconds = time.perf_counter() - t0
        by_segment = dict(generated)
        units: list[Launch] = []
        for k, seg in enumerate(segments):
            if k not in by_segment:
                units += [info.launch for info in seg.items]
                continue
            g = by_segment[k]
            checked = module.checked(g.kernel, g.grid, g.block, g.args)
            units.append(Launch(checked[0], checked[2], checked[3], tuple(checked[1]),
                                f"fused {seg.cls}", module.bind(*checked)))
        return Fused(units, segments, rows, len(launches), seconds, module, tables)


# launch kinds every fused program keeps alone in their segments unless ``fuse`` is told
# otherwise (a test switch: the ggpu-fuse tests run each fused program with () and
# (Kind.MATMUL,))
ALONE: tuple[Kind, ...] = ()


def kinds(names: Sequence[Kind | str]) -> tuple[Kind, ...]:
    """``names`` as ``gtensor.kernels.Kind`` members (a member, or its value such as
    "matmul"); ValueError naming the accepted ones."""
    out = []
    for k in names:
        try:
            out.append(Kind(k))
        except ValueError:
            raise ValueError(f"fuse: alone names {k!r}, not a kernel kind; expected Kind "
                             f"members or their values {[m.value for m in Kind]}") from None
    return tuple(out)


def batch_rows(prog: Program) -> int:
    """The batch's row count R: the leading dimension of the program's largest input (the
    minibatch a training step refreshes), 0 when it has no input of two or more dimensions."""
    shapes = [n.shape for n in prog.nodes if n.op.name == "const" and len(n.shape) >= 2]
    if not shapes:
        return 0
    return max(shapes, key=lambda s: (int(np.prod(s)), s[0]))[0]


def fuse(prog: Program, rows: int | None = None,
         alone: tuple[Kind | str, ...] | None = None) -> FusedProgram:
    """A program with ``prog``'s interface whose launches run fused (see the package doc):
    generated CUDA kernels on sim / cuda; on cpu each phase (forward, backward, the whole step)
    is ONE compiled C++ function (``cpu_program.CompiledCpuProgram``).

    ``rows`` fixes the batch row count R of the block-per-row kernels (default: the leading
    dimension of the program's largest input, see ``batch_rows``). ``alone`` names launch
    kinds the planner keeps each in a segment of its own (default ``ALONE``, empty; the tests
    force every matmul alone this way). Forward and backward are planned and compiled now;
    the whole step when its optimizer's step has been recorded.
    """
    if not isinstance(prog, Program):
        raise TypeError(f"fuse: expected a ggpu_replay Program, got {type(prog).__name__}")
    if prog.backend.name not in ("sim", "cuda", "cpu"):
        raise ValueError(f"fuse: the program runs on {prog.backend.name!r}; expected a program "
                         "captured on 'sim' or 'cuda' (CUDA kernels) or 'cpu' (one compiled "
                         "function per phase)")
    if prog.backend.name == "cpu":
        from .cpu_program import CompiledCpuProgram

        fp: FusedProgram = CompiledCpuProgram(prog, rows, alone)
    else:
        fp = FusedProgram(prog, rows, alone)
    fp.plan  # noqa: B018 - plans and compiles forward and backward now
    return fp


def worthwhile(prog: Program) -> bool:
    """Whether fusing ``prog`` pays: on cuda when it cuts launches (launch latency is the
    cost it removes); on sim never (blocks run one at a time there, so fusion only adds
    barriers: it exists to verify the bits)."""
    if prog.backend.name != "cuda":
        return False
    fp = prog if isinstance(prog, FusedProgram) else FusedProgram(prog)
    before = len(prog.forward_launches) + len(prog.backward_launches)
    after = len(fp._phase("forward").units) + len(fp._phase("backward").units)
    return after < before


__all__ = ["Fused", "FusedProgram", "fuse", "worthwhile"]
