"""Render a planned program as C or CUDA text: gtensor's own kernel and device-function text,
wrapped for one thread, then the straight-line ``grad()`` that calls the kernels in order."""

from __future__ import annotations

import re

import numpy as np
from gtensor import cuda_source
from gtensor.dtypes import float_type
from gtensor.kernels import Kernel
from gtensor.scalar.dsl import device_sources

from .plan import Program, Ref
from .prelude import C_PRELUDE, CUDA_CLOSE, CUDA_OPEN, GEOMETRY

_CALLEE = re.compile(r"\bgt_\w+\b")
_SHARED = re.compile(r"\b__shared__\s+")


def _device_text(roots: list) -> str:
    """gtensor's ``__device__`` text for ``roots`` (scalar functions and row helpers)."""
    # NOTE: gtensor.cuda_source.device_text (scalar functions + row helpers) is new in gtensor;
    # without it every root is a scalar function and the scalar language's own emitter serves.
    text_of = getattr(cuda_source, "device_text", None)
    return text_of(roots) if text_of is not None else device_sources(roots)


def device_functions(kernels: list[Kernel]) -> str:
    """The ``__device__`` definitions the kernels call (``Kernel.calls``, with their callees),
    callees first: only what the episode needs."""
    text = _device_text(list({id(fn): fn for k in kernels for fn in k.calls}.values()))
    for k in kernels:
        missing = sorted(name for name in set(_CALLEE.findall(k.body))
                         if not re.search(rf"\b{name}\s*\(", text))
        if missing:
            raise NotImplementedError(f"gemit: kernel {k.name} calls {missing}, which its "
                                      "Kernel.calls does not declare; cannot emit it")
    return text


def literal(x: object, ctype: str) -> str:
    """An exact C literal of a kernel scalar argument (or table entry) of type ``ctype``."""
    if ctype == "bool":
        return "true" if bool(x) else "false"
    if ctype in ("long long", "int"):
        v = int(x)
        if v == -2**63:  # -9223372036854775808LL is unary minus on an out-of-range literal
            return "(-9223372036854775807LL - 1)"
        return f"{v}LL" if ctype == "long long" else str(v)
    if ctype == "double":
        v = float(np.float64(x))
        if np.isfinite(v):
            return f"({v.hex()})"
        return f"__longlong_as_double({int(np.float64(v).view(np.int64))}LL)"
    v32 = np.float32(x)
    if np.isfinite(v32):
        return f"({float(v32).hex()}f)"
    return f"__int_as_float({int(v32.view(np.int32))})"


def _kernel_function(k: Kernel, qualifier: str, per_thread: bool) -> str:
    body = _SHARED.sub("", k.body) if per_thread else k.body  # one thread's own storage
    return f"{qualifier} void gemit_{k.name}({k.signature()})\n{{\n{GEOMETRY}{body}\n}}\n"


# local array name prefix and C element type (None: the program's float type) per Ref kind
_LOCAL = {"buf": ("b", None), "ibuf": ("ix", "long long"), "mbuf": ("mk", "bool")}


def _arg(a: object, ctype: str) -> str:
    if isinstance(a, Ref):
        base = f"g{a.index}" if a.kind == "geom" else f"{_LOCAL[a.kind][0]}{a.index}"
        return base if a.offset == 0 else f"{base} + {a.offset}"
    return literal(a, ctype)


def _body(prog: Program, t: str, node_names: dict) -> list[str]:
    lines = []
    for kind, sizes in (("buf", prog.sizes), ("ibuf", prog.isizes), ("mbuf", prog.msizes)):
        pre, ct = _LOCAL[kind]
        for i, size in enumerate(sizes):
            lines.append(f"    {ct or t} {pre}{i}[{max(size, 1)}] = {{0}};")
    for i, g in enumerate(prog.geoms):
        vals = ", ".join(f"{int(v)}LL" for v in g)
        lines.append(f"    const long long g{i}[{max(len(g), 1)}] = {{{vals or '0'}}};")
    for (kind, buf), (off, data) in sorted(prog.baked.items()):
        pre, ct = _LOCAL[kind]
        vals = ", ".join(literal(v, ct or t) for v in data)
        lines.append("    {  /* a leaf that is neither a param nor an input: its value */")
        lines.append(f"        const {ct or t} k[{max(len(data), 1)}] = {{{vals or '0'}}};")
        lines.append(f"        for (int i = 0; i < {len(data)}; ++i) "
                     f"{pre}{buf}[{off} + i] = k[i];")
        lines.append("    }")
    for vec, slots in (("params", prog.params), ("example", prog.inputs)):
        for s in slots:
            lines.append(f"    for (int i = 0; i < {s.size}; ++i) "
                         f"b{s.buf}[{s.offset} + i] = {vec}[{s.start} + i];")
    for s in prog.ids:  # int64 inputs as given; a bool input is true where its id is nonzero
        pre = _LOCAL[s.kind][0]
        val = f"example_ids[{s.start} + i]" + (" != 0" if s.kind == "mbuf" else "")
        lines.append(f"    for (int i = 0; i < {s.size}; ++i) "
                     f"{pre}{s.buf}[{s.offset} + i] = {val};")
    last = object()
    for c in prog.calls:
        if c.node != last:
            lines.append(f"    /* node {c.node}: {node_names.get(c.node, '?')} */")
            last = c.node
        args = ", ".join(_arg(a, p.ctype) for p, a in zip(c.kernel.params, c.args))
        lines.append(f"    gemit_{c.kernel.name}({args});")
    for s in prog.grads:
        lines.append(f"    for (int i = 0; i < {s.size}; ++i) "
                     f"grad_out[{s.start} + i] = b{s.buf}[{s.offset} + i];")
    lines.append(f"    return b{prog.loss.index}[{prog.loss.offset}];")
    return lines


def signature(prog: Program, name: str) -> str:
    """``T name(const T *params, const T *example, T *grad_out)``; an episode with int64 / bool
    inputs takes them as ``const long long *example_ids`` after ``example``."""
    t = float_type(prog.dtype).ctype
    ids = ", const long long *example_ids" if prog.ids else ""
    return f"{t} {name}(const {t} *params, const {t} *example{ids}, {t} *grad_out)"


def render(prog: Program, name: str, target: str, header: str, node_names: dict) -> str:
    """The full source for ``target`` ("c" or "cuda")."""
    t = float_type(prog.dtype).ctype
    kernels = prog.kernels
    devs = device_functions(kernels)
    if target == "c":
        fns = "\n".join(_kernel_function(k, "static", False) for k in kernels)
        return "\n".join([header, C_PRELUDE, devs, fns, signature(prog, name), "{",
                          *_body(prog, t, node_names), "}", ""])
    fns = "\n".join(_kernel_function(k, "static __device__", True) for k in kernels)
    return "\n".join([header, CUDA_OPEN, devs, fns, f"__device__ {signature(prog, name)}", "{",
                      *_body(prog, t, node_names), "}", CUDA_CLOSE])
