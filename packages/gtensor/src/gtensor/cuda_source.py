"""The CUDA module: every op's ``__device__`` functions and ``__global__`` kernels, one text.

The same text is compiled by NVRTC for the GPU and by the system C++ compiler for ``sim``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

from .dtypes import FLOATS
from .kernels import DeviceFn, Kernel
from .ops.registry import kernel_owners
from .scalar.dsl import ScalarFn, device_sources

_HEADER = """\
// gtensor CUDA module (generated from gtensor's op definitions; do not edit).
// Every floating-point operation is a correctly rounded __d*_rn / __f*_rn intrinsic:
// no compiler may fuse (FMA) or reorder it. Compile with --fmad=false.
"""


@cache
def module_kernels() -> tuple[Kernel, ...]:
    """Every kernel of every op, for both dtypes, without duplicates (ops may share kernels)."""
    seen: dict[str, Kernel] = {}
    for op in kernel_owners():  # the ops, then the in-place updates
        for ft in FLOATS:
            for k in op.kernel_set(ft).kernels:
                if k.name in seen and seen[k.name].source() != k.source():
                    raise RuntimeError(f"kernel {k.name} is defined twice with different text")
                seen[k.name] = k
    return tuple(seen.values())


@cache
def device_functions() -> tuple[ScalarFn | DeviceFn, ...]:
    """What the kernels compute with (each kernel's ``calls``), in registry order: scalar
    functions and row helpers, the roots of the module's ``__device__`` functions."""
    seen: dict[int, ScalarFn | DeviceFn] = {}
    for k in module_kernels():
        for fn in k.calls:
            seen.setdefault(id(fn), fn)
    return tuple(seen.values())


def device_text(fns: Sequence[ScalarFn | DeviceFn]) -> str:
    """``__device__`` definitions of ``fns`` and everything they call, callees first: scalar
    functions (and theirs), then row helpers in dependency order."""
    helpers: list[DeviceFn] = []
    scalars: list[ScalarFn] = []

    def visit(fn: ScalarFn | DeviceFn) -> None:
        if isinstance(fn, DeviceFn):
            if fn in helpers:
                return
            for dep in fn.calls:
                visit(dep)
            helpers.append(fn)
        elif fn not in scalars:
            scalars.append(fn)

    for fn in fns:
        visit(fn)
    return "\n".join([device_sources(scalars), *(h.text for h in helpers)])


_NAME = re.compile(r"\bgt_\w+")


@cache
def _named_functions() -> dict[str, ScalarFn | DeviceFn]:
    """Every device function of the module by its C name (``gt_*``): the kernels' roots and
    all they call, in the order ``device_functions`` meets them; a helper text that defines
    several functions (Philox's) answers for each ``gt_*`` name it holds that no function of
    its own has."""
    named: dict[str, ScalarFn | DeviceFn] = {}

    def visit(fn: ScalarFn | DeviceFn) -> None:
        name = fn.name if isinstance(fn, DeviceFn) else fn.cname
        if name in named:
            return
        named[name] = fn
        if isinstance(fn, ScalarFn) and fn.first_stage:  # its text defines the stage too
            named[fn.first_cname] = fn
        for dep in fn.calls if isinstance(fn, DeviceFn) else fn.dependencies():
            visit(dep)

    for fn in device_functions():
        visit(fn)
    for fn in [f for f in named.values() if isinstance(f, DeviceFn)]:
        for name in _NAME.findall(fn.text):
            named.setdefault(name, fn)
    return named


def device_text_for(text: str) -> str:
    """The ``__device__`` definitions a piece of kernel text names (its ``gt_*`` functions)
    and everything they call, as ``device_text`` writes them: what a translation unit holding
    only that text needs (a cpu kernel's library, a fused cpu step)."""
    named = _named_functions()
    used = set(_NAME.findall(text))
    return device_text([fn for name, fn in named.items() if name in used])


@cache
def module_source() -> str:
    """The full module text: device functions (collected from the kernels), then kernels."""
    parts = [_HEADER, device_text(device_functions())]
    parts += [k.source() for k in module_kernels()]
    return "\n".join(parts)
