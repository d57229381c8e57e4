"""log_softmax and logsumexp along one axis (stable: the row max is subtracted first).

Definitions, per row r (the positions along ``axis``):

* ``m`` = the row max (NaN if any element is NaN), a zero max taken as +0.0 (``m = max + 0.0``:
  so the order in which the max is found cannot change the sign of a result);
* ``log_softmax``: ``s = serial sum of exp(x_i - m)`` (first element first, our exp),
  ``y_i = (x_i - m) - log(s)`` (our log). For finite logits s lies in [1, R], so y is finite:
  a margin of 740 in float64 gives exactly -740. A row of only -inf gives NaN (as torch).
* ``log_softmax_grad(g, y)``: ``d = serial sum of g_i``, ``out_i = g_i - exp(y_i) * d``.
* ``logsumexp``: ``m' = m`` unless m is +-inf, then +0.0 (as torch: a row of only -inf gives
  -inf, a row holding +inf gives +inf); ``m' + log(serial sum of exp(x_i - m'))``. Its
  backward is ``g * exp(x - out)`` (recorded ops).
"""

from __future__ import annotations

from string import Template

import numpy as np

from ..dtypes import FloatType
from ..kernels import Kernel, Kind
from .elementwise import ADD, EXP, LOG, MUL, SUB, of
from .forms import GY_ROWS, ROW_ELEMENT_COST, XY_ROWS, Rows, row_geometry, split_cost
from .reduce import serial_sum
from .registry import Op, register
from .softmax import (
    EXP_ROW,
    EXP_ROW_LANES,
    ROW_MAX_LANES,
    ROW_MAX_TREE,
    ROW_SUM_LANES,
    _fns,
    _infer_axis,
    _launch_rows,
    exp_staged,
)

_ROW_MAX = ROW_MAX_TREE + """\
        mx = $ADD(buf[0], ($T)0);
"""

_LOG_SOFTMAX = Template("""\
        const $T* xr = x + base;
        $T* yr = y + base;
""" + _ROW_MAX + """\
        for (long long r = t; r < R; r += nt) yr[r * B] = $EXP($SUB(xr[r * B], mx));
        __syncthreads();
        if (t == 0) {
            $T s = yr[0];
            for (long long r = 1; r < R; ++r) s = $ADD(s, yr[r * B]);
            total = $LOG(s);
        }
        __syncthreads();
        const $T ls = total;
        for (long long r = t; r < R; r += nt) yr[r * B] = $SUB($SUB(xr[r * B], mx), ls);""")

_CPU_LOG_SOFTMAX = Template("""\
            const $T* xr = x + base;
            $T* yr = y + base;
            $T mx = xr[0];
            for (long long r = 1; r < R; ++r) mx = $MAX(mx, xr[r * B]);
            mx = $ADD(mx, ($T)0);
""" + EXP_ROW + """\
            $T s = yr[0];
            for (long long r = 1; r < R; ++r) s = $ADD(s, yr[r * B]);
            const $T ls = $LOG(s);
            for (long long r = 0; r < R; ++r) yr[r * B] = $SUB($SUB(xr[r * B], mx), ls);""")

# The cpu kernels G contiguous rows at a time (softmax.py: ROW_MAX_LANES, ROW_SUM_LANES): the
# rows' serial chains side by side, each in its own order; the maps row by row.
_CPU_LOG_SOFTMAX_LANES = Template("""\
                const $T* xr = x + base;
                $T* yr = y + base;
""" + ROW_MAX_LANES + """\
                for (int k = 0; k < G; ++k) mx[k] = $ADD(mx[k], ($T)0);
""" + EXP_ROW_LANES + ROW_SUM_LANES + """\
                for (int k = 0; k < G; ++k) {
                    const $T m = mx[k], ls = $LOG(s[k]);
                    for (long long r = 0; r < R; ++r)
                        yr[k * R + r] = $SUB($SUB(xr[k * R + r], m), ls);
                }""")

_LOG_SOFTMAX_GRAD = Template("""\
        const $T* gr = g + base;
        const $T* yr = y + base;
        $T* outr = out + base;
        if (t == 0) {
            $T d = gr[0];
            for (long long r = 1; r < R; ++r) d = $ADD(d, gr[r * B]);
            total = d;
        }
        __syncthreads();
        const $T d = total;
        for (long long r = t; r < R; r += nt)
            outr[r * B] = $SUB(gr[r * B], $MUL($EXP(yr[r * B]), d));""")

_CPU_LOG_SOFTMAX_GRAD = Template("""\
            const $T* gr = g + base;
            const $T* yr = y + base;
            $T* outr = out + base;
            $T d = gr[0];
            for (long long r = 1; r < R; ++r) d = $ADD(d, gr[r * B]);
""" + exp_staged("outr[r * B] = $SUB(gr[r * B], $MUL($EXP_FIRST(yr[r * B], gt_bad), d));",
                 " " * 12))

_CPU_LOG_SOFTMAX_GRAD_LANES = Template("""\
                const $T* gr = g + base;
                const $T* yr = y + base;
                $T* outr = out + base;
                $T d[G];
                for (int k = 0; k < G; ++k) d[k] = gr[k * R];
                for (long long r = 1; r < R; ++r)
                    for (int k = 0; k < G; ++k) d[k] = $ADD(d[k], gr[k * R + r]);
""" + exp_staged("outr[k * R + r] = "
                 "$SUB(gr[k * R + r], $MUL($EXP_FIRST(yr[k * R + r], gt_bad), dk));",
                 " " * 16, "const $T dk = d[k];"))

_LSE_SHIFT = """\
        const bool inf = mx == $INF || mx == -$INF;
        const $T sh = inf ? ($T)0 : mx;
"""
_LOGSUMEXP = Template("""\
        const $T* xr = x + base;
""" + _ROW_MAX + _LSE_SHIFT + """\
        if (t == 0) {
            $T s = $EXP($SUB(xr[0], sh));
            for (long long r = 1; r < R; ++r) s = $ADD(s, $EXP($SUB(xr[r * B], sh)));
            y[row] = $ADD(sh, $LOG(s));
        }""")

_CPU_LOGSUMEXP = Template("""\
            const $T* xr = x + base;
            $T mx = xr[0];
            for (long long r = 1; r < R; ++r) mx = $MAX(mx, xr[r * B]);
            mx = $ADD(mx, ($T)0);
""" + _LSE_SHIFT.replace("        ", "            ") + """\
            $T s = $EXP($SUB(xr[0], sh));
            for (long long r = 1; r < R; ++r) s = $ADD(s, $EXP($SUB(xr[r * B], sh)));
            y[row] = $ADD(sh, $LOG(s));""")


def _f(ft: FloatType) -> dict[str, str]:
    return {**_fns(ft), "LOG": LOG[ft].cname, "INF": ft.literal(np.inf)}


def _kernels(name: str, form: Rows, cuda: Template, cpu_t: Template, calls, shared: bool,
             lanes: Template | None = None):
    def cuda_kernels(ft: FloatType) -> list[Kernel]:
        t, f = ft.ctype, _f(ft)
        pre = form.shared_buffer(t) if shared else ""
        body = form.cuda_body(cuda.substitute(f), t, pre)
        return [Kernel(ft.kernel(name), form.params(t), body, Kind.ROWS,
                       tuple(c[ft] for c in calls), form)]

    def cpu_kernels(ft: FloatType) -> list[Kernel]:
        f, (k,) = _f(ft), cuda_kernels(ft)
        cost = split_cost(k.calls, ROW_ELEMENT_COST)
        text = (form.cpu_body(cpu_t.substitute(f), cost) if lanes is None
                else form.cpu_interleaved_body(cpu_t.substitute(f), lanes.substitute(f),
                                               cost=cost))
        return [Kernel(k.name, k.params, text, form=form)]

    return cuda_kernels, cpu_kernels


def _row_max(x: np.ndarray, axis: int) -> np.ndarray:
    """The row max (NaN-propagating) plus +0.0, kept as a size-1 axis."""
    with np.errstate(invalid="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
    return ADD[of(x)].numpy(m, x.dtype.type(0.0))


def _log_softmax_ref(x: np.ndarray, *, axis: int) -> np.ndarray:
    if not x.size:
        return x.copy()
    ft = of(x)
    m = _row_max(x, axis)
    d = SUB[ft].numpy(x, m)
    s = np.expand_dims(serial_sum(EXP[ft].numpy(d), (axis,)), axis)
    return SUB[ft].numpy(d, LOG[ft].numpy(s))


def _log_softmax_grad_ref(g: np.ndarray, y: np.ndarray, *, axis: int) -> np.ndarray:
    ft = of(g)
    d = np.expand_dims(serial_sum(g, (axis,)), axis)
    return SUB[ft].numpy(g, MUL[ft].numpy(EXP[ft].numpy(y), d))


def _logsumexp_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    shape, norm = _infer_axis("logsumexp")(shapes_, attrs)
    axis = norm["axis"]
    if shape[axis] == 0:
        raise ValueError(f"logsumexp: axis {axis} of shape {shape} is empty; expected at "
                         "least one element per row")
    return shape[:axis] + shape[axis + 1:], norm


def _logsumexp_ref(x: np.ndarray, *, axis: int) -> np.ndarray:
    ft = of(x)
    m = _row_max(x, axis)
    sh = np.where(np.isinf(m), x.dtype.type(0.0), m)
    s = serial_sum(EXP[ft].numpy(SUB[ft].numpy(x, sh)), (axis,))
    return ADD[ft].numpy(np.squeeze(sh, axis), LOG[ft].numpy(s))


def _logsumexp_launch(rt, ks, ins, out, *, axis):
    x = ins[0]
    a, r, b = row_geometry(x.shape, axis)
    if a * b == 0:
        return
    _launch_rows(rt, ks.only, (x, out), x.shape, axis)


def _logsumexp_vjp(be, g, ins, out, needs, axis):
    x = ins[0]
    kept = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    e = be.exp(be.sub(x, be.reshape(out, kept)))
    return (be.mul(be.reshape(g, kept), e),)


def _log_softmax_grad_vjp(be, gg, ins, out, needs, axis):
    # out_i = g_i - e_i * d with e = exp(y), d = sum(g): d/dg_k = G_k - sum(G * e);
    # d/dy_i = -(G_i * e_i) * d (double backward)
    g, y = ins
    e = be.exp(y)
    ge = be.mul(gg, e)
    dg = be.sub(gg, be.sum(ge, axis, True)) if needs[0] else None
    dy = be.neg(be.mul(ge, be.sum(g, axis, True))) if needs[1] else None
    return dg, dy


_SM_CALLS = (EXP, SUB, ADD, LOG)
_ls_cuda, _ls_cpu = _kernels("log_softmax", XY_ROWS, _LOG_SOFTMAX, _CPU_LOG_SOFTMAX, _SM_CALLS,
                             True, _CPU_LOG_SOFTMAX_LANES)
_lsg_cuda, _lsg_cpu = _kernels("log_softmax_grad", GY_ROWS, _LOG_SOFTMAX_GRAD,
                               _CPU_LOG_SOFTMAX_GRAD, (EXP, SUB, ADD, MUL), False,
                               _CPU_LOG_SOFTMAX_GRAD_LANES)
_lse_cuda, _lse_cpu = _kernels("logsumexp", XY_ROWS, _LOGSUMEXP, _CPU_LOGSUMEXP, _SM_CALLS, True)


def _with_max(kernels):
    """Add the NaN-propagating max to a kernel's calls (the row max)."""
    from .elementwise import MAX

    def wrapped(ft: FloatType) -> list[Kernel]:
        return [Kernel(k.name, k.params, k.body, k.kind, (MAX[ft], *k.calls), k.form)
                for k in kernels(ft)]

    return wrapped


register(Op("log_softmax", ("x",), ("axis",), _infer_axis("log_softmax"), _log_softmax_ref,
            _with_max(_ls_cuda),
            lambda rt, ks, ins, out, *, axis: _launch_rows(
                rt, ks.only, (ins[0], out), out.shape, axis),
            lambda be, g, ins, out, needs, axis: (be.log_softmax_grad(g, out, axis),),
            "(x - m) - log(serial sum exp(x - m)), m the row max: stable, along one axis",
            {"axis": -1}, cpu=_ls_cpu))
register(Op("log_softmax_grad", ("g", "y"), ("axis",), _infer_axis("log_softmax_grad"),
            _log_softmax_grad_ref, _lsg_cuda,
            lambda rt, ks, ins, out, *, axis: _launch_rows(
                rt, ks.only, (ins[0], ins[1], out), out.shape, axis),
            _log_softmax_grad_vjp,
            "g - exp(y) * serial sum(g) along one axis (log_softmax's backward from y)",
            {"axis": -1}, cpu=_lsg_cpu))
register(Op("logsumexp", ("x",), ("axis",), _logsumexp_infer, _logsumexp_ref,
            _with_max(_lse_cuda), _logsumexp_launch, _logsumexp_vjp,
            "m + log(serial sum exp(x - m)) along one axis (m: the row max, +0.0 if infinite)",
            {"axis": -1}, cpu=_lse_cpu))
