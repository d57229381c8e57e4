"""softmax along one axis, and its backward helper softmax_grad.

Definition, per row r (the positions along ``axis``):
``m = max(x_r)`` (NaN if any is NaN), ``e_i = exp(x_i - m)`` with our exp,
``s = serial sum of e_i`` (first element first), ``y_i = e_i / s``.
The order in which the max is found cannot change a bit of y: only the sign of a zero max
depends on it, and x - (+0) and x - (-0) give the same exp. softmax_grad:
``d = serial sum of g_i * y_i``, ``out_i = y_i * (g_i - d)``.

The kernels run a block per row: a shared-memory tree for the max, a parallel map, and the
serial sums on thread 0 (the sum order is the definition, so it is not a tree).
"""

from __future__ import annotations

from math import prod
from string import Template

import numpy as np

from .. import shapes
from ..dtypes import FloatType
from ..kernels import Kernel, params
from .elementwise import ADD, DIV, EXP, MAX, MUL, SUB, of
from .reduce import serial_sum
from .registry import Op, register

ROW_THREADS = 128
MAX_ROW_BLOCKS = 4096

# MAX (elementwise.py): NaN-propagating max; here only where the order of comparisons cannot
# matter (see above).

_ROWS = Template("""\
$SHARED    __shared__ $T total;
    const long long rows = A * B;
    const int t = threadIdx.x, nt = blockDim.x;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long base = (row / B) * R * B + row % B;
$BODY
        __syncthreads();
    }""")

# The row max of a block-per-row kernel: each thread's strided max, then a shared-memory tree
# (leaves the max in buf[0]); log_softmax and logsumexp use it too.
ROW_MAX_TREE = """\
        $T mx = xr[(t < R ? t : 0) * B];
        for (long long r = t + nt; r < R; r += nt) mx = $MAX(mx, xr[r * B]);
        buf[t] = mx;
        __syncthreads();
        for (int h = nt / 2; h > 0; h >>= 1) {
            if (t < h) buf[t] = $MAX(buf[t], buf[t + h]);
            __syncthreads();
        }
"""

_SOFTMAX = Template("""\
        const $T* xr = x + base;
        $T* yr = y + base;
""" + ROW_MAX_TREE + """\
        mx = buf[0];
        for (long long r = t; r < R; r += nt) yr[r * B] = $EXP($SUB(xr[r * B], mx));
        __syncthreads();
        if (t == 0) {
            $T s = yr[0];
            for (long long r = 1; r < R; ++r) s = $ADD(s, yr[r * B]);
            total = s;
        }
        __syncthreads();
        const $T s = total;
        for (long long r = t; r < R; r += nt) yr[r * B] = $DIV(yr[r * B], s);""")

_SOFTMAX_GRAD = Template("""\
        const $T* gr = g + base;
        const $T* yr = y + base;
        $T* outr = out + base;
        if (t == 0) {
            $T d = $MUL(gr[0], yr[0]);
            for (long long r = 1; r < R; ++r) d = $ADD(d, $MUL(gr[r * B], yr[r * B]));
            total = d;
        }
        __syncthreads();
        const $T d = total;
        for (long long r = t; r < R; r += nt) outr[r * B] = $MUL(yr[r * B], $SUB(gr[r * B], d));""")


# CPU bodies: rows split across threads, each row run by one thread in the defined order (the
# max left to right; the serial sums first element first). Row r's elements are B apart.
_CPU_ROWS = Template("""\
    gtcpu::parallel_for(A * B, R * 8, [=](long long lo, long long hi) {
        for (long long row = lo; row < hi; ++row) {
            const long long base = (row / B) * R * B + row % B;
$BODY
        }
    });""")

_CPU_SOFTMAX = Template("""\
            const $T* xr = x + base;
            $T* yr = y + base;
            $T mx = xr[0];
            for (long long r = 1; r < R; ++r) mx = $MAX(mx, xr[r * B]);
            for (long long r = 0; r < R; ++r) yr[r * B] = $EXP($SUB(xr[r * B], mx));
            $T s = yr[0];
            for (long long r = 1; r < R; ++r) s = $ADD(s, yr[r * B]);
            for (long long r = 0; r < R; ++r) yr[r * B] = $DIV(yr[r * B], s);""")

_CPU_SOFTMAX_GRAD = Template("""\
            const $T* gr = g + base;
            const $T* yr = y + base;
            $T* outr = out + base;
            $T d = $MUL(gr[0], yr[0]);
            for (long long r = 1; r < R; ++r) d = $ADD(d, $MUL(gr[r * B], yr[r * B]));
            for (long long r = 0; r < R; ++r) outr[r * B] = $MUL(yr[r * B], $SUB(gr[r * B], d));""")


def _cpu_kernels(cuda, body: Template):
    def kernels(ft: FloatType) -> list[Kernel]:
        f = _fns(ft)
        text = _CPU_ROWS.substitute(f, BODY=body.substitute(f))
        return [Kernel(k.name, k.params, text) for k in cuda(ft)]

    return kernels


def _fns(ft: FloatType) -> dict[str, str]:
    return {"T": ft.ctype, "NT": str(ROW_THREADS), "MAX": MAX[ft].cname,
            "EXP": EXP[ft].cname, "SUB": SUB[ft].cname, "ADD": ADD[ft].cname,
            "DIV": DIV[ft].cname, "MUL": MUL[ft].cname}


def _softmax_kernels(ft: FloatType) -> list[Kernel]:
    t, f = ft.ctype, _fns(ft)
    body = _ROWS.substitute(f, BODY=_SOFTMAX.substitute(f),
                            SHARED=f"    __shared__ {t} buf[{ROW_THREADS}];\n")
    sig = params(f"const {t}* x, {t}* y, long long A, long long R, long long B")
    return [Kernel(ft.kernel("softmax"), sig, body, "rows",
                   (MAX[ft], EXP[ft], SUB[ft], ADD[ft], DIV[ft]))]


def _softmax_grad_kernels(ft: FloatType) -> list[Kernel]:
    t, f = ft.ctype, _fns(ft)
    body = _ROWS.substitute(f, BODY=_SOFTMAX_GRAD.substitute(f), SHARED="")
    sig = params(f"const {t}* g, const {t}* y, {t}* out, long long A, long long R, long long B")
    return [Kernel(ft.kernel("softmax_grad"), sig, body, "rows", (MUL[ft], ADD[ft], SUB[ft]))]


def row_geometry(shape: tuple, axis: int) -> tuple[int, int, int]:
    """(A, R, B): rows before the axis, the axis length, elements after it."""
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def _row_threads(r: int) -> int:
    """Threads per row block: a power of two, at most ROW_THREADS."""
    nt = 1
    while nt < min(r, ROW_THREADS):
        nt *= 2
    return nt


def _launch_rows(rt, kernel: Kernel, arrays: tuple, shape: tuple, axis: int) -> None:
    a, r, b = row_geometry(shape, axis)
    if a * r * b == 0:
        return
    rt.launch(kernel, min(a * b, MAX_ROW_BLOCKS), _row_threads(r), (*arrays, a, r, b))


def _infer_axis(op: str):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        shape = shapes_[0]
        for i, s in enumerate(shapes_[1:], 1):
            if s != shape:
                raise ValueError(f"{op}: input {i} has shape {s}, input 0 has {shape}; "
                                 "expected equal shapes")
        return shape, {"axis": shapes.normalize_axis(op, attrs.get("axis", -1), len(shape))}

    return infer


def _softmax_reference(x: np.ndarray, *, axis: int) -> np.ndarray:
    ft = of(x)
    with np.errstate(invalid="ignore"):
        m = np.max(x, axis=axis, keepdims=True) if x.size else x
    e = EXP[ft].numpy(SUB[ft].numpy(x, m))
    s = np.expand_dims(serial_sum(e, (axis,)), axis)
    return DIV[ft].numpy(e, s)


def _softmax_grad_reference(g: np.ndarray, y: np.ndarray, *, axis: int) -> np.ndarray:
    ft = of(g)
    d = np.expand_dims(serial_sum(MUL[ft].numpy(g, y), (axis,)), axis)
    return MUL[ft].numpy(y, SUB[ft].numpy(g, d))


def _softmax_grad_vjp(be, g, ins, out, needs, axis):
    # out = y * (a - d), d = sum(a * y): d/da = softmax_grad(g, y);
    # d/dy = g * (a - d) - a * s, s = sum(g * y) (sums serial along the axis, kept)
    a, y = ins
    ga = be.softmax_grad(g, y, axis) if needs[0] else None
    if not needs[1]:
        return ga, None
    d = be.sum(be.mul(a, y), axis, True)
    s = be.sum(be.mul(g, y), axis, True)
    return ga, be.sub(be.mul(g, be.sub(a, d)), be.mul(a, s))


register(Op("softmax", ("x",), ("axis",), _infer_axis("softmax"), _softmax_reference,
            _softmax_kernels,
            lambda rt, ks, ins, out, *, axis: _launch_rows(
                rt, ks.only, (ins[0], out), out.shape, axis),
            lambda be, g, ins, out, needs, axis: (be.softmax_grad(g, out, axis),),
            "exp(x - max) / serial sum, along one axis", {"axis": -1},
            cpu=_cpu_kernels(_softmax_kernels, _CPU_SOFTMAX)))
register(Op("softmax_grad", ("g", "y"), ("axis",), _infer_axis("softmax_grad"),
            _softmax_grad_reference, _softmax_grad_kernels,
            lambda rt, ks, ins, out, *, axis: _launch_rows(
                rt, ks.only, (ins[0], ins[1], out), out.shape, axis),
            _softmax_grad_vjp,
            "y * (g - serial sum(g * y)) along one axis (softmax's backward from y)",
            {"axis": -1}, cpu=_cpu_kernels(_softmax_grad_kernels, _CPU_SOFTMAX_GRAD)))
