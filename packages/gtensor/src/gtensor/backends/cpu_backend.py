"""The cpu backend: every op's host kernels (``Op.cpu``) compiled natively, bit-equal to numpy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..kernels import Kernel
from ..ops import REGISTRY, Op
from ..ops.registry import attr_key
from .base import Backend
from .host_arrays import HostArray, HostKernelBackend, aligned_empty

PLAN_CACHE = 4096  # prepared launches kept (cleared when full)
_SLOW = object()  # marks a call the hot path leaves to Backend.apply


class CpuArray(HostArray):
    """A numpy array owned by the cpu backend (a distinct type, so backends never mix)."""

    backend_name = "cpu"


class _Planner:
    """The runtime an op's ``launch`` sees while its plan is made: launches are kept, not run."""

    def __init__(self, be: CpuBackend) -> None:
        self.be = be
        self.launches: list[tuple[Kernel, Any, Any, tuple]] = []

    def geom(self, values: tuple) -> Any:
        """A geometry array (the plan keeps it alive)."""
        return self.be.geom(values)

    def launch(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any]) -> None:
        """Keep the launch for the plan."""
        self.launches.append((kernel, grid, block, tuple(args)))


class CpuBackend(HostKernelBackend):
    """Runs every op as native CPU loops that keep the op's defined order (see docs/semantics)."""

    name = "cpu"
    array_type = CpuArray
    uses_cpu_kernels = True

    def __init__(self) -> None:
        super().__init__()
        self._plans: dict[tuple, Any] = {}
        # (op, input dtypes and shapes, raw attrs) -> (out shape, dtype, plan): a call seen
        # before skips shape inference and the plan lookup; the checks that depend on more
        # than shapes and dtypes (contiguity, the out= buffer, overlap) still run every call.
        self._calls: dict[tuple, tuple] = {}

    # ---------------------------------------------------------------- the hot path
    def apply(self, op: Op | str, inputs: Sequence[Any], out: Any = None, **attrs: Any) -> Any:
        """``Backend.apply`` (same checks, same errors), remembering each call's shape work."""
        if isinstance(op, str):
            op = REGISTRY[op]
        key = self._call_key(op, inputs, attrs)
        hit = self._calls.get(key) if key is not _SLOW else None
        if hit is None:
            result = Backend.apply(self, op, inputs, out, **attrs)
            if (key is not _SLOW and not op.typed and self._module is not None
                    and self._module.fast):  # typed ops: the checked path (data checks)
                self._remember(key, op, inputs, attrs)
            return result
        out_shape, dtype, plan = hit
        for x in inputs:
            if not x.flags.c_contiguous:  # a view: Backend.apply copies it first
                return Backend.apply(self, op, inputs, out, **attrs)
        if out is None:
            out = CpuArray(out_shape, dtype)
        elif (type(out) is not CpuArray or out.shape != out_shape or out.dtype != dtype
              or not (flags := out.flags).c_contiguous or not flags.writeable):
            self._check_out(op.name, out, out_shape, dtype, list(inputs))  # raises
        status = self._module.run(plan.addr, *inputs, out)
        if status:
            self._failed(op, status)
        return out

    @staticmethod
    def _call_key(op: Op, inputs: Sequence[Any], attrs: dict) -> Any:
        """The hot-path key of a call, or _SLOW (foreign inputs, unhashable attrs)."""
        n = len(inputs)
        if n == 2:
            a, b = inputs
            if type(a) is not CpuArray or type(b) is not CpuArray:
                return _SLOW
            key = (op, a.dtype, a.shape, b.dtype, b.shape)
        elif n == 1:
            (a,) = inputs
            if type(a) is not CpuArray:
                return _SLOW
            key = (op, a.dtype, a.shape)
        else:
            if any(type(x) is not CpuArray for x in inputs):
                return _SLOW
            key = (op, *[(x.dtype, x.shape) for x in inputs])
        if attrs:
            try:
                for k, v in attrs.items():
                    key += (k, attr_key(v))
            except TypeError:
                return _SLOW
        return key

    def _remember(self, key: tuple, op: Op, inputs: Sequence[Any], attrs: dict) -> None:
        """After a successful checked call: keep its out shape, dtype and plan for the next."""
        full = dict(op.defaults)
        full.update(attrs)
        out_shape, norm = op.infer(tuple([x.shape for x in inputs]), full)
        dtype = inputs[0].dtype if inputs else norm["dtype"]
        plan = self._plans.get(self._plan_key(op, dtype, inputs, norm))
        if plan is None:
            return
        if len(self._calls) >= PLAN_CACHE:
            self._calls.clear()
        self._calls[key] = (out_shape, dtype, plan)

    @staticmethod
    def _failed(op: Op, status: int) -> None:
        """Raise for a nonzero status of the C door."""
        if status == 2:
            raise ValueError(f"{op.name}: out shares memory with an input; expected a separate "
                             "buffer")
        raise RuntimeError(f"cpu: {op.name}: the kernel plan failed (status {status})")

    @property
    def module(self) -> Any:
        """The cpu module (each kernel compiled on its first use, then cached on disk and in
        memory)."""
        if self._module is None:
            with self._lock:
                if self._module is None:
                    from ..runtime.cpu import CpuModule
                    from ..runtime.cpu_source import cpu_kernels

                    self._module = CpuModule(cpu_kernels())
        return self._module


    # ---------------------------------------------------------------- arrays

    # ---------------------------------------------------------------- execution
    def _check_out(self, op: str, out: Any, shape: tuple, dtype: Any, inputs: list) -> None:
        """As ``Backend._check_out``; on the fast door the overlap test runs in C (exact for
        C-contiguous arrays, which inputs and out are here) just before the kernels."""
        if not self.module.fast:
            return super()._check_out(op, out, shape, dtype, inputs)
        return super()._check_out(op, out, shape, dtype, ())

    def _execute(self, op: Op, inputs: list, out_shape: tuple, dtype: np.dtype,
                 attrs: dict, out: Any = None) -> Any:
        if op.cpu is None:
            raise NotImplementedError(f"{op.name}: the op has no cpu kernels (Op.cpu); run it on "
                                      "the numpy or sim backend")
        if out is None:
            out = aligned_empty(out_shape, dtype).view(CpuArray)
        module = self._module or self.module
        if not module.fast:
            op.launch(self, self.kernels_for(op, inputs, out), inputs, out, **attrs)
            return out
        try:
            key = self._plan_key(op, dtype, inputs, attrs)
            plan = self._plans.get(key)
        except TypeError:  # an unhashable attr: plan this call only
            key, plan = None, None
        if plan is None:
            plan = self._plan(op, inputs, out, attrs)
            if key is not None:
                if len(self._plans) >= PLAN_CACHE:
                    self._plans.clear()
                self._plans[key] = plan
        status = module.run(plan.addr, *inputs, out)
        if status:
            self._failed(op, status)
        return out

    @staticmethod
    def _plan_key(op: Op, dtype: Any, inputs: Sequence[Any], attrs: dict) -> tuple:
        """The plan cache key: op, dtype, input shapes, normalized attrs (TypeError if
        unhashable)."""
        key = (op, dtype, *[x.shape for x in inputs])
        if op.typed:  # the result's dtype does not name the kernel: the inputs' dtypes do
            key += tuple([x.dtype for x in inputs])
        if attrs:  # in name order: the same attrs given in another order are the same plan
            key += tuple([(k, attr_key(attrs[k])) for k in sorted(attrs)])
        return key

    def _plan(self, op: Op, inputs: list, out: Any, attrs: dict) -> Any:
        """The checked, encoded launches of ``op`` for these shapes, dtype and attrs."""
        slots = [np.empty(x.shape, x.dtype).view(CpuArray) for x in inputs]
        slots.append(np.empty(out.shape, out.dtype).view(CpuArray))
        planner = _Planner(self)
        with np.errstate(over="ignore"):  # a scalar attr rounds to +-inf in float32: defined
            op.launch(planner, self.kernels_for(op, slots[:-1], slots[-1]), slots[:-1],
                      slots[-1], **attrs)
        return self.module.plan(planner.launches, slots)
