"""Generated kernels for fused segments, in the CUDA dialect gtensor's kernels are written in.

Every statement computes one iteration of a recorded launch exactly as its per-node kernel
does: the same ``__device__`` function (the launch's ``Kernel.calls``: ``gt_add_f64``,
``gt_dot_f64``, ``gt_sum_f64``...), the same index decoding from the same geometry arrays, the
same serial inner-loop order inside those functions. Only *which thread* computes an iteration,
and when, changes -- never how -- so a fused step is bitwise identical to the per-node replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gtensor.dtypes import BY_CTYPE, float_type
from gtensor.kernels import GEOMETRY, Kernel, Kind, Param
from gtensor.ops.forms import Copy

from .analysis import Info, address
from .planner import Segment

ROW_THREADS = 128
FLAT_BLOCK = 256
MAX_GRID = 4096


@dataclass
class Generated:
    """A generated kernel and the arguments of its one launch."""

    kernel: Kernel
    args: tuple
    grid: int
    block: int
    tables: list[Any]  # index tables owned by the fused program (kept alive)


class _Args:
    """The generated kernel's parameters: one per distinct array, in order of first use."""

    def __init__(self, ctype: str) -> None:
        self.ctype = ctype
        self.names: dict[int, str] = {}
        self.params: list[Param] = []
        self.values: list[Any] = []
        self.written: set[int] = set()

    def array(self, a: Any, writes: bool = False, index: bool = False) -> str:
        key = id(a) if index else address(a)
        if key not in self.names:
            self.names[key] = f"p{len(self.params)}"
            self.params.append(Param("const long long*", self.names[key], GEOMETRY) if index
                               else Param(f"const {self.ctype}*", self.names[key]))
            self.values.append(a)
        if writes:
            self.written.add(key)
        return self.names[key]

    def finish(self) -> tuple[tuple[Param, ...], tuple]:
        params = []
        for (key, name), p in zip(self.names.items(), self.params):
            if key in self.written:
                p = Param(self.ctype + "*", name)
            params.append(p)
        return tuple(params), tuple(self.values)


def _lit(value: Any, ctype: str) -> str:
    """An exact C literal of a scalar argument."""
    if ctype in ("long long", "int"):
        return f"({int(value)}LL)" if ctype == "long long" else f"({int(value)})"
    return BY_CTYPE[ctype].literal(float(value))


def _fn(info: Info, k: int = 0) -> str:
    """The name of the k-th function the launch's kernel computes with."""
    fn = info.launch.kernel.calls[k]
    return getattr(fn, "cname", None) or fn.name


def _statement(info: Info, v: dict[str, str], i: str) -> str:
    """One iteration ``i`` of the launch (its per-node kernel's body, for that index): its
    form's statement, with the same decode and calls as the per-node kernel."""
    a, t, k = info.args, _ctype_of(info), info.launch.kernel
    scalars = {p.name: _lit(a[p.name], p.ctype) for p in k.params if not p.is_pointer}
    calls = tuple(_fn(info, j) for j in range(len(k.calls)))
    return info.form.statement(calls, v, i, scalars, t, tuple(info.transposed))


def _ctype_of(info: Info) -> str:
    for p, val in zip(info.launch.kernel.params, info.launch.args):
        if p.is_pointer and not p.is_const:
            return float_type(val).ctype
    raise AssertionError(info.name)


def _bind(info: Info, args: _Args) -> dict[str, str]:
    """Parameter name of the launch -> the generated kernel's parameter holding that array."""
    out = {}
    for p, val in zip(info.launch.kernel.params, info.launch.args):
        if p.is_pointer:
            val = info.transposed.get(p.name, val)
            out[p.name] = args.array(val, writes=not p.is_const,
                                     index=p.ctype == "const long long*")
    return out


def _row_copy_tables(info: Info, rows: int, make: Any) -> tuple[Any, Any, Any]:
    """Per-row (out element, in element) tables of a copy, rows in order."""
    co = info.out.size // rows
    order = np.argsort(info.oo // co, kind="stable")
    row = (info.oo // co)[order]
    start = np.searchsorted(row, np.arange(rows + 1)).astype(np.int64)
    return (make(start), make(info.oo[order].astype(np.int64)),
            make(info.oi["x"][order].astype(np.int64)))


def generate(seg: Segment, name: str, rows: int, make_index: Any) -> Generated:
    """The kernel of a fused segment (``make_index``: host int64 array -> device array)."""
    ctype = _ctype_of(seg.items[0])
    args = _Args(ctype)
    tables: list[Any] = []
    lines: list[str] = []
    if seg.cls == "row":
        lines.append(f"    const long long t = threadIdx.x, nt = blockDim.x;\n"
                     f"    for (long long r = blockIdx.x; r < {rows}LL; r += gridDim.x) {{")
        for k, info in enumerate(seg.items):
            v = _bind(info, args)
            lines.append(f"        // {info.name} (launch {info.index}, node {info.launch.tag})")
            if isinstance(info.form, Copy) and not info.out_identity:
                start, oo, oi = _row_copy_tables(info, rows, make_index)
                tables += [start, oo, oi]
                s, o, i = (args.array(x, index=True) for x in (start, oo, oi))
                lines.append(f"        for (long long e = {s}[r] + t; e < {s}[r + 1]; e += nt) "
                             f"{v['y']}[{o}[e]] = {v['x']}[{i}[e]];")
            else:
                per_row = info.out.size // rows
                lines.append(f"        for (long long q = t; q < {per_row}LL; q += nt) {{\n"
                             f"            const long long i = r * {per_row}LL + q;\n"
                             f"            {_statement(info, v, 'i')}\n        }}")
            if k + 1 < len(seg.items):
                lines.append("        __syncthreads();")
        lines.append("        __syncthreads();\n    }")
        grid, block = min(rows, MAX_GRID), ROW_THREADS
    elif seg.cls == "tail":
        for info in seg.items:
            v = _bind(info, args)
            lines.append(f"    // {info.name} (launch {info.index}, node {info.launch.tag})\n"
                         f"    for (long long i = 0; i < {info.n}LL; ++i) {{\n"
                         f"        {_statement(info, v, 'i')}\n    }}")
        grid, block = 1, 1
    elif seg.cls == "flat":
        lines.append("    const long long start = (long long)blockIdx.x * blockDim.x + "
                     "threadIdx.x;\n    const long long step = (long long)gridDim.x * blockDim.x;")
        for info in seg.items:
            v = _bind(info, args)
            lines.append(f"    // {info.name} (launch {info.index}, node {info.launch.tag})\n"
                         f"    for (long long i = start; i < {info.n}LL; i += step) {{\n"
                         f"        {_statement(info, v, 'i')}\n    }}")
        most = max(info.n for info in seg.items)
        grid, block = max(1, min(MAX_GRID, -(-most // FLAT_BLOCK))), FLAT_BLOCK
    else:
        raise AssertionError(seg.cls)
    params, values = args.finish()
    calls = tuple({id(fn): fn for info in seg.items
                   for fn in info.launch.kernel.calls}.values())
    kernel = Kernel(name, params, "\n".join(lines), Kind.OTHER, calls)
    return Generated(kernel, values, grid, block, tables)
