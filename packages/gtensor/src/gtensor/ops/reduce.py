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
from ..kernels import DeviceFn, Kernel
from .elementwise import ADD, BLOCK, DIV, grid_for, of
from .forms import REDUCE
from .registry import Op, register

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


def _cpu_kernels(ft: FloatType) -> list[Kernel]:
    body = REDUCE.cpu_body(SUM[ft].name, DIV[ft].cname, ADD[ft].cname, ft.ctype)
    return [Kernel(k.name, k.params, body, form=k.form) for k in _kernels(ft)]


def _kernels(ft: FloatType) -> list[Kernel]:
    body = REDUCE.cuda_body(SUM[ft].name, DIV[ft].cname, ft.ctype)
    return [Kernel(ft.kernel("reduce"), REDUCE.params(ft.ctype), body, "reduce",
                   (SUM[ft], DIV[ft]), REDUCE)]


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
    """The reduced axes, ascending: all (None), one int, or a tuple of distinct ints (the
    positions of an output then reduce in row-major order over those axes)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(sorted(shapes.normalize_axis(op, a, ndim) for a in axis))
        if len(set(axes)) != len(axes) or not axes:
            raise ValueError(f"{op}: axis {tuple(axis)!r} names an axis twice or none; expected "
                             "distinct axes")
        return axes
    return (shapes.normalize_axis(op, axis, ndim),)


def _launch_reduce(rt, ks, x, out, axes: tuple[int, ...], mean: bool) -> None:
    """Enqueue the reduce kernel summing ``x`` over ``axes`` into contiguous ``out``."""
    nout = out.size
    if not nout:
        return
    nred, geom = REDUCE.geometry(x.shape, axes)
    rt.launch(ks["reduce"], grid_for(nout), BLOCK,
              (x, out, nout, nred, int(mean), of(out).scalar(nred), rt.geom(geom)))


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
        axis = attrs.get("axis")
        norm = None if axis is None else axes if isinstance(axis, (tuple, list)) else axes[0]
        return out, {"axis": norm, "keepdims": bool(keepdims)}

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
            _launch_sum, _sum_vjp, "serial sum over all elements, one axis or several",
            {"axis": None, "keepdims": False}, cpu=_cpu_kernels))
register(Op("mean", ("x",), ("axis", "keepdims"), _infer_reduce("mean"), _mean_reference,
            _kernels, _launch_mean, _mean_vjp,
            "serial sum / count, over all elements, one axis or several",
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
