"""The fusion plan of a captured cpu program lowered to ONE C++ function (CPU loops).

The planner reads the CUDA twin of each recorded cpu kernel (same name, same parameters: its
kind and form say what it computes) and cuts the launches into segments; each segment becomes
a loop nest in one generated function, compiled with the cpu runtime's flags
(``-ffp-contract=off``, no fast-math; ``kernel_flags``: also the first stages' flags when a
fused map runs a first-stage loop, which stays scalar without them) and cached on disk by
source hash:

* ``row``  -- rows of the batch in blocks (blocks split across threads): for each block, every
  launch of the segment in order over those rows (a matmul's row tile, then its epilogue: the
  bias add, the relu, the loss's elementwise chain, read back from L1);
* ``flat`` -- element blocks (split across threads): every launch's elements of the block in
  order (the optimizer's updates of all parameters in one loop);
* ``tail`` -- one thread, launches in order (the scalar chain);
* a segment of one launch (or ``node``), and a matmul too large for the row tile to pay (or
  reading an operand transposed under its ta / tb flag),
  calls the launch's own per-node cpu kernel: the function in its kernel library (the code the
  captured step runs), through the pointer table (``CpuModule.entry``), so the generated unit
  never compiles a kernel again (a GPT's forward: 70% of its instructions were such copies).

Each statement is one iteration of a recorded launch computed with the same scalar functions in
the same order (``codegen._statement``: the form's decode and calls); matmul rows keep each
output's k-ascending chain (``acc = a[i,0]*b[0,j]``, then ``acc = acc + a[i,k]*b[k,j]``).
Only which thread computes an output, and when, changes: the bits are the per-node step's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from gtensor.cuda_source import device_text_for
from gtensor.dtypes import CTYPES, FLOATS
from gtensor.kernels import Kernel
from gtensor.ops import REGISTRY
from gtensor.ops.forms import (
    FIRST_BLOCK,
    FIRST_STAGE_LOOP,
    Copy,
    Map,
    Product,
    Reduce,
    Zip,
    staged_block,
)
from gtensor.ops.registry import UPDATES
from gtensor.recording import Launch
from gtensor.runtime import cache, toolchain
from gtensor.runtime import cpu as cpurt

from .analysis import Info, address
from .codegen import _ctype_of, _fn, _lit, _row_copy_tables, _statement
from .planner import Segment

ROW_BLOCK = 8  # rows of a row segment one thread computes together
FLAT_BLOCK = 2048  # elements of a flat segment one thread computes together
# a fused matmul with at least this many multiply-adds runs as its per-node (register-tiled,
# packed) kernel instead: the row tile reads b unpacked and loses to the packed kernel from
# small sizes on (the w=64 AE step, fma, one thread, thread CPU time: 255 us with the row tile
# for every matmul under 2**20 MACs, 229 us with this bound; the per-node replay 226 us)
SPLIT_MACS = 1 << 14

_HELPERS = r"""
namespace gtfuse {
// The plain contract's steps of one output's chain (SIMD lanes hold independent outputs):
// acc = a[0]*b[0], then acc = acc + a[kk]*b[kk], each product and sum rounded (no FMA:
// -ffp-contract=off).
struct Plain {
    template <class S, class V>
    static __forceinline__ V first(S a, V b) { return a * b; }
    template <class S, class V>
    static __forceinline__ V next(S a, V b, V acc) { return acc + a * b; }
};
$CONTRACTS
// R rows of c (row pointers ar, cr; strides lda, ldc), columns [j0, j1), b row stride n:
// each output's chain over kk ascending, by contract C (SIMD lanes: independent outputs).
template <class T, int R, class C, int N>
static __forceinline__ void mm_cols(const T* __restrict__ ar, long long lda,
                                    const T* __restrict__ b, T* __restrict__ cr, long long ldc,
                                    long long k, long long n, long long j)
{
    typedef typename gtcpu::Vec<T, N>::type V;
    V acc[R];
    const V b0 = gtcpu::vload<V>(b + j);
    for (int r = 0; r < R; ++r) acc[r] = C::first(ar[r * lda], b0);
    for (long long kk = 1; kk < k; ++kk) {
        const V c0 = gtcpu::vload<V>(b + kk * n + j);
        for (int r = 0; r < R; ++r) acc[r] = C::next(ar[r * lda + kk], c0, acc[r]);
    }
    for (int r = 0; r < R; ++r) gtcpu::vstore(cr + r * ldc + j, acc[r]);
}

template <class T, int R, class C>
static inline void mm_tile(const T* __restrict__ ar, long long lda, const T* __restrict__ b,
                           T* __restrict__ cr, long long ldc, long long k, long long n,
                           long long j0, long long j1)
{
    constexpr int L = 64 / sizeof(T);
    typedef typename gtcpu::Vec<T, L>::type V;
    long long j = j0;
    for (; j + 2 * L <= j1; j += 2 * L) {
        V acc[R][2];
        const V b0 = gtcpu::vload<V>(b + j), b1 = gtcpu::vload<V>(b + j + L);
        for (int r = 0; r < R; ++r) {
            acc[r][0] = C::first(ar[r * lda], b0);
            acc[r][1] = C::first(ar[r * lda], b1);
        }
        for (long long kk = 1; kk < k; ++kk) {
            const V c0 = gtcpu::vload<V>(b + kk * n + j), c1 = gtcpu::vload<V>(b + kk * n + j + L);
            for (int r = 0; r < R; ++r) {
                const T av = ar[r * lda + kk];
                acc[r][0] = C::next(av, c0, acc[r][0]);
                acc[r][1] = C::next(av, c1, acc[r][1]);
            }
        }
        for (int r = 0; r < R; ++r) {
            gtcpu::vstore(cr + r * ldc + j, acc[r][0]);
            gtcpu::vstore(cr + r * ldc + j + L, acc[r][1]);
        }
    }
    for (; j + L <= j1; j += L) mm_cols<T, R, C, L>(ar, lda, b, cr, ldc, k, n, j);
    if (L >= 4 && j + L / 2 <= j1) {
        mm_cols<T, R, C, (L >= 4 ? L / 2 : 1)>(ar, lda, b, cr, ldc, k, n, j);
        j += L / 2;
    }
    if (L >= 8 && j + L / 4 <= j1) {
        mm_cols<T, R, C, (L >= 8 ? L / 4 : 1)>(ar, lda, b, cr, ldc, k, n, j);
        j += L / 4;
    }
    for (; j < j1; ++j) mm_cols<T, R, C, 1>(ar, lda, b, cr, ldc, k, n, j);
}

// rows [r0, r1) of c = a @ b (a: rows of k, b: k x n, both contiguous); k == 0 gives +0.0
template <class T, class C>
static inline void mm_rows(const T* a, const T* b, T* c, long long r0, long long r1, long long k,
                           long long n)
{
    if (k == 0) {
        for (long long e = r0 * n; e < r1 * n; ++e) c[e] = (T)0;
        return;
    }
    long long r = r0;
    for (; r + 8 <= r1; r += 8) mm_tile<T, 8, C>(a + r * k, k, b, c + r * n, n, k, n, 0, n);
    for (; r + 4 <= r1; r += 4) mm_tile<T, 4, C>(a + r * k, k, b, c + r * n, n, k, n, 0, n);
    for (; r < r1; ++r) mm_tile<T, 1, C>(a + r * k, k, b, c + r * n, n, k, n, 0, n);
}

// elements [lo, hi) of c = a @ b (row-major c: element e is row e / n, column e % n)
template <class T, class C>
static inline void mm_range(const T* a, const T* b, T* c, long long k, long long n, long long lo,
                            long long hi)
{
    if (k == 0) {
        for (long long e = lo; e < hi; ++e) c[e] = (T)0;
        return;
    }
    long long e = lo;
    while (e < hi) {
        const long long i = e / n, j0 = e % n;
        if (j0 == 0 && hi - e >= n) {
            const long long rows = (hi - e) / n;
            mm_rows<T, C>(a, b, c, i, i + rows, k, n);
            e += rows * n;
            continue;
        }
        const long long j1 = n < j0 + (hi - e) ? n : j0 + (hi - e);
        mm_tile<T, 1, C>(a + i * k, k, b, c + i * n, n, k, n, j0, j1);
        e += j1 - j0;
    }
}
}  // namespace gtfuse

extern "C" long long gtfuse_set_parallel_work(long long work)
{
    const long long old = gtcpu::SHARED->parallel_work;
    if (work > 0) gtcpu::SHARED->parallel_work = work;
    return old;
}
"""
# The fma contract's steps (only in modules that use it: gtcpu::vfma is the per-node kernels'
# fused multiply-add, one rounding per lane): acc = fma(a[0], b[0], +0.0), then
# acc = fma(a[kk], b[kk], acc) -- the chain from acc = +0.0 of gt_dot_fma.
_FMA_CONTRACT = """\
struct Fma {
    template <class S, class V>
    static __forceinline__ V first(S a, V b) { return gtcpu::vfma(a, b, V{}); }
    template <class S, class V>
    static __forceinline__ V next(S a, V b, V acc) { return gtcpu::vfma(a, b, acc); }
};
"""


@functools.cache
def _twins() -> dict[str, Kernel]:
    """Every op's (and in-place update's) CUDA kernels by name (a cpu kernel's twin: same name
    and parameters)."""
    out: dict[str, Kernel] = {}
    for op in (*REGISTRY.values(), *UPDATES.values()):
        for ft in FLOATS:
            for k in op.kernel_set(ft).kernels:
                out[k.name] = k
    return out


def as_planned(launch: Launch) -> Launch:
    """``launch`` with its cpu kernel replaced by the CUDA twin the planner reads (its kind,
    form and calls); a kernel without a twin of the same parameters stays as it is."""
    twin = _twins().get(launch.kernel.name)
    if twin is None or twin.params != launch.kernel.params:
        return launch
    return dataclasses.replace(launch, kernel=twin)


@dataclass(frozen=True)
class _Entry:
    """A pointer-table slot holding a per-node kernel's function (not an array)."""

    kernel: Kernel


@dataclass(frozen=True)
class _PhaseSlot:
    """A pointer-table slot holding a compiled phase's function or its pointer table."""

    step: CompiledStep
    part: str  # "function" or "table"


class _Pointers:
    """The arrays the function reads and writes: one slot of its pointer table each."""

    def __init__(self) -> None:
        self.slots: dict[tuple, str] = {}
        self.decls: list[str] = []
        self.values: list[Any] = []

    def array(self, a: Any, ctype: str) -> str:
        """The local pointer naming array ``a`` as ``ctype`` (a parameter's C type)."""
        base = ctype.removeprefix("const ").rstrip("*").strip()
        key = (address(a), base) if a.size else (id(a), base)
        if key not in self.slots:
            name = f"p{len(self.values)}"
            self.slots[key] = name
            self.decls.append(f"    {base}* const {name} = ({base}*)P[{len(self.values)}];")
            self.values.append(a)
        return self.slots[key]

    def kernel(self, k: Kernel) -> str:
        """The local pointer naming per-node kernel ``k``'s C function (its address a slot
        of the table: ``compile_step`` fills it from the cpu module)."""
        key = ("kernel", k.name)
        if key not in self.slots:
            name = f"k{len(self.values)}"
            self.slots[key] = name
            params = ", ".join(p.ctype for p in k.params)
            self.decls.append(f"    const auto {name} = reinterpret_cast<void (*)({params})>"
                              f"(P[{len(self.values)}]);  // {k.name}")
            self.values.append(_Entry(k))
        return self.slots[key]

    def phase(self, step: CompiledStep) -> str:
        """A call of compiled phase ``step``'s function on its own pointer table (both
        addresses slots of this table: ``compile_step`` fills them), its status."""
        fn, table = f"f{len(self.values)}", f"t{len(self.values) + 1}"
        self.decls.append(f"    const auto {fn} = reinterpret_cast<int (*)(void* const*)>"
                          f"(P[{len(self.values)}]);  // {step.name}")
        self.decls.append(f"    void* const* const {table} = "
                          f"reinterpret_cast<void* const*>(P[{len(self.values) + 1}]);")
        self.values += [_PhaseSlot(step, "function"), _PhaseSlot(step, "table")]
        return f"{fn}({table})"

    def geometry(self, a: Any) -> str:
        """A launch-geometry array baked in as a constant (so decodes fold: ranks, shapes and
        strides known to the compiler); one per distinct value."""
        values = tuple(int(x) for x in np.asarray(a, np.int64).ravel())
        key = ("geom", values)
        if key not in self.slots:
            name = f"g{len(self.slots)}"
            self.slots[key] = name
            body = ", ".join(f"{v}LL" for v in values) or "0LL"
            self.decls.append(f"    static constexpr long long {name}[] = {{{body}}};")
        return self.slots[key]

    def table(self, host: np.ndarray) -> str:
        """A host int64 index table the function reads (kept alive with it)."""
        return self.array(np.ascontiguousarray(host, np.int64), "const long long*")


def _bind(info: Info, ptrs: _Pointers) -> dict[str, str]:
    """Parameter name of the launch -> the local pointer holding that array."""
    if info.reads_dropped:
        raise AssertionError("cpu lowering: transposes are never dropped (keep every buffer)")
    return {p.name: ptrs.geometry(v) if p.is_geometry else ptrs.array(v, p.ctype)
            for p, v in zip(info.launch.kernel.params, info.launch.args) if p.is_pointer}


def _macs(info: Info) -> int:
    a = info.args
    return int(a["batch"]) * int(a["m"]) * int(a["k"]) * int(a["n"])


def _own_kernel(info: Info) -> bool:
    """A matmul the lowering runs as its per-node kernel inside a row or flat segment: one too
    large for the row tile to pay, or one reading an operand transposed (its ta / tb flag: the
    row helpers read contiguous operands; the per-node kernel reads the flag)."""
    return isinstance(info.form, Product) and (_macs(info) >= SPLIT_MACS
                                               or bool(info.transposed))


def _node_call(launch: Launch, ptrs: _Pointers) -> str:
    """A call of the launch's per-node cpu kernel with its recorded arguments."""
    args = []
    for p, v in zip(launch.kernel.params, launch.args):
        if p.is_pointer:
            args.append(ptrs.geometry(v) if p.is_geometry else ptrs.array(v, p.ctype))
        else:
            args.append(_lit(v, p.ctype))
    return f"    {ptrs.kernel(launch.kernel)}({', '.join(args)});  // node {launch.tag}"


def _affine(info: Info) -> tuple[list[int], dict[str, tuple[int, list[int]]], tuple] | None:
    """The launch's geometry as its form gives a strided layout (``Form.affine``: a zip's or a
    copy's), (dims, {array: (offset, strides)}, out), else None; ``out`` is (offset, strides)
    of a copy's y, () for a zip's contiguous y."""
    names = tuple(p.name for p in info.launch.kernel.params
                  if p.is_pointer and p.is_const and not p.is_geometry)
    geom = {"geom": np.asarray(info.args.get("geom", ()), np.int64)}
    return info.form.affine(geom, names)


def _staged(info: Info, v: dict[str, str], lo: str, hi: str, indent: str) -> str | None:
    """Iterations [lo, hi) of a map of a correctly rounded function as the per-node cpu
    kernel runs them (``Map.staged_range``: its first stage over blocks, then the function
    where a lane is undecided), or None for any other launch."""
    k = info.launch.kernel
    fn = k.calls[0] if k.calls else None
    if not isinstance(info.form, Map) or not getattr(fn, "first_stage", None):
        return None
    a = info.args
    extra = tuple(_lit(a[e], next(p.ctype for p in k.params if p.name == e))
                  for e in info.form.extra)
    return (f"{indent}{FIRST_STAGE_LOOP}\n"
            + info.form.staged_range(_fn(info), fn.first_cname, v["x"], v["y"], lo, hi, extra,
                                     _ctype_of(info), indent))


def _digits(outer: list[int], indent: str) -> str:
    """Declarations of c0 .. c{r-1}, the digits of the row index q over the outer dims
    ``outer`` (row-major: the last digit the fastest; c0 what is left)."""
    if not outer:
        return ""
    lines = [f"{indent}    long long t = q;"]
    for d in range(len(outer) - 1, 0, -1):
        lines.append(f"{indent}    const long long c{d} = t % {outer[d]}LL; t /= {outer[d]}LL;")
    lines.append(f"{indent}    const long long c0 = t;")
    return "\n".join(lines) + "\n"


def _offset(off: int, strides: list[int], j: str) -> str:
    """The flat offset of element (c0, .., j) of an array at ``off`` with ``strides``."""
    terms = [f"{off}LL"] + [f"c{d} * {st}LL" for d, st in enumerate(strides[:-1]) if st]
    return " + ".join(terms + [f"{j} * {strides[-1]}LL"])


def _staged_rows(info: Info, v: dict[str, str], dims: list[int], ins: dict, lo: str, hi: str,
                 indent: str) -> str | None:
    """Iterations [lo, hi) of a two-input zip of a function with a first stage (gelu's
    gate_grad) whose rows run unit-stride or broadcast, as the per-node kernel runs its
    contiguous rows: the stage over blocks of a row, then the function where a lane is
    undecided (the same bits: a decided lane is the function's value); None otherwise (each
    element then calls the function itself: its whole correctly rounded path)."""
    fn = info.launch.kernel.calls[0] if info.launch.kernel.calls else None
    if not isinstance(info.form, Zip) or len(ins) != 2 or not getattr(fn, "first_stage", None) \
            or any(st[-1] not in (0, 1) for _, st in ins.values()):
        return None
    inner, t = dims[-1], _ctype_of(info)
    (na, (oa, sa)), (nb, (ob, sb)) = ins.items()
    operands = f"ar[(b0 + j) * {sa[-1]}LL], br[(b0 + j) * {sb[-1]}LL]"
    # the row's operands at j = 0 (c0.. its digits); element j at ar[j * stride]
    return "\n".join([
        f"{indent}{FIRST_STAGE_LOOP}",
        f"{indent}for (long long i = {lo}; i < {hi};) {{",
        f"{indent}    const long long q = i / {inner}LL, j0 = i % {inner}LL;",
        f"{indent}    const long long j1 = {inner}LL < j0 + ({hi} - i) ? {inner}LL : "
        f"j0 + ({hi} - i);",
        _digits(dims[:-1], indent).rstrip("\n"),
        f"{indent}    const {t}* __restrict ar = {v[na]} + {_offset(oa, sa, '0')};",
        f"{indent}    const {t}* __restrict br = {v[nb]} + {_offset(ob, sb, '0')};",
        f"{indent}    {t}* yr = {v['y']} + q * {inner}LL;",
        f"{indent}    for (long long b0 = j0; b0 < j1; b0 += {FIRST_BLOCK}) {{",
        f"{indent}        const int m = (int)(j1 - b0 < {FIRST_BLOCK} ? j1 - b0 : {FIRST_BLOCK});",
        staged_block(t, f"{fn.first_cname}({operands}, gt_bad)", f"{fn.cname}({operands})",
                     "yr[b0 + j]", indent + " " * 8),
        f"{indent}    }}",
        f"{indent}    i += j1 - j0;",
        f"{indent}}}"]).replace("\n\n", "\n")


def _range_loop(info: Info, v: dict[str, str], lo: str, hi: str, indent: str) -> str:
    """Iterations [lo, hi) of the launch: a zip or copy of any rank as rows of its innermost
    dimension (unit-stride or broadcast inner loops the compiler vectorizes; the outer index's
    digits decoded once a row: the same element offsets as the geometry decode), anything
    else as its statement in a loop."""
    staged = _staged(info, v, lo, hi, indent)
    if staged is not None:
        return staged
    aff = _affine(info)
    if aff is None:
        return (f"{indent}for (long long i = {lo}; i < {hi}; ++i) {{\n"
                f"{indent}    {_statement(info, v, 'i')}\n{indent}}}")
    dims, ins, out = aff
    inner = dims[-1]
    if inner == 0:
        return f"{indent}// no elements"
    staged = _staged_rows(info, v, dims, ins, lo, hi, indent)
    if staged is not None:
        return staged
    if isinstance(info.form, Copy):
        (ioff, si), (ooff, so) = ins["x"], out
        body = f"{v['y']}[{_offset(ooff, so, 'j')}] = {v['x']}[{_offset(ioff, si, 'j')}];"
    else:
        fn = info.launch.kernel.calls[0]
        fn = getattr(fn, "cname", None) or fn.name
        args = ", ".join(f"{v[nm]}[{_offset(off, st, 'j')}]" for nm, (off, st) in ins.items())
        body = f"{v['y']}[q * {inner}LL + j] = {fn}({args});"
    return (f"{indent}for (long long i = {lo}; i < {hi};) {{\n"
            f"{indent}    const long long q = i / {inner}LL, j0 = i % {inner}LL;\n"
            f"{indent}    const long long j1 = {inner}LL < j0 + ({hi} - i) ? {inner}LL : "
            f"j0 + ({hi} - i);\n"
            + _digits(dims[:-1], indent)
            + f"{indent}    for (long long j = j0; j < j1; ++j) {body}\n"
            f"{indent}    i += j1 - j0;\n{indent}}}")


def _row_piece(items: list[Info], rows: int, ptrs: _Pointers) -> str:
    """Rows in blocks of ROW_BLOCK split across threads; every launch over each block."""
    body, cost = [], 0
    for info in items:
        v = _bind(info, ptrs)
        body.append(f"            // {info.name} (launch {info.index}, node {info.launch.tag})")
        if isinstance(info.form, Product):
            a, t = info.args, _ctype_of(info)
            k, n = int(a["k"]), int(a["n"])
            body.append(f"            gtfuse::mm_rows<{t}, {_contract(info)}>({v['a']}, "
                        f"{v['b']}, {v['c']}, r0, r1, {k}LL, {n}LL);")
            cost += max(k, 1) * n
        elif isinstance(info.form, Copy) and not info.out_identity:
            start, oo, oi = _row_copy_tables(info, rows, lambda h: h)
            s, o, i = (ptrs.table(x) for x in (start, oo, oi))
            body.append(f"            for (long long e = {s}[r0]; e < {s}[r1]; ++e) "
                        f"{v['y']}[{o}[e]] = {v['x']}[{i}[e]];")
            cost += info.out.size // rows
        else:
            per_row = info.out.size // rows
            body.append(_range_loop(info, v, f"r0 * {per_row}LL", f"r1 * {per_row}LL",
                                    "            "))
            cost += per_row
    blocks = -(-rows // ROW_BLOCK)
    return (f"    gtcpu::parallel_for({blocks}LL, {max(cost, 1) * ROW_BLOCK}LL, "
            "[=](long long lo, long long hi) {\n"
            "        for (long long blk = lo; blk < hi; ++blk) {\n"
            f"            const long long r0 = blk * {ROW_BLOCK}LL, r1 = r0 + {ROW_BLOCK}LL < "
            f"{rows}LL ? r0 + {ROW_BLOCK}LL : {rows}LL;\n"
            + "\n".join(body) + "\n        }\n    });")


def _flat(items: list[Info], ptrs: _Pointers) -> str:
    """Element blocks split across threads; every launch's elements of each block in order."""
    body, most, cost = [], max(info.n for info in items), 0
    for info in items:
        v = _bind(info, ptrs)
        body.append(f"            // {info.name} (launch {info.index}, node {info.launch.tag})\n"
                    f"            {{ const long long e1 = e0 + {FLAT_BLOCK}LL < {info.n}LL ? "
                    f"e0 + {FLAT_BLOCK}LL : {info.n}LL;")
        if isinstance(info.form, Product):
            a, t = info.args, _ctype_of(info)
            k, n = int(a["k"]), int(a["n"])
            body.append(f"              if (e0 < e1) gtfuse::mm_range<{t}, {_contract(info)}>("
                        f"{v['a']}, {v['b']}, {v['c']}, {k}LL, {n}LL, e0, e1); }}")
            cost += max(k, 1)
        else:
            body.append(_range_loop(info, v, "e0", "e1", "              ") + " }")
            cost += 1
    blocks = -(-most // FLAT_BLOCK)
    return (f"    gtcpu::parallel_for({blocks}LL, {cost * FLAT_BLOCK}LL, "
            "[=](long long lo, long long hi) {\n"
            "        for (long long blk = lo; blk < hi; ++blk) {\n"
            f"            const long long e0 = blk * {FLAT_BLOCK}LL;\n"
            + "\n".join(body) + "\n        }\n    });")


def _tail(items: list[Info], ptrs: _Pointers) -> str:
    """One thread: each launch's iterations in order."""
    out = []
    for info in items:
        v = _bind(info, ptrs)
        out.append(f"    // {info.name} (launch {info.index}, node {info.launch.tag})\n"
                   f"    for (long long i = 0; i < {info.n}LL; ++i) {{\n"
                   f"        {_statement(info, v, 'i')}\n    }}")
    return "\n".join(out)


def _contract(info: Info) -> str:
    """The row helpers' contract struct of a matmul launch: its form's inner-product
    contract (``Product.inner``: fma or plain)."""
    return "gtfuse::Fma" if info.form.inner == "fma" else "gtfuse::Plain"


def lower(segments: list[Segment], rows: int, launches: list[Launch], name: str,
          prelude: Sequence[CompiledStep] = ()) -> tuple[str, list[Any], list[str]]:
    """The function ``name`` computing ``segments`` (planned over ``launches``), after calling
    the compiled phases ``prelude`` in order (the whole step: forward's and backward's
    functions, then the optimizer's loops): its source, its pointer table's values (arrays,
    and slots of the functions it calls), and the per-node kernels' names."""
    ptrs = _Pointers()
    nodes: dict[str, Kernel] = {}
    parts = [f"    if (const int status = {ptrs.phase(step)}) return status;"
             for step in prelude]

    def node(info: Info) -> None:
        launch = launches[info.index]
        nodes.setdefault(launch.kernel.name, launch.kernel)
        parts.append(_node_call(launch, ptrs))

    for seg in segments:
        if not seg.fused:
            for info in seg.items:
                node(info)
        elif seg.cls == "tail":
            parts.append(_tail(seg.items, ptrs))
        elif seg.cls == "row":  # a matmul too large for the row tile splits the segment
            piece: list[Info] = []
            for info in seg.items:
                if _own_kernel(info):
                    if piece:
                        parts.append(_row_piece(piece, rows, ptrs))
                    piece = []
                    node(info)
                else:
                    piece.append(info)
            if piece:
                parts.append(_row_piece(piece, rows, ptrs))
        elif seg.cls == "flat":  # reductions and large matmuls run as their per-node
            piece = []           # kernels (vectorized across outputs; packed panels)
            for info in seg.items:
                if isinstance(info.form, Reduce) or _own_kernel(info):
                    if piece:
                        parts.append(_flat(piece, ptrs))
                    piece = []
                    node(info)
                else:
                    piece.append(info)
            if piece:
                parts.append(_flat(piece, ptrs))
        else:
            raise AssertionError(seg.cls)
    fn = (f'extern "C" int {name}(void* const* P)\n{{\n    gtcpu::FpEnv env;\n'
          + "\n".join(ptrs.decls) + "\n" + "\n".join(parts) + "\n    return 0;\n}\n")
    return fn, ptrs.values, list(nodes)


_HEADER = """\
// ggpu-fuse: one captured cpu step as one function (generated; do not edit). Each statement is
// one iteration of a recorded launch, computed with its own scalar functions in its order.
"""
_LOADED: dict[str, ctypes.CDLL] = {}
_LOCK = threading.Lock()


def translation_unit(body: str) -> str:
    """The cpu runtime header, the device functions ``body`` names, the matmul row helpers,
    ``body``: a library bound to the runtime's pool and settings (``cpurt.shard_unit``)."""
    helpers = _HELPERS.replace("$CONTRACTS", _FMA_CONTRACT if "gtfuse::Fma" in body else "")
    return cpurt.shard_unit("\n".join([_HEADER, device_text_for(helpers + body), helpers,
                                       body]))


def _unit(body: str) -> tuple[str, str, list[str], tuple[str, ...]]:
    """(cache key, translation unit, compiler command, flags) of ``body``'s library."""
    tu = translation_unit(body)
    flags = tuple(cpurt.kernel_flags(tu))  # a fused first-stage loop: its flags
    return cpurt.unit_key(tu, flags), tu, toolchain.compiler_command(), flags


def _library(key: str, tu: str, command: list[str], flags: tuple[str, ...],
             announce: Any = None) -> Any:
    """The cached library of one unit (built here when the cache has none)."""
    return cache.library(
        "cpu", key, tu,
        lambda src, out: toolchain.compile_shared("ggpu-fuse cpu", command, flags, src, out),
        "a captured cpu step as one function (g++)", announce=announce)


def build(bodies: Sequence[str]) -> None:
    """Compile the libraries of ``bodies`` that the cache does not hold yet, all at once: one
    compiler process each, as many at a time as the machine has CPUs, announced by one line
    (a captured program's forward and backward compile side by side)."""
    units = {key: (tu, command, flags) for key, tu, command, flags in map(_unit, bodies)}
    folder = cache.directory("cpu")
    missing = [k for k in units if k not in _LOADED and not cache.verified(folder / f"{k}.so")]
    if not missing:
        return
    jobs = min(len(missing), toolchain.usable_cpus())
    print(f"gtensor: compiling a captured cpu program as {len(missing)} function"
          f"{'s' if len(missing) > 1 else ''} (g++, {jobs} at a time; "
          f"first use), cached in {folder}", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for _ in pool.map(lambda k: _library(k, *units[k], announce=lambda folder: None),
                          missing):
            pass


def load(body: str) -> ctypes.CDLL:
    """The compiled library of ``body`` (built once per source hash, cached on disk)."""
    key, tu, command, flags = _unit(body)
    with _LOCK:
        if key not in _LOADED:
            lib = ctypes.CDLL(str(_library(key, tu, command, flags)))
            cpurt.bind_library(lib)  # one pool: the per-node kernels' and every step's
            _LOADED[key] = lib
        return _LOADED[key]


@dataclass
class CompiledStep:
    """One phase of a captured cpu program as one compiled native function."""

    name: str
    source: str
    lib: ctypes.CDLL
    arrays: list[Any]  # what the table points at: arrays (kept alive), kernels, phases
    table: np.ndarray  # the pointer table
    node_kernels: list[str]

    def __call__(self) -> None:
        """Run the phase (one native call)."""
        status = self._fn(self._table_addr)
        if status != 0:
            raise RuntimeError(f"ggpu_fuse cpu: {self.name} failed with status {status}")

    def __post_init__(self) -> None:
        self._table_addr = int(self.table.ctypes.data)  # the table lives as long as self
        self._fn = getattr(self.lib, self.name)
        self._fn.argtypes = (ctypes.c_void_p,)
        self._fn.restype = ctypes.c_int

    def addresses(self) -> tuple[int, int]:
        """(the function's address, its pointer table's): how another compiled phase calls
        it (the whole step calls forward's and backward's)."""
        return ctypes.cast(self._fn, ctypes.c_void_p).value, self._table_addr

    def set_parallel_work(self, work: int) -> int:
        """Set the work from which a loop splits across threads (a test knob: the split never
        changes a bit); returns the previous value. The setting is the cpu runtime's (the
        library is bound to it): every kernel of the process reads it."""
        fn = self.lib.gtfuse_set_parallel_work
        fn.argtypes = (ctypes.c_longlong,)
        fn.restype = ctypes.c_longlong
        return int(fn(int(work)))


def compile_step(segments: list[Segment], rows: int, launches: list[Launch], name: str,
                 module: Any, prelude: Sequence[CompiledStep] = ()) -> CompiledStep:
    """Lower and compile ``segments`` (planned over ``launches``) as the function ``name``,
    which first calls the phases ``prelude``; ``module`` (the cpu backend's ``CpuModule``)
    gives the per-node kernels' functions."""
    body, values, nodes = lower(segments, rows, launches, name, prelude)
    table = np.array([_address(v, module) for v in values] or [0], np.uint64)
    return CompiledStep(name, body, load(body), values, table, nodes)


def _address(value: Any, module: Any) -> int:
    """A pointer-table value's address: an array's data, a per-node kernel's function, a
    compiled phase's function or table."""
    if isinstance(value, _Entry):
        return module.entry(value.kernel)
    if isinstance(value, _PhaseSlot):
        return value.step.addresses()[value.part == "table"]
    if not isinstance(value, np.ndarray) or value.dtype not in CTYPES:
        raise TypeError(f"compile_step: an argument of the step is {type(value).__name__}; "
                        "expected numpy arrays of the cpu backend")
    return value.ctypes.data
