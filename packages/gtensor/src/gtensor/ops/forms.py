"""Kernel forms as objects: a form owns its geometry once.

A form knows how a launch's geometry is encoded (``geometry``), the C text that decodes it in
the CUDA/sim kernel and in the cpu kernel (``cuda_body`` / ``cpu_body``), the index map an
engine above reads back from a recorded launch (``index_maps``: the fusion planner) and the
statement a generated (fused) kernel runs for one output (``statement``: fusion's codegen).
An op built on a form declares only its scalar function and its input types; its kernels carry
the form (``Kernel.form``), so nothing else re-derives the layout.

Every form answers the same questions: ``params`` (the kernel's parameters), ``cuda_body`` /
``cpu_body`` (its loops around the op's scalar function), ``index_maps(args)`` (for a recorded
launch's arguments, geometry as host int64: an ``Access``, the iterations n, the output element
each writes and the input elements each reads) and ``statement(calls, arrays, i, scalars,
ctype)`` (one iteration in a generated kernel: ``calls`` the names of the kernel's
``Kernel.calls``, ``arrays`` its array parameters' names there, ``scalars`` the exact C literals
of its scalar arguments, ``ctype`` its float C type).

``Map(extra)``: ``y[i] = f(x[i], *extra)`` for i < n (``MAP``: unary ops; ``SCALAR``: with a
host scalar ``s``, adds/muls). ``Fill``: ``y[i] = v``. ``Copy``: ``y[oo(i)] = x[oi(i)]``,
geom = [rank, shape[rank], in strides[rank], in offset, out strides[rank], out offset] (the
movement ops). ``Zip(names)``: ``y[i] = f(x0[o0(i)], ..., x{n-1}[o{n-1}(i)])`` over the
broadcast output shape, the inputs' element types free (float of the op's dtype, int64, bool)
and the result's too. geom = [rank, shape[rank], strides of x0[rank], ..., strides of
x{n-1}[rank]] (axes collapsed where they can be); the output is contiguous. The binary
elementwise ops (add, mul, maximum, ...) are ``Zip(("a", "b"))``; where and the comparisons
``Zip`` of their inputs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from math import prod
from string import Template

import numpy as np

from .. import shapes
from ..kernels import Param, params


@dataclass
class Access:
    """What the iterations of one recorded launch touch (``index_maps``): ``n`` iterations;
    iteration i writes output element ``oo[i]``, reads ``oi[param][i]`` of each input it
    reads at one element, and elements ``ranges[param][0][i]..[1][i]`` of each it reads
    across a range (a reduction's positions)."""

    n: int
    oo: np.ndarray
    oi: dict[str, np.ndarray] = field(default_factory=dict)
    ranges: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _ctype_params(spec: str, ctype: str) -> tuple[Param, ...]:
    return params(spec.replace("$T", ctype))


class Form:
    """What an engine above (fusion) asks of a kernel's form, never of its kind.

    * ``fuses(args)``: whether a generated kernel may compute the iterations of a launch with
      these arguments (``index_maps`` and ``statement`` then answer for it); a form that
      keeps its own launch (``Opaque``, ``Rows``) says no, and ``why``;
    * ``in_place``: its written buffers are read too (the in-place optimizer updates);
    * ``writes_many``: it may write several buffers, each through the same index map;
    * ``transposed(args)``: the operands it reads transposed in place (``Product``: its
      ``ta`` / ``tb`` flags), as {parameter: array};
    * ``row_aligned(param, rows, args, transposed)``: its own answer to whether iteration i
      reads ``param`` only within the row it writes (None: read it off ``index_maps``);
    * ``affine(args, names)``: its strided layout (dims, {input: (offset, strides)}, output
      (offset, strides) or ()) that a cpu loop can walk directly (innermost rows, the outer
      index's digits decoded once a row), or None.
    """

    fusable = True
    why = ""
    in_place = False
    writes_many = False

    def fuses(self, args: dict) -> bool:
        """Whether a generated kernel may compute this launch's iterations."""
        return self.fusable

    def transposed(self, args: dict) -> dict:
        """The operands read transposed in place ({parameter: its array})."""
        return {}

    def row_aligned(self, param: str, rows: int, args: dict, transposed: Collection[str]
                    ) -> bool | None:
        """The form's own row-alignment answer, or None (read it off the index maps)."""
        return None

    def affine(self, args: dict, names: tuple[str, ...]) -> tuple | None:
        """A strided layout a cpu loop walks directly, or None."""
        return None


@dataclass(frozen=True)
class Opaque(Form):
    """A kernel that keeps its own launch: fusion computes none of its iterations, for the
    reason ``why`` (gather, scatter, argmax, conv, pool, the Philox draws)."""

    name: str
    why: str
    fusable = False

    def index_maps(self, args: dict) -> Access:
        """None: an opaque form has no index maps (TypeError naming why)."""
        raise TypeError(f"the {self.name} form keeps its own launch ({self.why}): no index maps")

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """None: an opaque form has no statement (TypeError naming why)."""
        raise TypeError(f"the {self.name} form keeps its own launch ({self.why}): no statement")


GATHER = Opaque("gather", "it reads x at ids the data holds, refreshed by set_input: no fixed "
                "index map")
SCATTER = Opaque("scatter", "each slot sums g over every position whose id names it, in "
                 "position order: a chain across the whole input")
INDEX = Opaque("index", "int64 / bool results without arithmetic (argmax, index_weight): "
               "generated kernels compute the step's float type")
CONV = Opaque("conv", "each output a serial chain over its taps, tiled by the conv kernels")
ATTENTION = Opaque("attention", "per (b, h) block whole rows of scores, softmax and products: "
                   "the attention kernels' own schedule")
POOL = Opaque("pool", "each output a window in a defined order, windows overlapping rows")
RANDOM = Opaque("random", "Philox words of an int64 key per element: the draws keep the op's "
                "launch")


_GRID_LOOP = ("    const long long step = (long long)gridDim.x * blockDim.x;\n"
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
              "i += step)")


# The work one element of a cpu loop weighs in its thread split (gtcpu::parallel_for, whose
# threshold, the runtime's Shared::parallel_work, counts element operations): at least
# ELEMENT_COST for a map or zip, ROW_ELEMENT_COST for a row kernel's element.
ELEMENT_COST = 4
BLOCK = 256  # threads of a grid-stride kernel's block
MAX_GRID = 4096  # at most this many blocks (the kernels loop over the rest)


def grid_for(n: int) -> int:
    """Blocks of BLOCK threads for n elements, capped (kernels use grid-stride loops)."""
    return max(1, min(MAX_GRID, -(-n // BLOCK)))

ROW_ELEMENT_COST = 8


def split_cost(calls: Iterable, least: int) -> int:
    """The thread-split weight of one element of a cpu loop that evaluates each of ``calls``
    (a kernel's ``Kernel.calls``) at most once per element: the sum of their ``ScalarFn.cost``
    (a row helper without one counts 1), and at least ``least``. An exp weighs ~70 element
    operations, an add 1: a transcendental map splits across threads at ~70x fewer elements."""
    return max(least, sum(getattr(fn, "cost", 1) for fn in calls))


# elements per block of a first-stage map (Map.cpu_body): the stage's values and flags stay
# on the stack (256 x 9 bytes of float64)
FIRST_BLOCK = 256
# the line a first-stage loop starts with: the cpu runtime compiles a library holding one with
# runtime.cpu.FIRST_STAGE_FLAGS
FIRST_STAGE_LOOP = "// first stage over blocks, then the undecided lanes"


def staged_block(ctype: str, stage: str, full: str, out: str, indent: str) -> str:
    """One block (``m`` lanes, j < m) of a first-stage loop: ``stage`` (a call about j that
    sets ``gt_bad``) over the block as one vectorized loop into ``gt_v``, then, only if it
    flagged a lane, ``full`` (the function itself, about j) on the flagged lanes, then
    ``out`` (an lvalue about j) = ``gt_v[j]`` as one vectorized copy. Every input of the
    block is read before ``out`` is written, so the output may be an input. The per-node
    cpu kernels and the fused cpu step (ggpu-fuse) all write it."""
    lines = [
        f"{ctype} gt_v[{FIRST_BLOCK}];",
        f"bool gt_flag[{FIRST_BLOCK}];",
        "unsigned char gt_any = 0;",
        "for (int j = 0; j < m; ++j) {",
        "    bool gt_bad = false;",
        f"    gt_v[j] = {stage};",
        "    gt_flag[j] = gt_bad;",
        "    gt_any |= gt_bad;",
        "}",
        "if (gt_any)",
        "    for (int j = 0; j < m; ++j)",
        f"        if (gt_flag[j]) gt_v[j] = {full};",
        f"for (int j = 0; j < m; ++j) {out} = gt_v[j];"]
    return "\n".join(indent + line for line in lines)


@dataclass(frozen=True)
class Map(Form):
    """``y[i] = f(x[i], *extra)`` for i < n: one input read where the output is written."""

    extra: tuple[str, ...] = ()  # host scalar parameters passed to f after x[i] ("s")

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: x, y, n, then the scalars (of the float type)."""
        return _ctype_params("const $T* x, $T* y, long long n"
                             + "".join(f", $T {e}" for e in self.extra), ctype)

    def _call(self, fn: str, x: str, extra: tuple[str, ...]) -> str:
        return f"{fn}({', '.join((x, *extra))})"

    def cuda_body(self, fn: str) -> str:
        """The CUDA/sim body: a grid-stride loop."""
        return f"{_GRID_LOOP}\n        y[i] = {self._call(fn, 'x[i]', self.extra)};"

    def cpu_body(self, fn: str, ctype: str | None = None, cost: int = ELEMENT_COST,
                 first: str | None = None) -> str:
        """The cpu body: a plain loop over [lo, hi) the compiler vectorizes, split across
        threads (each element weighs ``cost``: ``split_cost``). With ``first`` (the C name of
        fn's first stage, ``ScalarFn.first_stage``; ``ctype`` then required): blocks of
        FIRST_BLOCK elements, the first stage over the block as one vectorized loop, then fn
        itself for the lanes the stage left undecided (each element's x is read before its
        y is written, so y may be x)."""
        if first is None:
            return (f"    gtcpu::parallel_for(n, {cost}, [=](long long lo, long long hi) {{\n"
                    f"        for (long long i = lo; i < hi; ++i) y[i] = "
                    f"{self._call(fn, 'x[i]', self.extra)};\n    }});")
        return "\n".join([
            f"    {FIRST_STAGE_LOOP}",
            f"    gtcpu::parallel_for(n, {cost}, [=](long long lo, long long hi) {{",
            self.staged_range(fn, first, "x", "y", "lo", "hi", self.extra, ctype, " " * 8),
            "    });"])

    def staged_range(self, fn: str, first: str, x: str, y: str, lo: str, hi: str,
                     extra: tuple[str, ...], ctype: str, indent: str) -> str:
        """The loop over iterations [lo, hi) of ``y[i] = fn(x[i], *extra)`` by fn's first
        stage ``first``: blocks of FIRST_BLOCK elements, the stage over the block as one
        vectorized loop, then fn itself for the lanes the stage left undecided (each
        element's x is read before its y is written, so y may be x). The per-node cpu kernel
        and the fused cpu step (ggpu-fuse) both write it."""
        head = [
            f"for (long long b = {lo}; b < {hi}; b += {FIRST_BLOCK}) {{",
            f"    const int m = (int)({hi} - b < {FIRST_BLOCK} ? {hi} - b : {FIRST_BLOCK});",
            f"    const {ctype}* __restrict xb = {x} + b;"]
        block = staged_block(ctype, self._call(first, "xb[j]", (*extra, "gt_bad")),
                             self._call(fn, f"{x}[b + j]", extra), f"{y}[b + j]", indent + " " * 4)
        return "\n".join([*(indent + line for line in head), block, indent + "}"])

    def index_maps(self, args: dict) -> Access:
        """Iteration i writes y[i] and reads x[i]."""
        n = int(args["n"])
        return Access(n, np.arange(n), {"x": np.arange(n)})

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One iteration in a generated kernel (scalars as exact literals)."""
        x = f"{arrays['x']}[{i}]"
        extra = tuple(scalars[e] for e in self.extra)
        return f"{arrays['y']}[{i}] = {self._call(calls[0], x, extra)};"


@dataclass(frozen=True)
class Fill(Form):
    """``y[i] = v`` for i < n (a host scalar of the float type)."""

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: y, n, v."""
        return _ctype_params("$T* y, long long n, $T v", ctype)

    def cuda_body(self, fn: str | None = None) -> str:
        """The CUDA/sim body: a grid-stride loop."""
        return f"{_GRID_LOOP}\n        y[i] = v;"

    def cpu_body(self, fn: str | None = None, ctype: str | None = None) -> str:
        """The cpu body."""
        return ("    gtcpu::parallel_for(n, 1, [=](long long lo, long long hi) {\n"
                "        for (long long i = lo; i < hi; ++i) y[i] = v;\n    });")

    def index_maps(self, args: dict) -> Access:
        """Iteration i writes y[i] and reads nothing."""
        n = int(args["n"])
        return Access(n, np.arange(n))

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One iteration in a generated kernel."""
        return f"{arrays['y']}[{i}] = {scalars['v']};"


@dataclass(frozen=True)
class Copy(Form):
    """``y[oo(i)] = x[oi(i)]`` over a strided shape (see the module doc for geom)."""

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: x, y, n, geom."""
        return _ctype_params("const $T* x, $T* y, long long n, const long long* geom", ctype)

    def geometry(self, shape: tuple, in_strides: tuple, in_offset: int, out_strides: tuple,
                 out_offset: int) -> tuple[int, ...]:
        """The geom values of one launch (axes collapsed where they can be)."""
        dims, (si, so) = shapes.collapse(tuple(shape), tuple(in_strides), tuple(out_strides))
        return (len(dims), *dims, *si, in_offset, *so, out_offset)

    def cuda_body(self, fn: str | None = None) -> str:
        """The CUDA/sim body: each output decoded from the geometry."""
        return _COPY

    def cpu_body(self, fn: str | None = None, ctype: str | None = None) -> str:
        """The cpu body: innermost rows (and transposed tiles) across threads."""
        return _CPU_COPY

    def index_maps(self, args: dict) -> Access:
        """Iteration i reads x[oi(i)] and writes y[oo(i)]."""
        n = int(args["n"])
        g = np.asarray(args["geom"], dtype=np.int64)
        rank = int(g[0])
        shape, si = g[1:1 + rank], g[1 + rank:1 + 2 * rank]
        ioff, so, ooff = int(g[1 + 2 * rank]), g[2 + 2 * rank:2 + 3 * rank], int(g[2 + 3 * rank])
        oi = ioff + _strided_offsets(shape, si, n)
        oo = ooff + _strided_offsets(shape, so, n)
        return Access(n, oo, {"x": oi})

    def affine(self, args: dict, names: tuple[str, ...]) -> tuple | None:
        """(dims, {"x": (in offset, in strides)}, (out offset, out strides)), rank >= 1."""
        g = [int(v) for v in np.asarray(args.get("geom", ()), np.int64).ravel()]
        if not g or g[0] < 1 or len(g) != 3 + 3 * g[0]:
            return None
        rank = g[0]
        si, ioff = g[1 + rank:1 + 2 * rank], g[1 + 2 * rank]
        so, ooff = g[2 + 2 * rank:2 + 3 * rank], g[2 + 3 * rank]
        return g[1:1 + rank], {"x": (ioff, si)}, (ooff, so)

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One iteration in a generated kernel: the same decode as the kernel's."""
        g = arrays["geom"]
        return (f"{{ const int rank = (int){g}[0]; long long rem = {i}, oi = {g}[1 + 2 * rank], "
                f"oo = {g}[2 + 3 * rank];\n  for (int d = rank - 1; d >= 0; --d) {{ "
                f"const long long c = rem % {g}[1 + d]; rem /= {g}[1 + d]; "
                f"oi += c * {g}[1 + rank + d]; oo += c * {g}[2 + 2 * rank + d]; }}\n"
                f"  {arrays['y']}[oo] = {arrays['x']}[oi]; }}")


@dataclass(frozen=True)
class Reduce(Form):
    """``y[o] = fold(x over the reduced positions of o)``, one serial fold per output by the
    op's fold helper (``combine`` from the first element on, row-major), then its finish:
    with ``finish`` (sum, mean, sum_to) the kernel takes ``mean`` and ``count`` and divides by
    ``count`` when ``mean``; without (amax, amin, prod) the fold is the result. geom = [ro, out
    shape[ro], out strides in x[ro], rr, reduced shape[rr], reduced strides in x[rr]] (axes
    collapsed). The op's kernels carry the fold helper and the finish function as ``calls``."""

    finish: bool = True

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: x, y, nout, nred (, mean, count), geom."""
        fin = "int mean, $T count, " if self.finish else ""
        return _ctype_params("const $T* x, $T* y, long long nout, long long nred, " + fin +
                             "const long long* geom", ctype)

    def geometry(self, x_shape: tuple, axes: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """(nred, geom values) of a contiguous x reduced over ``axes``."""
        st = shapes.contiguous_strides(x_shape)
        kept = [i for i in range(len(x_shape)) if i not in axes]
        return self.strided_geometry(tuple(x_shape[i] for i in kept), tuple(st[i] for i in kept),
                                     tuple(x_shape[i] for i in axes), tuple(st[i] for i in axes))

    def strided_geometry(self, odims: tuple, ostrides: tuple, rdims: tuple, rstrides: tuple
                         ) -> tuple[int, tuple[int, ...]]:
        """(nred, geom values) of outputs ``odims`` based at ``ostrides`` in x, each folding
        the positions ``rdims`` at ``rstrides`` from its base, row-major (the slots may overlap:
        pooling windows)."""
        odims, (ost,) = shapes.collapse(tuple(odims), tuple(ostrides))
        rd, (rst,) = shapes.collapse(tuple(rdims), tuple(rstrides))
        nred = shapes.size(rdims)
        if nred == 0:
            rd, rst = (), ()
        return nred, (len(odims), *odims, *ost, len(rd), *rd, *rst)

    def _finishes(self, div_fn: str | None) -> dict[str, str]:
        """The template's finish pieces: the division under ``mean``, or nothing."""
        if not self.finish:
            return {"FIN": "acc", "FIN_G": "acc[j]", "FIN_COL": "", "FIN_RUN": ""}
        return {"FIN": f"mean ? {div_fn}(acc, count) : acc",
                "FIN_G": f"mean ? {div_fn}(acc[j], count) : acc[j]",
                "FIN_COL": "\n            if (mean)\n                for (long long o = lo; "
                           f"o < hi; ++o) y[o] = {div_fn}(y[o], count);",
                "FIN_RUN": "\n                if (mean)\n                    for (long long o = "
                           f"0; o < L; ++o) yo[o] = {div_fn}(yo[o], count);"}

    def cuda_body(self, fold_fn: str, div_fn: str | None, ctype: str) -> str:
        """The CUDA/sim body: each output decoded, then the fold helper (and the finish)."""
        return _REDUCE.substitute(T=ctype, SUM=fold_fn, **self._finishes(div_fn))

    def cpu_body(self, fold_fn: str, div_fn: str | None, combine_fn: str, ctype: str) -> str:
        """The cpu body: column and row folds vectorized across outputs, else the helper."""
        return _CPU_REDUCE.substitute(T=ctype, ADD=combine_fn, SUM=fold_fn,
                                      **self._finishes(div_fn))

    def index_maps(self, args: dict) -> Access:
        """Output o reads x from base(o) + the lowest to base(o) + the highest reduced offset."""
        nout, nred = int(args["nout"]), int(args["nred"])
        g = np.asarray(args["geom"], dtype=np.int64)
        ro = int(g[0])
        oshape, ostride = g[1:1 + ro], g[1 + ro:1 + 2 * ro]
        rr = int(g[1 + 2 * ro])
        rshape, rstride = g[2 + 2 * ro:2 + 2 * ro + rr], g[2 + 2 * ro + rr:2 + 2 * ro + 2 * rr]
        c = _coords(np.arange(nout), oshape)
        base = sum((ci * s for ci, s in zip(c, ostride)), np.zeros(nout, np.int64))
        if nred:
            rc = _coords(np.arange(nred), rshape)
            roff = sum((ci * s for ci, s in zip(rc, rstride)), np.zeros(nred, np.int64))
            lo, hi = int(roff.min()), int(roff.max())
        else:
            lo = hi = 0
        return Access(nout, np.arange(nout), ranges={"x": (base + lo, base + hi)})

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One output in a generated kernel: the kernel's decode, the same helper calls."""
        g, v, t = arrays["geom"], arrays, ctype
        done = (f"{scalars['mean']} ? {calls[1]}(acc, {scalars['count']}) : acc"
                if self.finish else "acc")
        return (f"{{ const int ro = (int){g}[0]; const long long* oshape = {g} + 1; "
                f"const long long* ostride = {g} + 1 + ro; const int rr = (int){g}[1 + 2 * ro];\n"
                f"  long long rem = {i}, base = 0;\n  for (int d = ro - 1; d >= 0; --d) {{ "
                f"base += (rem % oshape[d]) * ostride[d]; rem /= oshape[d]; }}\n"
                f"  const {t} acc = {calls[0]}({v['x']}, base, {scalars['nred']}, "
                f"rr, {g} + 2 + 2 * ro, {g} + 2 + 2 * ro + rr);\n"
                f"  {v['y']}[{i}] = {done}; }}")


@dataclass(frozen=True)
class Pointwise(Form):
    """``y[i] = f(a0[i], ..., s0, ..., h0, ...)`` for i < n: array inputs read at i, 0-d array
    inputs (``at0``: a device scalar such as Adam's lr_t) read once at 0, then host scalars
    (``scalars``) -- the fused optimizer updates (kind ``elementwise``)."""

    arrays: tuple[str, ...]  # the array inputs, in call order
    at0: tuple[tuple[str, str], ...] = ()  # (0-d array input, its local) read at 0
    scalars: tuple[str, ...] = ()  # host scalars of the float type, after the arrays
    grain: int = 8  # the cpu body's parallel_for grain

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: the inputs, y, n, the host scalars."""
        ins = "".join(f"const $T* {a}, " for a in self.arrays)
        return _ctype_params(ins + "$T* y, long long n" + "".join(
            f", $T {s}" for s in self.scalars), ctype)

    def _args(self, i: str) -> str:
        local = dict(self.at0)
        return ", ".join([*(local.get(a, f"{a}[{i}]") for a in self.arrays), *self.scalars])

    def _head(self, ctype: str) -> str:
        return "".join(f"    const {ctype} {loc} = {a}[0];\n" for a, loc in self.at0)

    def cuda_body(self, fn: str, ctype: str) -> str:
        """The CUDA/sim body: the 0-d inputs read once, then a grid-stride loop."""
        return f"{self._head(ctype)}{_GRID_LOOP}\n        y[i] = {fn}({self._args('i')});"

    def cpu_body(self, fn: str, ctype: str) -> str:
        """The cpu body: the same call in a loop split across threads."""
        return (f"{self._head(ctype)}    gtcpu::parallel_for(n, {self.grain}, "
                "[=](long long lo, long long hi) {\n"
                f"        for (long long i = lo; i < hi; ++i) y[i] = {fn}({self._args('i')});"
                "\n    });")

    def index_maps(self, args: dict) -> Access:
        """Iteration i writes y[i] and reads every array input at i (the 0-d ones whole)."""
        n = int(args["n"])
        zero_d = {a for a, _ in self.at0}
        return Access(n, np.arange(n), {a: np.arange(n) for a in self.arrays if a not in zero_d})

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One iteration in a generated kernel (host scalars as exact literals)."""
        zero_d = {a for a, _ in self.at0}
        ins = [f"{arrays[a]}[{'0' if a in zero_d else i}]" for a in self.arrays]
        ins += [scalars[s] for s in self.scalars]
        return f"{arrays['y']}[{i}] = {calls[0]}({', '.join(ins)});"


ROW_THREADS = 128  # threads of a row block (at most; a power of two)
ROW_LANES = 8  # contiguous rows a cpu row kernel runs side by side (independent chains)
MAX_ROW_BLOCKS = 4096


def row_geometry(shape: tuple, axis: int) -> tuple[int, int, int]:
    """(A, R, B): rows before the axis, the axis length, elements after it."""
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


@dataclass(frozen=True)
class Rows(Form):
    """A block per row: the rows along one axis of (A, R, B) (row r's R elements B apart,
    starting at ``base``), each block running the op's own row body (softmax, log_softmax,
    logsumexp and their backward helpers). Rows keep their own launch: fusion does not read
    into them."""

    ins: tuple[str, ...]
    outs: tuple[str, ...]
    fusable = False
    why = "each block runs the op's own row body (a max tree, serial sums)"

    def params(self, ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: the inputs, the outputs, A, R, B."""
        return _ctype_params("".join(f"const $T* {a}, " for a in self.ins)
                             + "".join(f"$T* {a}, " for a in self.outs)
                             + "long long A, long long R, long long B", ctype)

    @staticmethod
    def shared_buffer(ctype: str) -> str:
        """The declaration of the row max tree's shared buffer (``buf``)."""
        return f"    __shared__ {ctype} buf[{ROW_THREADS}];\n"

    def launch(self, shape: tuple, axis: int) -> tuple[int, int, tuple[int, int, int]] | None:
        """(grid, block, (A, R, B)) of the rows of ``shape`` along ``axis`` (None: empty)."""
        a, r, b = row_geometry(shape, axis)
        if a * r * b == 0:
            return None
        nt = 1
        while nt < min(r, ROW_THREADS):
            nt *= 2
        return min(a * b, MAX_ROW_BLOCKS), nt, (a, r, b)

    def cuda_body(self, body: str, ctype: str, shared: str = "") -> str:
        """The CUDA/sim body: ``body`` for each row of the block's grid-stride rows."""
        return _ROWS.substitute(T=ctype, BODY=body, SHARED=shared)

    def cpu_body(self, body: str, cost: int = ROW_ELEMENT_COST) -> str:
        """The cpu body: rows split across threads, each row by one thread in order (each
        element weighs ``cost`` in the split: ``split_cost``)."""
        return _CPU_ROWS.substitute(BODY=body, COST=str(cost))

    def cpu_interleaved_body(self, body: str, lanes_body: str, lanes: int = ROW_LANES,
                             cost: int = ROW_ELEMENT_COST) -> str:
        """The cpu body with contiguous rows (B == 1) run ``lanes`` at a time, side by side.

        ``lanes_body`` handles the G rows (G a compile-time constant: ``lanes``, then 1 for
        the rows left over) whose first element is ``base``; row k starts at
        ``base + k * R``. It keeps each row's serial chains in their defined order and only
        interleaves independent rows (G accumulators, one per row), so no bit changes;
        ``body`` runs rows of B > 1.
        """
        return _CPU_ROWS_LANES.substitute(BODY=body, LANES_BODY=lanes_body, L=str(lanes),
                                          COST=str(cost))


def _strided_offsets(shape: np.ndarray, strides: np.ndarray, n: int) -> np.ndarray:
    """The flat offsets sum(c[d] * strides[d]) of the n row-major positions c of ``shape``
    (as the kernels decode them), built by broadcast adds of one axis at a time."""
    dims = [int(d) for d in shape]
    out = np.zeros(dims, np.int64)
    for d, (size, st) in enumerate(zip(dims, strides)):
        out += (np.arange(size, dtype=np.int64) * np.int64(st)).reshape(
            [size if e == d else 1 for e in range(len(dims))])
    if out.size != n:
        raise ValueError(f"a launch's n ({n}) is not the size of its shape {tuple(dims)}")
    return out.reshape(-1)


def _coords(i: np.ndarray, shape: np.ndarray) -> list[np.ndarray]:
    """Row-major coordinates of flat indices ``i`` over ``shape`` (as the kernels decode)."""
    out = []
    rem = i.copy()
    for d in range(len(shape) - 1, -1, -1):
        out.append(rem % shape[d])
        rem = rem // shape[d]
    return out[::-1]


@dataclass(frozen=True)
class Zip(Form):
    """The n-input elementwise form with numpy broadcasting (see the module doc)."""

    names: tuple[str, ...]

    @property
    def n(self) -> int:
        """Number of inputs."""
        return len(self.names)

    def params(self, in_ctypes: tuple[str, ...], out_ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: the inputs, y, n, geom."""
        ps = [Param(f"const {c}*", name) for name, c in zip(self.names, in_ctypes)]
        return (*ps, Param(f"{out_ctype}*", "y"), Param("long long", "n"),
                Param("const long long*", "geom"))

    def geometry(self, out_shape: tuple, in_shapes: list[tuple]) -> tuple[int, ...]:
        """The geom values of one launch (broadcast strides, collapsed axes)."""
        dims, strides = shapes.collapse(
            out_shape, *[shapes.broadcast_strides(s, out_shape) for s in in_shapes])
        return (len(dims), *dims, *(v for st in strides for v in st))

    def _offsets(self, indent: str, i: str, geom: str, offs: tuple[str, ...]) -> list[str]:
        """C lines computing each input's offset ``offs[k]`` of output ``i``."""
        init = ", ".join(f"{o} = 0" for o in offs)
        lines = [f"{indent}long long rem = {i}, {init};",
                 f"{indent}for (int d = rank - 1; d >= 0; --d) {{",
                 f"{indent}    const long long c = rem % {geom}[1 + d];",
                 f"{indent}    rem /= {geom}[1 + d];"]
        lines += [f"{indent}    {o} += c * {geom}[1 + {k + 1} * rank + d];"
                  for k, o in enumerate(offs)]
        lines.append(f"{indent}}}")
        return lines

    def _offs(self) -> tuple[str, ...]:
        return tuple(f"o_{name}" for name in self.names)

    def _call(self, fn: str, arrays: tuple[str, ...]) -> str:
        return f"{fn}({', '.join(f'{a}[{o}]' for a, o in zip(arrays, self._offs()))})"

    def cuda_body(self, fn: str) -> str:
        """The CUDA/sim kernel body: a grid-stride loop over outputs applying ``fn``."""
        return "\n".join([
            "    const int rank = (int)geom[0];",
            "    const long long step = (long long)gridDim.x * blockDim.x;",
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
            "i += step) {",
            *self._offsets("        ", "i", "geom", self._offs()),
            f"        y[i] = {self._call(fn, self.names)};",
            "    }"])

    def cpu_body(self, fn: str, ctype: str | None = None, cost: int = ELEMENT_COST,
                 first: str | None = None) -> str:
        """The cpu kernel body. Two float inputs (``ctype`` given): innermost rows split
        across threads, contiguous and broadcast rows as loops the compiler vectorizes (lanes
        are independent outputs); with ``first`` (fn's first stage) contiguous rows run it
        over blocks, then fn on the undecided lanes; otherwise each output decoded as in
        CUDA. Each element weighs ``cost`` in the thread split (``split_cost``)."""
        if self.n == 2 and ctype is not None:
            a, b = self.names
            text = _CPU_ROWS2 if first is None else \
                (f"    {FIRST_STAGE_LOOP}\n" + _CPU_ROWS2_STAGED).replace(
                    "$FIRST", first).replace("$BLOCK", str(FIRST_BLOCK))
            return text.replace("$T", ctype).replace("$FN", fn) \
                .replace("$A", a).replace("$B", b).replace("$COST", str(cost))
        return "\n".join([
            "    const int rank = (int)geom[0];",
            f"    gtcpu::parallel_for(n, {cost}, [=](long long lo, long long hi) {{",
            "        for (long long i = lo; i < hi; ++i) {",
            *self._offsets("            ", "i", "geom", self._offs()),
            f"            y[i] = {self._call(fn, self.names)};",
            "        }",
            "    });"])

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One output ``i`` of a recorded launch inside a generated kernel: the same decode and
        the same call, on the generated kernel's array names (``arrays``: param -> name; the
        geometry under "geom")."""
        fn, g, out = calls[0], arrays["geom"], arrays["y"]
        lines = [f"{{ const int rank = (int){g}[0];",
                 *self._offsets("  ", i, g, self._offs()),
                 f"  {out}[{i}] = {self._call(fn, tuple(arrays[nm] for nm in self.names))}; }}"]
        return "\n".join(lines)

    def index_maps(self, args: dict) -> Access:
        """For a recorded launch: its n outputs, each written at i, and each input's flat
        offset per output."""
        n = int(args["n"])
        g = np.asarray(args["geom"], dtype=np.int64)
        rank = int(g[0])
        shape = g[1:1 + rank]
        offs = {name: _strided_offsets(shape, g[1 + (k + 1) * rank:1 + (k + 2) * rank], n)
                for k, name in enumerate(self.names)}
        return Access(n, np.arange(n), offs)

    def affine(self, args: dict, names: tuple[str, ...]) -> tuple | None:
        """(dims, {input: (0, its strides)}, ()), rank >= 1 (``names``: the inputs)."""
        g = [int(v) for v in np.asarray(args.get("geom", ()), np.int64).ravel()]
        if not g or g[0] < 1 or len(g) != 1 + g[0] * (1 + len(names)):
            return None
        rank = g[0]
        return g[1:1 + rank], {nm: (0, g[1 + (k + 1) * rank:1 + (k + 2) * rank])
                               for k, nm in enumerate(names)}, ()


@dataclass(frozen=True)
class Product(Form):
    """``c[b, i, j]`` = the serial chain over k ascending of row i of op(a) and column j of
    op(b) by the kernel's row helper (``calls[0]``: ``gt_dot`` or ``gt_dot_fma``) under the
    ``inner`` contract (``gtensor.ops.inner``); op(x) is x read transposed in place under its
    flag. Scalars: batch, m, k, n, ta, tb. A generated kernel computes a single product
    (batch 1); a dropped transpose copy makes an operand read transposed in place too."""

    inner: str  # "plain" or "fma"

    def fuses(self, args: dict) -> bool:
        """One product (batch 1): a batched one keeps its launch."""
        return int(args["batch"]) == 1

    def transposed(self, args: dict) -> dict:
        """The operands flagged ``ta`` / ``tb``, read transposed in place."""
        return {p: args[p] for flag, p in (("ta", "a"), ("tb", "b")) if int(args.get(flag, 0))}

    def index_maps(self, args: dict) -> Access:
        """Iteration i writes c[i]; it reads row i / n of op(a) and all of op(b) (no
        per-element maps: ``row_aligned`` answers for the rows)."""
        n = int(args["batch"]) * int(args["m"]) * int(args["n"])
        return Access(n, np.arange(n))

    def row_aligned(self, param: str, rows: int, args: dict, transposed: Collection[str]
                    ) -> bool | None:
        """Row i of c reads row i of a (read as it is) and all of b."""
        return param == "a" and "a" not in transposed and int(args["m"]) == rows

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One output: the row helper on row i_ of op(a) and column j_ of op(b), a transposed
        operand read in place (from its source)."""
        v, m, k, n = arrays, scalars["m"], scalars["k"], scalars["n"]
        ar, ast = (f"{v['a']} + i_", m) if "a" in transposed else (f"{v['a']} + i_ * {k}", "1")
        bc, bst = (f"{v['b']} + j_ * {k}", "1") if "b" in transposed else (f"{v['b']} + j_", n)
        return (f"{{ const long long i_ = {i} / {n}, j_ = {i} % {n};\n"
                f"  {v['c']}[{i}] = {calls[0]}({ar}, {ast}, {bc}, {bst}, {k}); }}")


# two float inputs on the cpu: gtcpu::rows2 walks the innermost rows of the broadcast shape;
# $CONTIGUOUS is a contiguous row's loop (both inputs' strides 1)
_CPU_ROWS2_WALK = """\
    const int rank = (int)geom[0];
    gtcpu::rows2(rank, geom + 1, geom + 1 + rank, 0, geom + 1 + 2 * rank, 0, $COST,
                 [=](long long at, long long oa, long long ob, long long len, long long ia,
                     long long ib) {
        $T* yr = y + at;
        const $T* ar = $A + oa;
        const $T* br = $B + ob;
        if (ia == 1 && ib == 1) {
$CONTIGUOUS
        } else if (ia == 1 && ib == 0) {
            const $T bv = br[0];
            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j], bv);
        } else if (ia == 0 && ib == 1) {
            const $T av = ar[0];
            for (long long j = 0; j < len; ++j) yr[j] = $FN(av, br[j]);
        } else {
            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j * ia], br[j * ib]);
        }
    });"""
_CPU_ROWS2 = _CPU_ROWS2_WALK.replace(
    "$CONTIGUOUS", "            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j], br[j]);")
# the same with a first stage (``$FIRST``, ``ScalarFn.first_stage``): a contiguous row runs in
# blocks of FIRST_BLOCK, the stage over the block as one vectorized loop, then the function
# itself for the lanes the stage left undecided (Map.staged_range's loop, two inputs); each
# element's inputs are read before its output is written, so y may be a or b; broadcast rows
# call the function per element
_CPU_ROWS2_STAGED = _CPU_ROWS2_WALK.replace("$CONTIGUOUS", """\
            for (long long b0 = 0; b0 < len; b0 += $BLOCK) {
                const int m = (int)(len - b0 < $BLOCK ? len - b0 : $BLOCK);
                const $T* __restrict ab = ar + b0;
                const $T* __restrict bb = br + b0;
""" + staged_block("$T", "$FIRST(ab[j], bb[j], gt_bad)", "$FN(ar[b0 + j], br[b0 + j])",
                   "yr[b0 + j]", " " * 16) + """
            }""")

ZIP2 = Zip(("a", "b"))  # the binary elementwise ops' form


# geom = [rank, shape[rank], in_strides[rank], in_offset, out_strides[rank], out_offset]
_COPY = """\
    const int rank = (int)geom[0];
    const long long* shape = geom + 1;
    const long long* si = geom + 1 + rank;
    const long long ioff = geom[1 + 2 * rank];
    const long long* so = geom + 2 + 2 * rank;
    const long long ooff = geom[2 + 3 * rank];
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        long long rem = i, oi = ioff, oo = ooff;
        for (int d = rank - 1; d >= 0; --d) {
            const long long c = rem % shape[d];
            rem /= shape[d];
            oi += c * si[d];
            oo += c * so[d];
        }
        y[oo] = x[oi];
    }"""

# CPU bodies: the same geometry walked one innermost row at a time (rows across threads).
_CPU_COPY = """\
    const int rank = (int)geom[0];
    const long long* shape = geom + 1;
    const long long* s1 = geom + 1 + rank;
    const long long* s2 = geom + 2 + 2 * rank;
    if (rank >= 2 && s1[rank - 2] == 1 && s1[rank - 1] != 1 && s2[rank - 1] == 1) {
        // the last two axes swapped (a transpose): TB x TB tiles, so that the strided reads of
        // one tile share cache lines and pages instead of touching a new one per element; each
        // tile goes through a small contiguous buffer (read along x's rows, written along y's)
        // -- NOTE: read in place, a tile's lines lie a power-of-two stride apart for the common
        // shapes, all in one L1 set, and evict each other on every element
        constexpr long long TB = 32;
        const long long R = shape[rank - 2], C = shape[rank - 1];
        const long long si = s1[rank - 1], so = s2[rank - 2];
        const long long bands = (R + TB - 1) / TB;
        long long planes = 1;
        for (int d = 0; d < rank - 2; ++d) planes *= shape[d];
        gtcpu::parallel_for(planes * bands, TB * C, [=](long long lo, long long hi) {
            typedef typename std::remove_reference<decltype(*y)>::type E;
            E tmp[TB * TB];  // one tile, contiguous (8 KB in float64)
            for (long long t = lo; t < hi; ++t) {
                long long o1 = geom[1 + 2 * rank], o2 = geom[2 + 3 * rank];
                gtcpu::offsets2(rank - 2, shape, s1, s2, t / bands, o1, o2);
                const long long r0 = t % bands * TB, r1 = r0 + TB < R ? r0 + TB : R;
                for (long long c0 = 0; c0 < C; c0 += TB) {
                    const long long c1 = c0 + TB < C ? c0 + TB : C;
                    if (r1 - r0 < TB) {  // a partial band: in place
                        for (long long r = r0; r < r1; ++r)
                            for (long long c = c0; c < c1; ++c)
                                y[o2 + r * so + c] = x[o1 + r + c * si];
                        continue;
                    }
                    for (long long c = c0; c < c1; ++c)
                        for (long long r = 0; r < TB; ++r)
                            tmp[(c - c0) * TB + r] = x[o1 + r0 + r + c * si];
                    for (long long r = 0; r < TB; ++r)
                        for (long long c = c0; c < c1; ++c)
                            y[o2 + (r0 + r) * so + c] = tmp[(c - c0) * TB + r];
                }
            }
        });
        return;
    }
    gtcpu::rows2(rank, shape, s1, geom[1 + 2 * rank], s2, geom[2 + 3 * rank], 1,
                 [=](long long, long long oi, long long oo, long long len, long long si,
                     long long so) {
        if (si == 1 && so == 1) {
            for (long long j = 0; j < len; ++j) y[oo + j] = x[oi + j];
        } else if (si == 0 && so == 1) {  // a broadcast row (mean's and sum's backward)
            const auto v = x[oi];
            for (long long j = 0; j < len; ++j) y[oo + j] = v;
        } else {
            for (long long j = 0; j < len; ++j) y[oo + j * so] = x[oi + j * si];
        }
    });"""

MAP = Map()  # the unary elementwise ops' form
SCALAR = Map(("s",))  # adds, muls: a host scalar after x[i]
FILL = Fill()
COPY = Copy()  # the movement ops' form


# geom = [ro, out_shape[ro], out_strides_in_x[ro], rr, red_shape[rr], red_strides_in_x[rr]],
# read the same way by the CUDA and the CPU body.
_GEOM = """\
    const int ro = (int)geom[0];
    const long long* oshape = geom + 1;
    const long long* ostride = geom + 1 + ro;
    const int rr = (int)geom[1 + 2 * ro];
    const long long* rshape = geom + 2 + 2 * ro;
    const long long* rstride = geom + 2 + 2 * ro + rr;
"""

_REDUCE = Template(_GEOM + """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < nout; o += step) {
        long long rem = o, base = 0;
        for (int d = ro - 1; d >= 0; --d) {
            base += (rem % oshape[d]) * ostride[d];
            rem /= oshape[d];
        }
        const $T acc = $SUM(x, base, nred, rr, rshape, rstride);
        y[o] = $FIN;
    }""")

# CPU body, same geometry. Each output slot is still one serial sum in row-major order, first
# element first. Two layouts get loops the compiler vectorizes across output slots: a column
# sum (one reduced axis outside one contiguous kept axis: y[o] = x[o], then y[o] = y[o] +
# x[r*rs + o] for r ascending; also in runs, when more kept axes lie outside the contiguous
# one); when the innermost reduced axis is contiguous (row sums, BatchNorm's sums over
# (n, h, w)), groups of 8 outputs run their chains side by side over a list of the outer
# reduced offsets (no per-element index decode); the rest is the CUDA body's serial sum (the
# SUM device function).
_CPU_REDUCE = Template(_GEOM + """\
    // w (<= 64) adjacent column sums: y[o] = x[o], then y[o] + x[r * rs + o] for r ascending,
    // the chains in a local block written to y once (two threads' outputs may share a cache
    // line: written at every r, it went back and forth between the cores)
    auto column_block = [](const $T* xb, $T* yo, long long w, long long nred, long long rs) {
        $T acc[64];
        for (long long o = 0; o < w; ++o) acc[o] = xb[o];
        for (long long r = 1; r < nred; ++r) {
            const $T* xr = xb + r * rs;
            for (long long o = 0; o < w; ++o) acc[o] = $ADD(acc[o], xr[o]);
        }
        for (long long o = 0; o < w; ++o) yo[o] = acc[o];
    };
    if (ro == 1 && rr == 1 && ostride[0] == 1 && nred > 0) {
        const long long rs = rstride[0];
        gtcpu::parallel_for(nout, nred, [=](long long lo, long long hi) {
            for (long long o0 = lo; o0 < hi; o0 += 64)
                column_block(x + o0, y + o0, hi - o0 < 64 ? hi - o0 : 64, nred, rs);$FIN_COL
        });
        return;
    }
    if (ro > 1 && rr == 1 && ostride[ro - 1] == 1 && nred > 0 && nout > 0) {
        // the column sum in runs: the innermost kept axis is contiguous, so outputs come in
        // runs of L whose bases are decoded once; each run is the column sum above
        const long long L = oshape[ro - 1], rs = rstride[0];
        gtcpu::parallel_for(nout / L, L * nred, [=](long long lo, long long hi) {
            for (long long run = lo; run < hi; ++run) {
                long long rem = run, base = 0;
                for (int d = ro - 2; d >= 0; --d) {
                    base += (rem % oshape[d]) * ostride[d];
                    rem /= oshape[d];
                }
                const $T* xb = x + base;
                $T* yo = y + run * L;
                for (long long o0 = 0; o0 < L; o0 += 64)
                    column_block(xb + o0, yo + o0, L - o0 < 64 ? L - o0 : 64, nred, rs);$FIN_RUN
            }
        });
        return;
    }
    if (rr >= 1 && rr <= 16 && rstride[rr - 1] == 1 && nred > 0 && nout > 0) {
        // the innermost reduced axis is contiguous (BatchNorm's sums over (n, h, w), row
        // sums): the outer reduced positions' offsets listed once (row-major), then groups
        // of 8 outputs run their serial sums side by side (8 independent chains, each the
        // row-major order: outer offset, then its run ascending, first element first)
        const long long RUN = rshape[rr - 1], nouter = nred / RUN;
        long long* offs = new long long[nouter];
        {
            long long idx[16] = {0}, off = 0;
            for (long long u = 0; u < nouter; ++u) {
                offs[u] = off;
                for (int d = rr - 2; d >= 0; --d) {  // odometer over the outer reduced axes
                    off += rstride[d];
                    if (++idx[d] < rshape[d]) break;
                    off -= idx[d] * rstride[d];
                    idx[d] = 0;
                }
            }
        }
        const long long* offp = offs;
        auto decode = [=](long long o) {
            long long rem = o, base = 0;
            for (int d = ro - 1; d >= 0; --d) {
                base += (rem % oshape[d]) * ostride[d];
                rem /= oshape[d];
            }
            return base;
        };
        auto group = [=](auto n_, long long o0) {
            constexpr int G = decltype(n_)::value;
            long long base[G];
            $T acc[G];
            for (int j = 0; j < G; ++j) {
                base[j] = decode(o0 + j);
                acc[j] = x[base[j] + offp[0]];
            }
            for (long long u = 0; u < nouter; ++u) {
                const $T* p = x + offp[u];
                for (long long r = u == 0 ? 1 : 0; r < RUN; ++r)
                    for (int j = 0; j < G; ++j) acc[j] = $ADD(acc[j], p[base[j] + r]);
            }
            for (int j = 0; j < G; ++j) y[o0 + j] = $FIN_G;
        };
        gtcpu::parallel_for((nout + 7) / 8, 8 * nred, [=](long long lo, long long hi) {
            for (long long q = lo; q < hi; ++q) {
                const long long o0 = 8 * q;
                if (o0 + 8 <= nout)
                    group(gtcpu::Int<8>{}, o0);
                else
                    for (long long o = o0; o < nout; ++o) group(gtcpu::Int<1>{}, o);
            }
        });
        delete[] offs;
        return;
    }
    gtcpu::parallel_for(nout, nred, [=](long long lo, long long hi) {
        for (long long o = lo; o < hi; ++o) {
            long long rem = o, base = 0;
            for (int d = ro - 1; d >= 0; --d) {
                base += (rem % oshape[d]) * ostride[d];
                rem /= oshape[d];
            }
            const $T acc = $SUM(x, base, nred, rr, rshape, rstride);
            y[o] = $FIN;
        }
    });""")

REDUCE = Reduce()  # sum, mean, sum_to: the fold, then / count under ``mean``
FOLD = Reduce(finish=False)  # amax, amin, prod: the fold is the result
# the fused optimizer updates: y[i] = F(x[i], g[i], p[i], scale[0], k, c, alpha) and
# y[i] = gt_adam_p(p[i], m[i], v[i], lr_t[0], eps)
UPDATE = Pointwise(("x", "g", "p", "scale"), (("scale", "sc"),), ("k", "c", "alpha"))
ADAM_P = Pointwise(("p", "m", "v", "lr_t"), (("lr_t", "lr"),), ("eps",))


_ROWS = Template("""\
$SHARED    __shared__ $T total;
    const long long rows = A * B;
    const int t = threadIdx.x, nt = blockDim.x;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long base = (row / B) * R * B + row % B;
$BODY
        __syncthreads();
    }""")

# CPU bodies: rows split across threads, each row run by one thread in the defined order (the
# max left to right; the serial sums first element first). Row r's elements are B apart.
_CPU_ROWS = Template("""\
    gtcpu::parallel_for(A * B, R * $COST, [=](long long lo, long long hi) {
        for (long long row = lo; row < hi; ++row) {
            const long long base = (row / B) * R * B + row % B;
$BODY
        }
    });""")

# The same with contiguous rows (B == 1) taken G at a time: G independent serial chains side by
# side hide the latency of each one (a row's chain alone waits on every add); each row keeps
# its own order. ``rows`` is instantiated for G = $L, then 1 (the rows left over, one at a time:
# G = 4 and 2 as well made log_softmax's library compile 40% longer for a remainder's few rows).
_CPU_ROWS_LANES = Template("""\
    gtcpu::parallel_for(A * B, R * $COST, [=](long long lo, long long hi) {
        long long row = lo;
        if (B == 1) {
            auto rows = [&](auto lanes) {
                constexpr int G = decltype(lanes)::value;
                const long long base = row * R;
$LANES_BODY
            };
            for (; row + $L <= hi; row += $L) rows(std::integral_constant<int, $L>{});
            for (; row < hi; ++row) rows(std::integral_constant<int, 1>{});
        }
        for (; row < hi; ++row) {
            const long long base = (row / B) * R * B + row % B;
$BODY
        }
    });""")

XY_ROWS = Rows(("x",), ("y",))  # softmax, log_softmax, logsumexp
GY_ROWS = Rows(("g", "y"), ("out",))  # their backward helpers
