"""Where a program's launches run: the CPU simulator, a CUDA stream and its graphs, or the
cpu backend's native plan interpreter."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from gtensor.recording import Launch, Recorder, replayable


class Device:
    """Runs prepared launches; on sim a "graph" is the launch list run in order."""

    name = "sim"

    def run(self, launches: Sequence[Launch]) -> None:
        """Enqueue ``launches`` in order (on sim: run them now)."""
        for launch in launches:
            launch.run()

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        """A block whose transfers and launches are ordered with the program's launches."""
        yield

    def graph(self, launches: Sequence[Launch]) -> Any:
        """The launches as one replayable unit."""
        return tuple(launch.run for launch in launches)

    def launch_graph(self, graph: Any) -> None:
        """Run a unit made by ``graph``."""
        for run in graph:
            run()


class CudaDevice(Device):
    """A dedicated CUDA stream: replays are enqueued on it; a whole step is one CUDA graph.

    The stream is a blocking one, so work cupy enqueues on the legacy default stream (e.g.
    allocations zeroed by an optimizer) stays ordered with the program's work.
    """

    name = "cuda"

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        cupy.cuda.Device().synchronize()  # the capture ran on the default stream
        self.stream = cupy.cuda.Stream(non_blocking=False)

    def run(self, launches: Sequence[Launch]) -> None:
        """Enqueue ``launches`` on the program's stream."""
        with self.stream:
            for launch in launches:
                launch.run()

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        """Make the program's stream current (transfers and reads then queue behind it)."""
        with self.stream:
            yield

    def graph(self, launches: Sequence[Launch]) -> Any:
        """The launches captured from the stream into one instantiated CUDA graph."""
        with self.stream:
            self.stream.begin_capture()
            try:
                for launch in launches:
                    launch.run()
            finally:
                graph = self.stream.end_capture()
        return graph

    def launch_graph(self, graph: Any) -> None:
        """Launch the graph on the program's stream."""
        graph.launch(self.stream)


class CpuDevice(Device):
    """The cpu backend's compiled kernels: a launch list runs as ONE native call.

    The list is encoded once (kernel index and arguments, buffers by address) as the cpu
    module's plan, which its interpreter walks in C: no Python between the kernels of a step.
    """

    name = "cpu"

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.module = rec.module
        self._plans: dict[tuple, Any] = {}

    def graph(self, launches: Sequence[Launch]) -> Any:
        """The launches encoded as one native program (kept with the launches it needs)."""
        return replayable(self.rec, launches)

    def launch_graph(self, graph: Any) -> None:
        """Run a program made by ``graph`` (one call)."""
        graph()

    def run(self, launches: Sequence[Launch]) -> None:
        """Run ``launches`` as one native call (their program is made once, then reused)."""
        key = tuple(id(launch) for launch in launches)
        program = self._plans.get(key)
        if program is None:
            program = self._plans[key] = self.graph(launches)
        self.launch_graph(program)


def device_for(rec: Recorder) -> Device:
    """The device matching a recorder's backend ("sim", "cuda" or "cpu")."""
    if rec.name == "cuda":
        return CudaDevice()
    return CpuDevice(rec) if rec.name == "cpu" else Device()
