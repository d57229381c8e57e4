"""The sim backend: the CUDA kernels compiled with the system C++ compiler, run on the CPU."""

from __future__ import annotations

from typing import Any

from .host_arrays import HostArray, HostKernelBackend


class SimArray(HostArray):
    """A numpy array owned by the sim backend (a distinct type, so backends never mix)."""

    backend_name = "sim"


class SimBackend(HostKernelBackend):
    """Runs every op's CUDA source on the CPU (blocks one at a time, threads as fibers)."""

    name = "sim"
    array_type = SimArray

    def _build_module(self, source: str, kernels: tuple) -> Any:
        from ..runtime.sim import SimModule

        return SimModule(source, kernels)
