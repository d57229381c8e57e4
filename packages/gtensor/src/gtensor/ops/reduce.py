"""Reductions: sum, mean and sum_to (the broadcast-reduce of backward passes).

Definition (all three): each output slot is a serial sum, in row-major order of the input
positions that reduce into it. The accumulator starts at the FIRST such element (so a sum of
one -0.0 is -0.0); a slot with no elements is +0.0. ``mean`` then divides once by the count,
rounded to the dtype: ``mean = sum / T(n)`` (0/0 = NaN for an empty mean).
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import shapes
from ..dtypes import FLOATS, FloatType
from ..kernels import DeviceFn, Kernel, params
from .elementwise import ADD, BLOCK, DIV, grid_for, of
from .registry import Op, register

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
        y[o] = mean ? $DIV(acc, count) : acc;
    }""")

# One output of a reduction: the serial sum, first element first, over the reduced positions
# (geometry rshape/rstride from ``base``); the per-node kernel and fused kernels both call it.
_SUM = Template("""\
__device__ __forceinline__ $T $NAME(const $T* x, long long base, long long nred, int rr,
                                     const long long* rshape, const long long* rstride)
{
    $T acc = ($T)0;
    for (long long r = 0; r < nred; ++r) {
        long long rrem = r, off = base;
        for (int d = rr - 1; d >= 0; --d) {
            off += (rrem % rshape[d]) * rstride[d];
            rrem /= rshape[d];
        }
        acc = (r == 0) ? x[off] : $ADD(acc, x[off]);
    }
    return acc;
}
""")
SUM = {ft: DeviceFn(ft.fn("sum"), _SUM.substitute(T=ft.ctype, NAME=ft.fn("sum"),
                                                  ADD=ADD[ft].cname), (ADD[ft],))
       for ft in FLOATS}


# CPU body, same geometry. Each output slot is still one serial sum in row-major order, first
# element first. Two layouts get loops the compiler vectorizes across output slots: a column
# sum (one reduced axis outside one contiguous kept axis: y[o] = x[o], then y[o] = y[o] +
# x[r*rs + o] for r ascending) and a row sum over a contiguous run; the rest is the CUDA body's
# serial sum (the SUM device function).
_CPU_REDUCE = Template(_GEOM + """\
    if (ro == 1 && rr == 1 && ostride[0] == 1 && nred > 0) {
        const long long rs = rstride[0];
        gtcpu::parallel_for(nout, nred, [=](long long lo, long long hi) {
            for (long long o = lo; o < hi; ++o) y[o] = x[o];
            for (long long r = 1; r < nred; ++r) {
                const $T* xr = x + r * rs;
                for (long long o = lo; o < hi; ++o) y[o] = $ADD(y[o], xr[o]);
            }
            if (mean)
                for (long long o = lo; o < hi; ++o) y[o] = $DIV(y[o], count);
        });
        return;
    }
    gtcpu::parallel_for(nout, nred, [=](long long lo, long long hi) {
        for (long long o = lo; o < hi; ++o) {
            long long rem = o, base = 0;
            for (int d = ro - 1; d >= 0; --d) {
                base += (rem % oshape[d]) * ostride[d];
                rem /= oshape[d];
            }
            $T acc = ($T)0;
            if (rr == 1 && rstride[0] == 1) {
                const $T* xr = x + base;
                if (nred > 0) acc = xr[0];
                for (long long r = 1; r < nred; ++r) acc = $ADD(acc, xr[r]);
            } else {
                acc = $SUM(x, base, nred, rr, rshape, rstride);
            }
            y[o] = mean ? $DIV(acc, count) : acc;
        }
    });""")


def _cpu_kernels(ft: FloatType) -> list[Kernel]:
    body = _CPU_REDUCE.substitute(T=ft.ctype, ADD=ADD[ft].cname, DIV=DIV[ft].cname,
                                  SUM=SUM[ft].name)
    return [Kernel(k.name, k.params, body) for k in _kernels(ft)]


def _kernels(ft: FloatType) -> list[Kernel]:
    t = ft.ctype
    sig = params(f"const {t}* x, {t}* y, long long nout, long long nred, int mean, {t} count, "
                 "const long long* geom")
    body = _REDUCE.substitute(T=t, SUM=SUM[ft].name, DIV=DIV[ft].cname)
    return [Kernel(ft.kernel("reduce"), sig, body, "reduce", (SUM[ft], DIV[ft]))]


def serial_sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Serial sums over ``axes`` in row-major order, first element first; shape: kept axes."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    nred = shapes.size([x.shape[i] for i in axes])
    out_shape = tuple(x.shape[i] for i in kept)
    if nred == 0:
        return np.zeros(out_shape, x.dtype)
    flat = np.transpose(x, kept + tuple(axes)).reshape(-1, nred)
    # NOTE: ufunc.accumulate is a strict left-to-right recurrence (unlike np.sum, which is
    # pairwise), so its last column is exactly the serial sum.
    return np.add.accumulate(flat, axis=1)[:, -1].reshape(out_shape)


def _reduced_axes(op: str, ndim: int, axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return (shapes.normalize_axis(op, axis, ndim),)


def _launch_reduce(rt, ks, x, out, axes: tuple[int, ...], mean: bool) -> None:
    """Enqueue the reduce kernel summing ``x`` over ``axes`` into contiguous ``out``."""
    nout = out.size
    if not nout:
        return
    st = shapes.contiguous_strides(x.shape)
    kept = [i for i in range(x.ndim) if i not in axes]
    odims, (ost,) = shapes.collapse(tuple(x.shape[i] for i in kept), tuple(st[i] for i in kept))
    rdims, (rst,) = shapes.collapse(tuple(x.shape[i] for i in axes), tuple(st[i] for i in axes))
    nred = shapes.size([x.shape[i] for i in axes])
    if nred == 0:
        rdims, rst = (), ()
    geom = rt.geom((len(odims), *odims, *ost, len(rdims), *rdims, *rst))
    rt.launch(ks["reduce"], grid_for(nout), BLOCK,
              (x, out, nout, nred, int(mean), of(out).scalar(nred), geom))


# --------------------------------------------------------------------------- sum / mean
def _infer_reduce(op: str):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        (shape,) = shapes_
        keepdims = attrs.get("keepdims", False)
        if not isinstance(keepdims, (bool, np.bool_)):
            raise TypeError(f"{op}: keepdims must be a bool, got {keepdims!r}")
        axes = _reduced_axes(op, len(shape), attrs.get("axis"))
        out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keepdims else tuple(
            d for i, d in enumerate(shape) if i not in axes)
        return out, {"axis": None if attrs.get("axis") is None else axes[0],
                     "keepdims": bool(keepdims)}

    return infer


def _sum_reference(x: np.ndarray, *, axis, keepdims: bool) -> np.ndarray:
    axes = _reduced_axes("sum", x.ndim, axis)
    s = serial_sum(x, axes)
    return s.reshape([1 if i in axes else d for i, d in enumerate(x.shape)]) if keepdims else s


def _mean_reference(x: np.ndarray, *, axis, keepdims: bool) -> np.ndarray:
    axes = _reduced_axes("mean", x.ndim, axis)
    n = shapes.size([x.shape[i] for i in axes])
    s = _sum_reference(x, axis=axis, keepdims=keepdims)
    return DIV[of(x)].numpy(s, of(x).scalar(n))


def _launch_sum(rt, ks, ins, out, *, axis, keepdims: bool) -> None:
    _launch_reduce(rt, ks, ins[0], out, _reduced_axes("sum", ins[0].ndim, axis), False)


def _launch_mean(rt, ks, ins, out, *, axis, keepdims: bool) -> None:
    _launch_reduce(rt, ks, ins[0], out, _reduced_axes("mean", ins[0].ndim, axis), True)


def _keepdims_shape(x_shape: tuple, axis) -> tuple:
    axes = _reduced_axes("sum", len(x_shape), axis)
    return tuple(1 if i in axes else d for i, d in enumerate(x_shape))


def _sum_vjp(be, g, ins, out, needs, *, axis, keepdims):
    x = ins[0]
    return (be.broadcast_to(be.reshape(g, _keepdims_shape(x.shape, axis)), x.shape),)


def _mean_vjp(be, g, ins, out, needs, *, axis, keepdims):
    x = ins[0]
    n = shapes.size([x.shape[i] for i in _reduced_axes("mean", x.ndim, axis)])
    scaled = be.muls(g, 1.0 / n) if n else be.muls(g, float("nan"))
    return (be.broadcast_to(be.reshape(scaled, _keepdims_shape(x.shape, axis)), x.shape),)


register(Op("sum", ("x",), ("axis", "keepdims"), _infer_reduce("sum"), _sum_reference, _kernels,
            _launch_sum, _sum_vjp, "serial sum over all elements or one axis",
            {"axis": None, "keepdims": False}, cpu=_cpu_kernels))
register(Op("mean", ("x",), ("axis", "keepdims"), _infer_reduce("mean"), _mean_reference,
            _kernels, _launch_mean, _mean_vjp, "serial sum / count, over all elements or one axis",
            {"axis": None, "keepdims": False}, cpu=_cpu_kernels))


# --------------------------------------------------------------------------- sum_to
def sum_to_axes(x_shape: tuple, shape: tuple) -> tuple[int, ...]:
    """Axes of ``x_shape`` that ``sum_to`` reduces to reach ``shape`` (numpy's rule reversed)."""
    lead = len(x_shape) - len(shape)
    return tuple(i for i in range(len(x_shape))
                 if i < lead or (shape[i - lead] == 1 and x_shape[i] != 1))


def _infer_sum_to(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (x_shape,) = shapes_
    shape = shapes.normalize_shape("sum_to", attrs["shape"])
    lead = len(x_shape) - len(shape)
    ok = lead >= 0 and all(s == x_shape[i + lead] or s == 1 for i, s in enumerate(shape))
    if not ok:
        raise ValueError(f"sum_to: cannot reduce an array of shape {x_shape} to shape {shape} "
                         f"(expected a shape that broadcasts to {x_shape})")
    return shape, {"shape": shape}


def _sum_to_reference(x: np.ndarray, *, shape: tuple) -> np.ndarray:
    return serial_sum(x, sum_to_axes(x.shape, shape)).reshape(shape)


def _launch_sum_to(rt, ks, ins, out, *, shape: tuple) -> None:
    _launch_reduce(rt, ks, ins[0], out, sum_to_axes(ins[0].shape, shape), False)


register(Op("sum_to", ("x",), ("shape",), _infer_sum_to, _sum_to_reference, _kernels,
            _launch_sum_to,
            lambda be, g, ins, out, needs, shape: (be.broadcast_to(g, ins[0].shape),),
            "serial sum of x over the axes that broadcast ``shape`` to x.shape", cpu=_cpu_kernels))
