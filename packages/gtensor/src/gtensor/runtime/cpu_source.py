"""The cpu module: every op's host kernels (``Op.cpu``) after the shared ``__device__`` functions.

The scalar functions are the very text the CUDA module holds (``gtensor.scalar.dsl``), so an
elementwise op runs the same arithmetic on every backend; the kernels are collected from the
registry, one per name, and must have the names and parameters of the op's CUDA kernels.
"""

from __future__ import annotations

from functools import cache

from ..cuda_source import device_functions, device_text
from ..dtypes import FLOATS
from ..kernels import Kernel
from ..ops.registry import kernel_owners

_HEADER = """\
// gtensor cpu module (generated from gtensor's op definitions; do not edit).
// Device functions: the CUDA module's text. Kernels: each op's CPU loops (Op.cpu).
"""


@cache
def cpu_kernels() -> tuple[Kernel, ...]:
    """Every op's CPU kernels for both dtypes, without duplicates (ops may share kernels).

    An op without ``cpu`` kernels is left out (the backend refuses to run it, naming it;
    tests/test_registry.py requires them of every op).
    """
    seen: dict[str, Kernel] = {}
    for op in kernel_owners():  # the ops, then the in-place updates
        if getattr(op, "cpu", True) is None:
            continue
        for ft in FLOATS:
            for k in op.kernel_set(ft, cpu=True).kernels:
                if k.name in seen and seen[k.name].source() != k.source():
                    raise RuntimeError(f"cpu kernel {k.name} is defined twice with different "
                                       "text")
                seen[k.name] = k
    return tuple(seen.values())


@cache
def cpu_module_source() -> str:
    """The module text: device functions (those the CUDA kernels call: the CPU kernels call
    the same ones), then the CPU kernels (plain C++ functions)."""
    parts = [_HEADER, device_text(device_functions())]
    parts += [k.source() for k in cpu_kernels()]
    return "\n".join(parts)
