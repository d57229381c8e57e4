"""softmax along one axis, and its backward helper softmax_grad.

Definition, per row r (the positions along ``axis``):
``m = max(x_r)`` (NaN if any is NaN), ``e_i = exp(x_i - m)`` with our exp,
``s = serial sum of e_i`` (first element first), ``y_i = e_i / s``.
The order in which the max is found cannot change a bit of y: only the sign of a zero max
depends on it, and x - (+0) and x - (-0) give the same exp. softmax_grad:
``d = serial sum of g_i * y_i``, ``out_i = y_i * (g_i - d)``.

The kernels run a block per row: a shared-memory tree for the max, a parallel map, and the
serial sums on thread 0 (the sum order is the definition, so it is not a tree). The cpu
kernels run each row on one thread in order; contiguous rows go 8 at a time with their serial
chains interleaved (independent accumulators, one per row), which changes no bit.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import shapes
from ..dtypes import FloatType
from ..kernels import Kernel, Kind
from .elementwise import ADD, DIV, EXP, MAX, MUL, SUB, of
from .forms import FIRST_STAGE_LOOP, GY_ROWS, ROW_ELEMENT_COST, ROW_THREADS, XY_ROWS, split_cost
from .reduce import serial_sum
from .registry import Op, register

# MAX (elementwise.py): NaN-propagating max; here only where the order of comparisons cannot
# matter (see above).

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


def exp_staged(stmt: str, indent: str, lane_head: str | None = None) -> str:
    """A cpu row loop (template text) whose statement ``stmt`` (about ``r``) calls
    ``$EXP_FIRST(..., gt_bad)``: exp's first stage over the row (elementwise.py, forms.Map),
    then the row again with exp itself (``$EXP``) if the stage left any lane undecided (the
    outputs never alias the inputs). With ``lane_head`` (a statement about ``k``), G rows at a
    time in the LANES form, the head opening each row's loop."""
    full = stmt.replace("$EXP_FIRST(", "$EXP(").replace(", gt_bad)", ")")
    i = indent
    if lane_head is None:
        return (f"{i}$FIRST_STAGE\n{i}unsigned char gt_any = 0;\n"
                f"{i}for (long long r = 0; r < R; ++r) {{\n"
                f"{i}    bool gt_bad = false;\n{i}    {stmt}\n{i}    gt_any |= gt_bad;\n{i}}}\n"
                f"{i}if (gt_any)\n{i}    for (long long r = 0; r < R; ++r) {full}\n")
    return (f"{i}$FIRST_STAGE\n{i}unsigned char gt_any = 0;\n"
            f"{i}for (int k = 0; k < G; ++k) {{\n{i}    {lane_head}\n"
            f"{i}    for (long long r = 0; r < R; ++r) {{\n{i}        bool gt_bad = false;\n"
            f"{i}        {stmt}\n{i}        gt_any |= gt_bad;\n{i}    }}\n{i}}}\n"
            f"{i}if (gt_any)\n{i}    for (int k = 0; k < G; ++k) {{\n{i}        {lane_head}\n"
            f"{i}        for (long long r = 0; r < R; ++r) {full}\n{i}    }}\n")


# exp over a row (its shift mx), and over G rows (row k's shift mx[k])
EXP_ROW = exp_staged("yr[r * B] = $EXP_FIRST($SUB(xr[r * B], mx), gt_bad);", " " * 12)
EXP_ROW_LANES = exp_staged("yr[k * R + r] = $EXP_FIRST($SUB(xr[k * R + r], m), gt_bad);",
                           " " * 16, "const $T m = mx[k];")

_CPU_SOFTMAX = Template("""\
            const $T* xr = x + base;
            $T* yr = y + base;
            $T mx = xr[0];
            for (long long r = 1; r < R; ++r) mx = $MAX(mx, xr[r * B]);
""" + EXP_ROW + """\
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


# The same rows G at a time (contiguous rows, Rows.cpu_interleaved_body: row k of the G at
# xr + k * R): the serial chains (max, sum) of the G rows run side by side, one accumulator
# per row, each over its own row in the defined order; the maps between them run row by row
# over contiguous elements (they vectorize). ROW_MAX_LANES leaves row k's max in mx[k].
ROW_MAX_LANES = """\
                $T mx[G];
                for (int k = 0; k < G; ++k) mx[k] = xr[k * R];
                for (long long r = 1; r < R; ++r)
                    for (int k = 0; k < G; ++k) mx[k] = $MAX(mx[k], xr[k * R + r]);
"""
# Row k's serial sum of yr (first element first) into s[k].
ROW_SUM_LANES = """\
                $T s[G];
                for (int k = 0; k < G; ++k) s[k] = yr[k * R];
                for (long long r = 1; r < R; ++r)
                    for (int k = 0; k < G; ++k) s[k] = $ADD(s[k], yr[k * R + r]);
"""

_CPU_SOFTMAX_LANES = Template("""\
                const $T* xr = x + base;
                $T* yr = y + base;
""" + ROW_MAX_LANES + EXP_ROW_LANES + ROW_SUM_LANES + """\
                for (int k = 0; k < G; ++k) {
                    const $T sk = s[k];
                    for (long long r = 0; r < R; ++r) yr[k * R + r] = $DIV(yr[k * R + r], sk);
                }""")

_CPU_SOFTMAX_GRAD_LANES = Template("""\
                const $T* gr = g + base;
                const $T* yr = y + base;
                $T* outr = out + base;
                $T d[G];
                for (int k = 0; k < G; ++k) d[k] = $MUL(gr[k * R], yr[k * R]);
                for (long long r = 1; r < R; ++r)
                    for (int k = 0; k < G; ++k)
                        d[k] = $ADD(d[k], $MUL(gr[k * R + r], yr[k * R + r]));
                for (int k = 0; k < G; ++k) {
                    const $T dk = d[k];
                    for (long long r = 0; r < R; ++r)
                        outr[k * R + r] = $MUL(yr[k * R + r], $SUB(gr[k * R + r], dk));
                }""")


def _cpu_kernels(cuda, body: Template, lanes: Template):
    def kernels(ft: FloatType) -> list[Kernel]:
        f = _fns(ft)
        return [Kernel(k.name, k.params,
                       k.form.cpu_interleaved_body(body.substitute(f), lanes.substitute(f),
                                                   cost=split_cost(k.calls, ROW_ELEMENT_COST)),
                       form=k.form)
                for k in cuda(ft)]

    return kernels


def _fns(ft: FloatType) -> dict[str, str]:
    return {"T": ft.ctype, "NT": str(ROW_THREADS), "MAX": MAX[ft].cname,
            "EXP": EXP[ft].cname, "SUB": SUB[ft].cname, "ADD": ADD[ft].cname,
            "DIV": DIV[ft].cname, "MUL": MUL[ft].cname, "EXP_FIRST": EXP[ft].first_cname,
            "FIRST_STAGE": FIRST_STAGE_LOOP}


def _softmax_kernels(ft: FloatType) -> list[Kernel]:
    t, f = ft.ctype, _fns(ft)
    body = XY_ROWS.cuda_body(_SOFTMAX.substitute(f), t, XY_ROWS.shared_buffer(t))
    return [Kernel(ft.kernel("softmax"), XY_ROWS.params(t), body, Kind.ROWS,
                   (MAX[ft], EXP[ft], SUB[ft], ADD[ft], DIV[ft]), XY_ROWS)]


def _softmax_grad_kernels(ft: FloatType) -> list[Kernel]:
    t, f = ft.ctype, _fns(ft)
    body = GY_ROWS.cuda_body(_SOFTMAX_GRAD.substitute(f), t)
    return [Kernel(ft.kernel("softmax_grad"), GY_ROWS.params(t), body, Kind.ROWS,
                   (MUL[ft], ADD[ft], SUB[ft]), GY_ROWS)]


def _launch_rows(rt, kernel: Kernel, arrays: tuple, shape: tuple, axis: int) -> None:
    """Enqueue a block-per-row kernel over the rows of ``shape`` along ``axis`` (its form's
    geometry and launch dims)."""
    launch = kernel.form.launch(shape, axis)
    if launch is not None:
        grid, block, geom = launch
        rt.launch(kernel, grid, block, (*arrays, *geom))


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
            cpu=_cpu_kernels(_softmax_kernels, _CPU_SOFTMAX, _CPU_SOFTMAX_LANES)))
register(Op("softmax_grad", ("g", "y"), ("axis",), _infer_axis("softmax_grad"),
            _softmax_grad_reference, _softmax_grad_kernels,
            lambda rt, ks, ins, out, *, axis: _launch_rows(
                rt, ks.only, (ins[0], ins[1], out), out.shape, axis),
            _softmax_grad_vjp,
            "y * (g - serial sum(g * y)) along one axis (softmax's backward from y)",
            {"axis": -1}, cpu=_cpu_kernels(_softmax_grad_kernels, _CPU_SOFTMAX_GRAD,
                                                _CPU_SOFTMAX_GRAD_LANES)))
