"""Backends that run the ops' CUDA kernels (sim on the CPU, cuda on the GPU)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..cuda_source import module_kernels, module_source
from ..kernels import Kernel, KernelSet
from ..ops import Op
from .base import Backend

GEOM_CACHE = 4096


class KernelBackend(Backend):
    """Shared logic: lazy module build, geometry arrays, kernel launch."""

    runs_kernels = True
    uses_cpu_kernels = False  # which of an op's kernels run here: Op.cpu (True) or Op.kernels

    def __init__(self) -> None:
        self._module = None
        self._lock = threading.Lock()
        self._geoms: OrderedDict[tuple, Any] = OrderedDict()

    def _build_module(self, source: str, kernels: tuple) -> Any:
        raise NotImplementedError

    def geom_array(self, values: tuple) -> Any:
        """A new read-only int64 array of this backend holding ``values`` (launch geometry);
        host backends (sim, cpu) use a numpy array, cuda a device array."""
        arr = np.array(values, dtype=np.int64)
        arr.flags.writeable = False
        return arr

    def compile_module(self, source: str, kernels: tuple) -> Any:
        """A module of this backend's kind for other kernel text (generated fused kernels):
        the same compiler, flags and disk cache as the op kernels' module."""
        return self._build_module(source, tuple(kernels))

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new uninitialized array."""
        raise NotImplementedError

    @property
    def module(self) -> Any:
        """The compiled CUDA module (built on first use, then cached)."""
        if self._module is None:
            with self._lock:
                if self._module is None:
                    self._module = self._build_module(module_source(), module_kernels())
        return self._module

    def geom(self, values: tuple) -> Any:
        """A read-only int64 array of this backend holding ``values`` (cached by value)."""
        key = tuple(int(v) for v in values)
        with self._lock:
            arr = self._geoms.get(key)
            if arr is not None:
                self._geoms.move_to_end(key)
                return arr
        arr = self.geom_array(key)
        with self._lock:
            self._geoms[key] = arr
            if len(self._geoms) > GEOM_CACHE:
                self._geoms.popitem(last=False)
        return arr

    def launch(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any]) -> None:
        """Launch ``kernel`` (an entry of the op's KernelSet) on the module (arguments are
        checked against its signature)."""
        self.module.launch(kernel, grid, block, args)

    def kernels_for(self, op: Op, inputs: Sequence[Any], out: Any) -> KernelSet:
        """The op's kernels a call on this backend launches: for the call's float dtype, its
        cpu kernels on the cpu backend, its CUDA kernels on sim and cuda."""
        return op.kernel_set(op.float_type(inputs, out), self.uses_cpu_kernels)

    def _execute(self, op: Op, inputs: list, out_shape: tuple, dtype: np.dtype,
                 attrs: dict, out: Any = None) -> Any:
        if out is None:
            out = self.empty(out_shape, dtype)
        op.launch(self, self.kernels_for(op, inputs, out), inputs, out, **attrs)
        return out
