"""A captured cpu program whose forward, backward and whole step each run as ONE compiled
function: ggpu-fuse's plan lowered to CPU loops (``cpu_codegen``)."""

from __future__ import annotations

import hashlib
import time

from ggpu_replay import Program
from ggpu_replay.device import Device
from gtensor.kernels import Kernel, Kind
from gtensor.recording import Launch

from .analysis import analyse, buffer
from .cpu_codegen import as_planned, build, compile_step, lower
from .planner import plan
from .program import Fused, FusedProgram


class CompiledCpuProgram(FusedProgram):
    """A cpu ``Program`` run as compiled functions (made by ``ggpu_fuse.fuse(prog)`` on a cpu
    program): the same buffers and interface as ``prog``, the same bits as its per-node step.

    ``fused(phase).module`` is the phase's ``CompiledStep`` (its ``source``, its
    ``set_parallel_work`` knob); ``plan`` lists the segments the function computes.
    """

    def __init__(self, prog: Program, rows: int | None = None,
                 alone: tuple[Kind | str, ...] | None = None) -> None:
        super().__init__(prog, rows, alone)
        self._device = Device()  # each unit's run is one native call: run them in order

    def _planned(self, launches: list[Launch]) -> tuple[list, int]:
        """(segments, rows): the plan over ``launches``."""
        planned = [as_planned(launch) for launch in launches]
        infos = [analyse(i, launch) for i, launch in enumerate(planned)]
        tr = self.trace
        # NOTE: every buffer is kept: no transpose copy is dropped, so each matmul reads
        # contiguous operands (unit-stride row tiles) and can always run as its per-node kernel
        keep = [buffer(a) for a in [*tr.values, *tr.grads] if a is not None]
        keep += [b for info in infos for b in info.written]
        return plan(infos, self._rows, self._alone, keep)

    @property
    def plan(self) -> list[str]:
        """One line per segment of the whole step (or of forward + backward before the first
        ``step``): index, class (row / tail / flat, or a per-node kernel call), nodes. The
        first call compiles forward and backward side by side (one compiler each)."""
        if self.fused("step") is None:
            bodies = []
            for phase, launches in (("forward", self.trace.forward),
                                    ("backward", self.trace.backward)):
                if self.fused(phase) is None:
                    segments, rows = self._planned(launches)
                    bodies.append(lower(segments, rows, list(launches), _name(phase, launches))[0])
            t0 = time.perf_counter()
            build(bodies)
            self._compile_seconds += time.perf_counter() - t0
        return super().plan

    def _fuse(self, phase: str, launches: list[Launch]) -> Fused:
        prelude = self._prelude(phase, launches)
        rest = list(launches[sum(p.launches_before for p in prelude):])
        segments, rows = self._planned(rest)
        t0 = time.perf_counter()
        step = compile_step(segments, rows, rest, _name(phase, launches), self.backend.module,
                            [p.module for p in prelude])
        seconds = time.perf_counter() - t0
        unit = Launch(Kernel(step.name, (), ""), (1, 1, 1), (1, 1, 1), (), f"compiled {phase}",
                      step)
        return Fused([unit], [s for p in prelude for s in p.segments] + segments, rows,
                     len(launches), seconds, step, step.arrays)

    def _prelude(self, phase: str, launches: list[Launch]) -> list[Fused]:
        """The compiled phases the whole step calls first: forward's and backward's (so its
        own unit compiles only the optimizer's loops, not both phases' again), when it starts
        with exactly their launches; [] for any other phase."""
        tr = self.trace
        head = [*tr.forward, *tr.backward]
        if phase != "step" or len(launches) < len(head) or any(
                a is not b for a, b in zip(launches, head)):
            return []
        return [self._phase("forward"), self._phase("backward")]


def _name(phase: str, launches: list[Launch]) -> str:
    """The compiled function's name: the phase and a digest of its launches' tags (a whole
    step's: of all of them, forward's and backward's included)."""
    digest = hashlib.sha256(repr([launch.tag for launch in launches]).encode()).hexdigest()
    return f"gtfuse_{phase}_{digest[:12]}"

