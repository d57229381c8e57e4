"""Movement ops: copy, fill, transpose, reshape, slice, pad, concat, broadcast_to (no arithmetic).

copy, transpose, reshape, slice, concat and broadcast_to move int64 and bool data too (their
inputs are ``dtypes.ANY``; the result has the input's dtype): a VJP or a composite can reshape
an index or a mask like any array.

All of them run one strided-copy kernel (and a fill kernel for fill and pad): the ``Copy`` and
``Fill`` forms of ``ops/forms.py``, which own their geometry; every result is a new C-contiguous
array. ``copy`` and ``fill`` are the writes a training step makes outside the
arithmetic (gradient zeroing, the backward seed, parameter updates): as ops they go through the
same kernel door as everything else, so a capture of the step sees them.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes, shapes
from ..dtypes import ANY, FloatType
from ..kernels import Kernel, Kind
from .elementwise import of
from .forms import BLOCK, COPY, FILL, grid_for
from .registry import Op, register

# The int64 and bool element types that copy, transpose, reshape, slice, concat and
# broadcast_to also move (their ``ANY`` inputs; pad and fill stay float): kernel base suffix
# and C type. Their kernels sit in the float64 set (a call without float data runs
# the float64 set's kernels); kind INDEX (int64 / bool data, no arithmetic), no form (fusion
# runs them as they are).
TYPED = {dtypes.INDEX: ("i64", "long long"), dtypes.MASK: ("b8", "bool")}


def _cpu_kernels(ft: FloatType) -> list[Kernel]:
    return [Kernel(k.name, k.params, k.form.cpu_body(), form=k.form) for k in _kernels(ft)]


def _kernels(ft: FloatType) -> list[Kernel]:
    return [Kernel(ft.kernel("copy"), COPY.params(ft.ctype), COPY.cuda_body(), Kind.COPY,
                   form=COPY),
            Kernel(ft.kernel("fill"), FILL.params(ft.ctype), FILL.cuda_body(), Kind.FILL,
                   form=FILL)]


def _any_kernels(ft: FloatType) -> list[Kernel]:
    """The kernels of an op with ANY inputs: the float copy and fill, and (in the float64 set)
    the int64 and bool copies."""
    if ft is not dtypes.F64:
        return _kernels(ft)
    return _kernels(ft) + [Kernel(ft.kernel(f"copy_{sfx}"), COPY.params(ctype),
                                  COPY.cuda_body(), Kind.INDEX, form=COPY)
                           for sfx, ctype in TYPED.values()]


def _any_cpu_kernels(ft: FloatType) -> list[Kernel]:
    return [Kernel(k.name, k.params, k.form.cpu_body(), form=k.form)
            for k in _any_kernels(ft)]


def _key(base: str, out) -> str:
    """The kernel of ``base`` ("copy") for ``out``'s element type."""
    typed = TYPED.get(out.dtype)
    return base if typed is None else f"{base}_{typed[0]}"


def copy_strided(rt, ks, x, out, shape: tuple, in_strides: tuple, in_offset: int,
                 out_strides: tuple, out_offset: int) -> None:
    """Enqueue ``out[out_offset + c.out_strides] = x[in_offset + c.in_strides]`` over ``shape``."""
    n = shapes.size(shape)
    if not n:
        return
    geom = rt.geom(COPY.geometry(shape, in_strides, in_offset, out_strides, out_offset))
    rt.launch(ks[_key("copy", out)], grid_for(n), BLOCK, (x, out, n, geom))


def fill(rt, ks, out, value: float) -> None:
    """Enqueue ``out[:] = value``."""
    if out.size:
        rt.launch(ks["fill"], grid_for(out.size), BLOCK, (out, out.size, of(out).scalar(value)))


def _copy_into(rt, ks, x, out) -> None:
    """Contiguous copy of x into out (same number of elements)."""
    copy_strided(rt, ks, x, out, (x.size,), (1,), 0, (1,), 0)


# --------------------------------------------------------------------------- copy / fill
def _same_shape(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    return shapes_[0], attrs


register(Op("copy", ("x",), (), _same_shape, lambda x: np.array(x, order="C", copy=True),
            _any_kernels, lambda rt, ks, ins, out: _copy_into(rt, ks, ins[0], out),
            lambda be, g, ins, out, needs: (g,), "an exact copy of x", cpu=_any_cpu_kernels,
            types=(ANY,), out_type=ANY))


def _infer_fill(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    shape = shapes.normalize_shape("fill", attrs["shape"])
    if any(d < 0 for d in shape):
        raise ValueError(f"fill: shape {shape} has a negative size; expected sizes >= 0")
    shapes.check_rank("fill", "shape", shape)
    v = attrs["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise TypeError(f"fill: value must be a real Python number, got {type(v).__name__}")
    return shape, {"shape": shape, "value": float(v), "dtype": dtypes.normalize(attrs["dtype"],
                                                                                 "fill")}


def _fill_reference(*, shape: tuple, value: float, dtype) -> np.ndarray:
    return np.full(shape, np.dtype(dtype).type(value), dtype)


register(Op("fill", (), ("shape", "value", "dtype"), _infer_fill, _fill_reference, _kernels,
            lambda rt, ks, ins, out, *, shape, value, dtype: fill(rt, ks, out, value), None,
            "an array of ``shape`` holding ``value`` rounded once to ``dtype``",
            {"dtype": "float64"}, cpu=_cpu_kernels))


# --------------------------------------------------------------------------- transpose
def _infer_transpose(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (shape,) = shapes_
    axes = attrs.get("axes")
    if axes is None:
        axes = tuple(reversed(range(len(shape))))
    if not isinstance(axes, (tuple, list)) or sorted(
            int(a) % len(shape) if isinstance(a, (int, np.integer)) and not isinstance(a, bool)
            and -len(shape) <= a < len(shape) else -1
            for a in axes) != list(range(len(shape))):
        raise ValueError(f"transpose: axes {axes!r} is not a permutation of the "
                         f"{len(shape)} axes of an array of shape {shape}")
    axes = tuple(int(a) % len(shape) for a in axes)
    return tuple(shape[a] for a in axes), {"axes": axes}


def _launch_transpose(rt, ks, ins, out, *, axes: tuple) -> None:
    x = ins[0]
    st = shapes.contiguous_strides(x.shape)
    copy_strided(rt, ks, x, out, out.shape, tuple(st[a] for a in axes), 0,
                 shapes.contiguous_strides(out.shape), 0)


def _transpose_vjp(be, g, ins, out, needs, *, axes):
    inverse = tuple(int(i) for i in np.argsort(axes))
    return (be.transpose(g, inverse),)


register(Op("transpose", ("x",), ("axes",), _infer_transpose,
            lambda x, *, axes: np.array(np.transpose(x, axes), order="C"),
            _any_kernels, _launch_transpose, _transpose_vjp,
            "permute axes (default: reverse them; the 2-D swap)", {"axes": None},
            cpu=_any_cpu_kernels, types=(ANY,), out_type=ANY))


# --------------------------------------------------------------------------- reshape
def _infer_reshape(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (shape,) = shapes_
    new = list(shapes.normalize_shape("reshape", attrs["shape"]))
    n = shapes.size(shape)
    if new.count(-1) > 1 or any(d < -1 for d in new):
        raise ValueError(f"reshape: bad target shape {tuple(new)} (sizes >= 0, at most one -1)")
    if -1 in new:
        known = shapes.size([d for d in new if d != -1])
        if known == 0 or n % known:
            raise ValueError(f"reshape: cannot reshape an array of shape {shape} "
                             f"({n} elements) into {tuple(new)}")
        new[new.index(-1)] = n // known
    if shapes.size(new) != n:
        raise ValueError(f"reshape: cannot reshape an array of shape {shape} ({n} elements) "
                         f"into {tuple(new)} ({shapes.size(new)} elements)")
    shapes.check_rank("reshape", "shape", tuple(new))
    return tuple(new), {"shape": tuple(new)}


register(Op("reshape", ("x",), ("shape",), _infer_reshape,
            lambda x, *, shape: np.array(x.reshape(shape), order="C"),
            _any_kernels, lambda rt, ks, ins, out, *, shape: _copy_into(rt, ks, ins[0], out),
            lambda be, g, ins, out, needs, shape: (be.reshape(g, ins[0].shape),),
            "same elements in row-major order, new shape", cpu=_any_cpu_kernels,
            types=(ANY,), out_type=ANY))


# --------------------------------------------------------------------------- slice / pad
def _check_int(op: str, name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an int, got {type(v).__name__} {v!r}")
    return int(v)


def _infer_slice(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (shape,) = shapes_
    axis = shapes.normalize_axis("slice", attrs["axis"], len(shape))
    n = shape[axis]
    start, stop = (_check_int("slice", k, attrs[k]) for k in ("start", "stop"))
    start, stop = (v + n if v < 0 else v for v in (start, stop))
    if not 0 <= start <= stop <= n:
        raise ValueError(f"slice: [{attrs['start']}:{attrs['stop']}] is out of range for axis "
                         f"{axis} of size {n} in shape {shape} "
                         f"(expected -{n} <= start <= stop <= {n} after wrapping negatives)")
    out = shape[:axis] + (stop - start,) + shape[axis + 1:]
    return out, {"axis": axis, "start": start, "stop": stop}


def _slice_reference(x: np.ndarray, *, axis: int, start: int, stop: int) -> np.ndarray:
    return np.array(x[(slice(None),) * axis + (slice(start, stop),)], order="C")


def _launch_slice(rt, ks, ins, out, *, axis: int, start: int, stop: int) -> None:
    x = ins[0]
    st = shapes.contiguous_strides(x.shape)
    copy_strided(rt, ks, x, out, out.shape, st, start * st[axis],
                 shapes.contiguous_strides(out.shape), 0)


register(Op("slice", ("x",), ("axis", "start", "stop"), _infer_slice, _slice_reference,
            _any_kernels, _launch_slice,
            lambda be, g, ins, out, needs, axis, start, stop: (
                be.pad(g, axis, start, ins[0].shape[axis] - stop),),
            "x[start:stop] along one axis", cpu=_any_cpu_kernels,
            types=(ANY,), out_type=ANY))


def _infer_pad(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (shape,) = shapes_
    axis = shapes.normalize_axis("pad", attrs["axis"], len(shape))
    before, after = (_check_int("pad", k, attrs[k]) for k in ("before", "after"))
    if before < 0 or after < 0:
        raise ValueError(f"pad: before={before} and after={after} must be >= 0")
    out = shape[:axis] + (before + shape[axis] + after,) + shape[axis + 1:]
    return out, {"axis": axis, "before": before, "after": after}


def _pad_reference(x: np.ndarray, *, axis: int, before: int, after: int) -> np.ndarray:
    shape = list(x.shape)
    shape[axis] += before + after
    out = np.zeros(shape, x.dtype)
    out[(slice(None),) * axis + (slice(before, before + x.shape[axis]),)] = x
    return out


def _launch_pad(rt, ks, ins, out, *, axis: int, before: int, after: int) -> None:
    x = ins[0]
    fill(rt, ks, out, 0.0)
    ost = shapes.contiguous_strides(out.shape)
    copy_strided(rt, ks, x, out, x.shape, shapes.contiguous_strides(x.shape), 0, ost,
                 before * ost[axis])


register(Op("pad", ("x",), ("axis", "before", "after"), _infer_pad, _pad_reference, _kernels,
            _launch_pad,
            lambda be, g, ins, out, needs, axis, before, after: (
                be.slice(g, axis, before, before + ins[0].shape[axis]),),
            "+0.0 padding before/after along one axis (slice's backward)", cpu=_cpu_kernels))


# --------------------------------------------------------------------------- concat
def _infer_concat(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    if not shapes_:
        raise ValueError("concat: needs at least one array, got an empty list")
    first = shapes_[0]
    if not first:
        raise ValueError("concat: cannot concatenate 0-dimensional arrays")
    axis = shapes.normalize_axis("concat", attrs.get("axis", 0), len(first))
    for i, s in enumerate(shapes_):
        if len(s) != len(first) or any(d != e for j, (d, e) in enumerate(zip(s, first))
                                       if j != axis):
            raise ValueError(f"concat: xs[{i}] has shape {s}, xs[0] has {first}; expected "
                             f"the same rank and equal sizes except along axis {axis}")
    out = first[:axis] + (sum(s[axis] for s in shapes_),) + first[axis + 1:]
    return out, {"axis": axis}


def _launch_concat(rt, ks, ins, out, *, axis: int) -> None:
    ost = shapes.contiguous_strides(out.shape)
    at = 0
    for x in ins:
        copy_strided(rt, ks, x, out, x.shape, shapes.contiguous_strides(x.shape), 0, ost,
                     at * ost[axis])
        at += x.shape[axis]


def _concat_vjp(be, g, ins, out, needs, *, axis):
    grads, at = [], 0
    for x, need in zip(ins, needs):
        n = x.shape[axis]
        grads.append(be.slice(g, axis, at, at + n) if need else None)
        at += n
    return tuple(grads)


register(Op("concat", ("*xs",), ("axis",), _infer_concat,
            lambda *xs, axis: np.concatenate(xs, axis=axis), _any_kernels, _launch_concat,
            _concat_vjp, "join arrays along an existing axis", {"axis": 0}, cpu=_any_cpu_kernels,
            types=(ANY,), out_type=ANY))


# --------------------------------------------------------------------------- broadcast_to
def _infer_broadcast_to(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (shape,) = shapes_
    target = shapes.normalize_shape("broadcast_to", attrs["shape"])
    try:
        ok = shapes.broadcast("broadcast_to", shape, target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"broadcast_to: cannot broadcast shape {shape} to {target}")
    shapes.check_rank("broadcast_to", "shape", target)
    return target, {"shape": target}


def _launch_broadcast_to(rt, ks, ins, out, *, shape: tuple) -> None:
    x = ins[0]
    copy_strided(rt, ks, x, out, shape, shapes.broadcast_strides(x.shape, shape), 0,
                 shapes.contiguous_strides(shape), 0)


def _broadcast_to_vjp(be, g, ins, out, needs, *, shape):
    return (be.sum_to(g, ins[0].shape),)


register(Op("broadcast_to", ("x",), ("shape",), _infer_broadcast_to,
            lambda x, *, shape: np.array(np.broadcast_to(x, shape), order="C"), _any_kernels,
            _launch_broadcast_to, _broadcast_to_vjp, "repeat x along broadcast axes (copy)",
            cpu=_any_cpu_kernels,
            types=(ANY,), out_type=ANY))
