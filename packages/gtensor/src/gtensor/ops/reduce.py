"""Reductions: sum, mean and sum_to (the broadcast-reduce of backward passes); amax, amin, prod.

Definition (all): each output slot is a serial fold, in row-major order of the input positions
that reduce into it, of the reduction's combine (``add``; ``maximum``, ``minimum``, ``mul``).
The accumulator starts at the FIRST such element (so a sum of one -0.0 is -0.0); a slot with no
elements is +0.0 for the sums, 1.0 for prod, and an error for amax / amin (torch's rule).
``mean`` then divides once by the count, rounded to the dtype: ``mean = sum / T(n)`` (0/0 =
NaN for an empty mean). amax / amin fold with ``maximum`` / ``minimum`` (NaN propagates; of
tied values, +0 and -0 included, the later one in the order is the result's bits).

The forms' ``REDUCE`` / ``FOLD`` also serve where another op's order is this one: the average
pools' whole windows (``ops.avg_pool``). Not where it is not: max_pool2d keeps the FIRST of tied
elements (torch's argmax rule: the gradient goes there) where amax's fold keeps the later's
bits, and softmax's row max is a strided max per thread, then a tree across the block.

Gradients: sum / mean broadcast g back (mean's scaled by 1/n); amax / amin split g evenly
between the tied maxima (torch's and JAX's rule): ``(g / count) * mask``, mask 1.0 where
``x == out``, count the mask's serial sum; prod: ``g * (out / x)`` where x != 0, at the one zero
of a slot g times the product of the slot's other elements, 0 at a slot's zeros when it has
several.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import shapes
from ..dtypes import FLOATS, FloatType
from ..kernels import DeviceFn, Kernel, Kind
from ..scalar.dsl import ScalarFn
from .checks import Checks, reduce_cases
from .elementwise import ADD, DIV, MAX, MIN, MUL, of
from .forms import BLOCK, FOLD, REDUCE, Reduce, grid_for
from .registry import Op, register

# One output of a reduction: the serial fold, first element first, over the reduced positions
# (geometry rshape/rstride from ``base``); the per-node kernel and fused kernels both call it.
_FOLD = Template("""\
__device__ __forceinline__ $T $NAME(const $T* x, long long base, long long nred, int rr,
                                     const long long* rshape, const long long* rstride)
{
    $T acc = $EMPTY;
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


def fold_fns(name: str, combine: dict[FloatType, ScalarFn], empty: int) -> dict:
    """The fold helpers ``gt_<name>_f64/_f32``: ``combine`` from the first element on (the
    value of a slot with no elements: ``empty``)."""
    return {ft: DeviceFn(ft.fn(name), _FOLD.substitute(
        T=ft.ctype, NAME=ft.fn(name), ADD=combine[ft].cname, EMPTY=f"({ft.ctype}){empty}"),
        (combine[ft],)) for ft in FLOATS}


SUM = fold_fns("sum", ADD, 0)


def fold_kernels(kname: str, form: Reduce, fold: dict, combine: dict, cpu: bool = False):
    """``Op.kernels`` (``cpu``: ``Op.cpu``) of a reduction: kernel ``k_<kname>_<sfx>`` of
    ``form`` calling the fold helper (and the division, when the form finishes with one)."""

    def kernels(ft: FloatType) -> list[Kernel]:
        div = DIV[ft] if form.finish else None
        calls = (fold[ft], div) if div else (fold[ft],)
        dname = div.cname if div else None
        body = (form.cpu_body(fold[ft].name, dname, combine[ft].cname, ft.ctype) if cpu
                else form.cuda_body(fold[ft].name, dname, ft.ctype))
        if cpu:
            return [Kernel(ft.kernel(kname), form.params(ft.ctype), body, form=form)]
        return [Kernel(ft.kernel(kname), form.params(ft.ctype), body, Kind.REDUCE, calls, form)]

    return kernels


_kernels = fold_kernels("reduce", REDUCE, SUM, ADD)
_cpu_kernels = fold_kernels("reduce", REDUCE, SUM, ADD, cpu=True)


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


def launch_sum(rt, kernel: Kernel, x, out, nred: int, geom: tuple, mean: bool) -> None:
    """Enqueue ``kernel`` (the ``REDUCE`` form over the sum's fold): each slot of contiguous
    ``out`` the serial sum of its ``nred`` positions of x (``geom``: ``Reduce.geometry`` or
    ``strided_geometry``), divided once by nred under ``mean``."""
    if out.size:
        rt.launch(kernel, grid_for(out.size), BLOCK,
                  (x, out, out.size, nred, int(mean), of(out).scalar(nred), rt.geom(geom)))


def _launch_reduce(rt, ks, x, out, axes: tuple[int, ...], mean: bool) -> None:
    """Enqueue the reduce kernel summing ``x`` over ``axes`` into contiguous ``out``."""
    nred, geom = REDUCE.geometry(x.shape, axes)
    launch_sum(rt, ks["reduce"], x, out, nred, geom, mean)


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


# --------------------------------------------------------------------------- amax / amin / prod
def _infer_fold(op: str, nonempty: bool):
    """The shape rule of a reduction (``sum``'s); with ``nonempty`` a reduced axis of length 0
    is refused (no value to start from), as torch refuses it."""
    base = _infer_reduce(op)

    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        out, norm = base(shapes_, attrs)
        (shape,) = shapes_
        if nonempty:
            axes = _reduced_axes(op, len(shape), attrs.get("axis"))
            if any(shape[a] == 0 for a in axes):
                raise ValueError(f"{op}: cannot reduce over an axis of length 0 (input shape "
                                 f"{shape}, axis {attrs.get('axis')!r}); expected every reduced "
                                 "axis non-empty")
        return out, norm

    return infer


def serial_fold(x: np.ndarray, axes: tuple[int, ...], combine: dict, empty: float) -> np.ndarray:
    """Serial folds of ``combine`` over ``axes`` in row-major order, first element first;
    ``empty`` where a slot has no elements; shape: the kept axes."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    nred = shapes.size([x.shape[i] for i in axes])
    out_shape = tuple(x.shape[i] for i in kept)
    if nred == 0:
        return np.full(out_shape, empty, x.dtype)
    flat = np.transpose(x, kept + tuple(axes)).reshape(-1, nred)
    fn = combine[of(x)]
    acc = flat[:, 0].copy()
    for r in range(1, nred):
        acc = fn.numpy(acc, flat[:, r])
    return acc.reshape(out_shape)


def _chooser_vjp(be, g, ins, out, needs, *, axis, keepdims):
    # g split evenly between the slot's elements equal to its result (torch / JAX):
    # (g / count) * mask, mask 1.0 where x == out, count = the mask's serial sum
    x = ins[0]
    kd = _keepdims_shape(x.shape, axis)
    one, zero = be.fill((), 1.0, x.dtype), be.fill((), 0.0, x.dtype)
    mask = be.where(be.equal(x, be.reshape(out, kd)), one, zero)
    count = be.sum(mask, axis=axis, keepdims=True)
    return (be.mul(be.div(be.reshape(g, kd), count), mask),)


def _prod_vjp(be, g, ins, out, needs, *, axis, keepdims):
    # x != 0: g * (out / x); the one zero of a slot: g * (product of the others); several
    # zeros: 0. The divisor has its zeros replaced by 1, so no lane divides by zero.
    x = ins[0]
    kd = _keepdims_shape(x.shape, axis)
    one, zero = be.fill((), 1.0, x.dtype), be.fill((), 0.0, x.dtype)
    is0 = be.equal(x, zero)
    nz = be.where(is0, one, x)
    gk = be.reshape(g, kd)
    others = be.prod(nz, axis=axis, keepdims=True)
    zeros = be.sum(be.where(is0, one, zero), axis=axis, keepdims=True)
    lone = be.where(be.equal(zeros, one), be.mul(gk, others), zero)
    return (be.where(is0, lone, be.mul(gk, be.div(be.reshape(out, kd), nz))),)


def _torch_reduce(name: str):
    """The torch twin of a reduction: ``torch.<name>`` over our axis (all axes for None)."""

    def twin(t, x, axis=None, keepdims=False):
        if name == "prod":  # torch.prod takes one dim: fold the axes one by one, last first
            dims = range(x.dim()) if axis is None else (
                axis if isinstance(axis, tuple) else (axis,))
            for d in sorted((d % max(x.dim(), 1) for d in dims), reverse=True):
                x = t.prod(x, d, keepdim=keepdims)
            return x
        dims = tuple(range(x.dim())) if axis is None else axis
        return getattr(t, name)(x, dims, keepdim=keepdims)

    return twin


def _loop_grad(prod: bool):
    """The pin of amax / amin / prod: the documented gradient, slot by slot in numpy scalars."""

    def pin(ins: list, y, G) -> list:
        (x,) = ins
        T = np.float64 if x.dtype == np.float64 else np.float32
        out = np.empty_like(x)
        Gb = np.broadcast_to(G.reshape(y.shape[:1] + (1,)), x.shape)  # rows of the (3, 4) sample
        with np.errstate(all="ignore"):
            for r in range(x.shape[0]):
                row = [T(v) for v in x[r]]
                yr, q = T(y[r]), T(Gb[r, 0])
                if prod:
                    zeros = [i for i, v in enumerate(row) if v == 0]
                    for i, v in enumerate(row):
                        if v != 0:
                            out[r, i] = q * (yr / v)
                        elif len(zeros) == 1:
                            p = None
                            for j, w in enumerate(row):
                                if j != i:
                                    p = w if p is None else p * w
                            out[r, i] = q * (T(1.0) if p is None else p)
                        else:
                            out[r, i] = T(0.0)
                else:
                    mask = [T(1.0) if v == yr else T(0.0) for v in row]
                    count = mask[0]
                    for m in mask[1:]:
                        count = count + m
                    out[r] = [(q / count) * m for m in mask]
        return [out]

    return pin


def reduction(name: str, combine: dict, empty: float | None, vjp, doc: str) -> Op:
    """Register a fold reduction ``name(x, axis=None, keepdims=False)`` of ``combine``: its
    kernels, reference, shape rule and checks from the generic ``Reduce`` form; ``empty`` is
    the value of a slot with no elements (None: such a reduction is refused)."""
    fold = fold_fns(name, combine, 1 if empty == 1.0 else 0)
    nonempty = empty is None

    def reference(x: np.ndarray, *, axis, keepdims: bool) -> np.ndarray:
        axes = _reduced_axes(name, x.ndim, axis)
        s = serial_fold(x, axes, combine, 0.0 if nonempty else empty)
        return s.reshape(_keepdims_shape(x.shape, axis)) if keepdims else s

    def launch(rt, ks, ins, out, *, axis, keepdims: bool) -> None:
        x = ins[0]
        if not out.size:
            return
        nred, geom = FOLD.geometry(x.shape, _reduced_axes(name, x.ndim, axis))
        rt.launch(ks.only, grid_for(out.size), BLOCK, (x, out, out.size, nred, rt.geom(geom)))

    checks = Checks(reduce_cases(nonempty), (((3, 4),), {"axis": 1}), ("any",),
                    _loop_grad(name == "prod"), _torch_reduce(name))
    return register(Op(name, ("x",), ("axis", "keepdims"), _infer_fold(name, nonempty),
                       reference, fold_kernels(name, FOLD, fold, combine), launch, vjp, doc,
                       {"axis": None, "keepdims": False},
                       cpu=fold_kernels(name, FOLD, fold, combine, cpu=True), checks=checks))


reduction("amax", MAX, None, _chooser_vjp,
          "serial maximum fold (NaN propagates); gradient split evenly between tied maxima")
reduction("amin", MIN, None, _chooser_vjp,
          "serial minimum fold (NaN propagates); gradient split evenly between tied minima")
reduction("prod", MUL, 1.0, _prod_vjp, "serial product, first element first (empty: 1.0)")
