"""Index ops: take, take_along_axis (and their scatter-add backwards), argmax, index_weight.

Definitions (``x`` seen as (A, N, B) around ``axis``; ids are int64, numpy's rule: an id i in
[-N, N) names position i mod N; anything else is an IndexError naming the op). ``take`` and
``take_along_axis`` take ``strict``: None for numpy's rule, or the name of what the ids are
(``"embedding: ids"``, ``"cross_entropy: labels"``) for torch's rule, ids in [0, N) only (or
equal to ``ignore``), anything else a ValueError from ``check_strict_ids`` naming it -- the one
check an eager call and a captured program's ``set_input`` both run (the kernels never see a
negative id then; the arithmetic is the same):

* ``take(x, ids, axis)``: out (A, *ids.shape, B), out[a, j, b] = x[a, ids[j], b] (a copy).
* ``take_grad(g, ids, n, axis)``: the scatter-add of take's backward, out (A, n, B):
  out[a, i, b] = the serial sum, over the positions j of ``ids`` in row-major order whose id
  is i (repeats included), of g[a, j, b]; the accumulator starts at the first contribution; a
  position no id names is +0.0. No atomics on any engine: the CUDA kernel runs one thread per
  destination element walking the index list in order, the cpu kernel splits destination rows
  across threads, each thread walking the list in order.
* ``take_along_axis(x, ids, axis, ignore)``: ids of x's shape except along ``axis`` (K there),
  out[a, k, b] = x[a, ids[a, k, b], b]; where ids == ``ignore`` (an int, or None for no such
  id) the result is +0.0 and the id is not range-checked (cross_entropy's ignore_index).
* ``take_along_axis_grad(g, ids, n, axis, ignore)``: out[a, i, b] = serial sum over k
  ascending of g[a, k, b] where ids[a, k, b] is i (ignored ids contribute nothing).
* ``argmax(x, axis)``: int64, the first index of the maximum along ``axis`` (a serial scan:
  a later element wins only when strictly greater); a NaN is the maximum (the first NaN wins),
  as numpy and torch. Not differentiable.
* ``index_weight(ids, ignore, dtype)``: 1.0 where ids != ignore, else +0.0 (cross_entropy's
  count of labels that are not ignored). Not differentiable.
"""

from __future__ import annotations

from math import prod
from string import Template

import numpy as np

from .. import dtypes, shapes
from ..kernels import Kernel, Kind, params
from .elementwise import ADD
from .forms import BLOCK, GATHER, INDEX, SCATTER, grid_for
from .registry import Op, register

F, IDS = dtypes.FLOAT, dtypes.INT
def _around(shape: tuple, axis: int) -> tuple[int, int, int]:
    return prod(shape[:axis]), shape[axis], prod(shape[axis + 1:])


def _id_range(ids, ignore=None) -> tuple[int, int] | None:
    """The least and greatest id other than ``ignore`` (None when there is none), read where the
    ids live: a numpy or host-backend array, a cupy array on its device (reduced there, two
    integers read back), or a sequence."""
    if not hasattr(ids, "dtype"):
        ids = np.asarray(ids)
    vals = ids if ignore is None else ids[ids != ignore]
    if vals.size == 0:
        return None
    return int(vals.min()), int(vals.max())


def check_strict_ids(what: str, ids, n: int, ignore=None) -> None:
    """ValueError unless every id lies in [0, n) or equals ``ignore`` (torch's rule for embedding
    ids and class labels); the message names ``what`` (e.g. ``"cross_entropy: labels"``).

    The one check of these ids: the ops run it (eager calls, every backend) and so does a
    captured program's ``set_input`` (it runs the checks of the ops reading an input).
    """
    span = _id_range(ids, ignore)
    if span is None:
        return
    lo, hi = span
    if lo < 0 or hi >= n:
        also = "" if ignore is None else f" or equal ignore_index {ignore}"
        raise ValueError(f"{what} must lie in [0, {n}){also}; got [{lo}, {hi}]")


def check_strict(op: str, strict) -> str | None:
    """``strict`` checked: None (numpy's rule) or a non-empty str naming the ids."""
    if strict is not None and (not isinstance(strict, str) or not strict):
        raise TypeError(f"{op}: strict must be None or a non-empty str naming the ids (e.g. "
                        f"'embedding: ids'), got {strict!r}")
    return strict


def check_ids(op: str, arg: str, ids, n: int, ignore=None, strict=None) -> None:
    """IndexError unless every id (but ``ignore``) lies in [-n, n); with ``strict`` (the name
    of the ids) ``check_strict_ids``'s rule instead."""
    if strict is not None:
        check_strict_ids(strict, ids, n, ignore)
        return
    span = _id_range(ids, ignore)
    if span is None:
        return
    lo, hi = span
    if lo < -n or hi >= n:
        bad = lo if lo < -n else hi
        raise IndexError(f"{op}: {arg}: id {bad} is out of range for an axis of size {n}; "
                         f"expected {-n} <= id < {n}")


def _norm(ids: np.ndarray, n: int) -> np.ndarray:
    return np.where(ids < 0, ids + n, ids)


def _axis(op: str, attrs: dict, ndim: int) -> int:
    return shapes.normalize_axis(op, attrs.get("axis", 0), ndim)


# --------------------------------------------------------------------------- take
def _take_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, ids = shapes_
    if len(x) == 0:
        raise ValueError("take: x is 0-d; expected an array with at least one axis")
    axis = _axis("take", attrs, len(x))
    out = x[:axis] + tuple(ids) + x[axis + 1:]
    shapes.check_rank("take", "out", out)
    return out, {"axis": axis, "strict": check_strict("take", attrs.get("strict"))}


def _take_ref(x, ids, *, axis, strict=None):
    return np.take(x, _norm(ids, x.shape[axis]), axis=axis)


_TAKE = Template("""\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += step) {
        const long long b = o % B, j = (o / B) % J, a = o / (B * J);
        long long i = ids[j];
        if (i < 0) i += N;
        y[o] = (i >= 0 && i < N) ? x[(a * N + i) * B + b] : $NAN;
    }""")
_CPU_TAKE = Template("""\
    gtcpu::parallel_for(A * J, B, [=](long long lo, long long hi) {
        for (long long r = lo; r < hi; ++r) {
            const long long j = r % J, a = r / J;
            long long i = ids[j];
            if (i < 0) i += N;
            $T* yr = y + r * B;
            if (i >= 0 && i < N) {
                const $T* xr = x + (a * N + i) * B;
                for (long long b = 0; b < B; ++b) yr[b] = xr[b];
            } else {
                for (long long b = 0; b < B; ++b) yr[b] = $NAN;
            }
        }
    });""")


def _take_kernels(cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(f"const {t}* x, const long long* ids, {t}* y, long long n, long long A, "
                     "long long N, long long J, long long B")
        body = (_CPU_TAKE if cpu else _TAKE).substitute(T=t, NAN=ft.literal(np.nan))
        return [Kernel(ft.kernel("take"), sig, body, Kind.GATHER, form=GATHER)]

    return kernels


def _take_launch(rt, ks, ins, out, *, axis, strict=None):
    x, ids = ins
    a, n, b = _around(x.shape, axis)
    total = out.size
    if total:
        rt.launch(ks.only, grid_for(total), BLOCK,
                  (x, ids, out, total, a, n, ids.size, b))


def _take_check(ins, attrs):
    check_ids("take", "ids", ins[1], ins[0].shape[attrs["axis"]], strict=attrs.get("strict"))


def _take_vjp(be, g, ins, out, needs, axis, strict=None):
    x, ids = ins
    return (be.take_grad(g, ids, x.shape[axis], axis) if needs[0] else None, None)


register(Op("take", ("x", "ids"), ("axis", "strict"), _take_infer, _take_ref,
            _take_kernels(False), _take_launch, _take_vjp,
            "numpy's take: x's positions named by int64 ids along one axis (strict: ids in "
            "[0, n) only)", {"axis": 0, "strict": None}, cpu=_take_kernels(True),
            types=(F, IDS), check=_take_check))


def _take_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    g, ids = shapes_
    n = attrs["n"]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise TypeError(f"take_grad: n must be a non-negative int, got {n!r}")
    axis = attrs["axis"]
    lead = len(g) - len(ids) + 1
    if not isinstance(axis, (int, np.integer)) or not 0 <= axis < lead or \
            tuple(g[axis:axis + len(ids)]) != tuple(ids):
        raise ValueError(f"take_grad: g has shape {g} and ids {ids}; expected g's axes from "
                         f"{axis} on to hold ids' shape")
    return g[:axis] + (int(n),) + g[axis + len(ids):], {"n": int(n), "axis": int(axis)}


def _take_grad_ref(g, ids, *, n, axis):
    a = prod(g.shape[:axis])
    b = prod(g.shape[axis + ids.ndim:])
    j = ids.size
    g3 = g.reshape(a, j, b)
    out = np.zeros((a, n, b), g.dtype)
    flat = _norm(ids.reshape(-1), n)
    # contributions to each destination in the order of their positions: the k-th occurrence
    # of every id is added in round k (stable sort keeps positions ascending within an id)
    order = np.argsort(flat, kind="stable")
    sorted_ids = flat[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1] if j else np.zeros(0, int)
    rank = np.arange(j) - np.repeat(starts, np.diff(np.r_[starts, j])) if j else starts
    occurrence = np.empty(j, np.int64)
    occurrence[order] = rank
    add = ADD[dtypes.float_type(g)]
    for k in range(int(occurrence.max()) + 1 if j else 0):
        sel = np.flatnonzero(occurrence == k)
        dest = flat[sel]
        out[:, dest, :] = g3[:, sel, :] if k == 0 else add.eval(out[:, dest, :], g3[:, sel, :])
    return out.reshape(g.shape[:axis] + (n,) + g.shape[axis + ids.ndim:])


_TAKE_GRAD = Template("""\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += step) {
        const long long b = o % B, i = (o / B) % N, a = o / (B * N);
        $T acc = ($T)0;
        bool first = true;
        for (long long j = 0; j < J; ++j) {
            long long d = ids[j];
            if (d < 0) d += N;
            if (d != i) continue;
            const $T v = g[(a * J + j) * B + b];
            acc = first ? v : $ADD(acc, v);
            first = false;
        }
        y[o] = acc;
    }""")
_CPU_TAKE_GRAD = Template("""\
    gtcpu::parallel_for(A * N, J + B, [=](long long lo, long long hi) {
        std::vector<char> seen(hi - lo, 0);
        for (long long r = lo; r < hi; ++r)
            for (long long b = 0; b < B; ++b) y[r * B + b] = ($T)0;
        for (long long a = lo / N; a <= (hi - 1) / N; ++a) {
            for (long long j = 0; j < J; ++j) {
                long long i = ids[j];
                if (i < 0) i += N;
                if (i < 0 || i >= N) continue;
                const long long r = a * N + i;
                if (r < lo || r >= hi) continue;
                $T* yr = y + r * B;
                const $T* gr = g + (a * J + j) * B;
                if (!seen[r - lo]) {
                    for (long long b = 0; b < B; ++b) yr[b] = gr[b];
                    seen[r - lo] = 1;
                } else {
                    for (long long b = 0; b < B; ++b) yr[b] = $ADD(yr[b], gr[b]);
                }
            }
        }
    });""")


def _take_grad_kernels(cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(f"const {t}* g, const long long* ids, {t}* y, long long n, long long A, "
                     "long long N, long long J, long long B")
        body = (_CPU_TAKE_GRAD if cpu else _TAKE_GRAD).substitute(T=t, ADD=ADD[ft].cname)
        return [Kernel(ft.kernel("take_grad"), sig, body, Kind.SCATTER, (ADD[ft],),
                       SCATTER)]

    return kernels


def _take_grad_launch(rt, ks, ins, out, *, n, axis):
    g, ids = ins
    a = prod(g.shape[:axis])
    b = prod(g.shape[axis + ids.ndim:])
    total = out.size
    if total:
        rt.launch(ks.only, grid_for(total), BLOCK,
                  (g, ids, out, total, a, n, ids.size, b))


def _take_grad_vjp(be, g, ins, out, needs, n, axis):
    # linear in g: the adjoint of a scatter-add is the gather (double backward)
    return (be.take(g, ins[1], axis) if needs[0] else None, None)


register(Op("take_grad", ("g", "ids"), ("n", "axis"), _take_grad_infer, _take_grad_ref,
            _take_grad_kernels(False), _take_grad_launch, _take_grad_vjp,
            "take's backward: a scatter-add, each destination's contributions added serially "
            "in the row-major order of their positions in ids", cpu=_take_grad_kernels(True),
            types=(F, IDS), check=lambda ins, at: check_ids("take_grad", "ids", ins[1], at["n"])))


# --------------------------------------------------------------------------- take_along_axis
def _along_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, ids = shapes_
    if len(x) == 0 or len(ids) != len(x):
        raise ValueError(f"take_along_axis: x has shape {x} and ids {ids}; expected ids with "
                         "x's number of axes (>= 1)")
    axis = shapes.normalize_axis("take_along_axis", attrs.get("axis", -1), len(x))
    if x[:axis] + x[axis + 1:] != ids[:axis] + ids[axis + 1:]:
        raise ValueError(f"take_along_axis: ids have shape {ids}; expected x's shape {x} "
                         f"except along axis {axis}")
    ignore = attrs.get("ignore")
    if ignore is not None and (isinstance(ignore, bool) or
                               not isinstance(ignore, (int, np.integer))):
        raise TypeError(f"take_along_axis: ignore must be an int or None, got {ignore!r}")
    return ids, {"axis": axis, "ignore": None if ignore is None else int(ignore),
                 "strict": check_strict("take_along_axis", attrs.get("strict"))}


def _along_ref(x, ids, *, axis, ignore, strict=None):
    n = x.shape[axis]
    keep = np.ones(ids.shape, bool) if ignore is None else ids != ignore
    safe = np.where(keep, _norm(ids, n), 0)
    out = np.take_along_axis(x, safe, axis=axis)
    return np.where(keep, out, x.dtype.type(0.0))


# one output of take_along_axis / of its backward; the CUDA kernels walk the outputs with a
# grid-stride loop, the cpu kernels split them across threads
_ALONG_ONE = """\
        const long long b = o % B, a = o / (B * K);
        long long i = ids[o];
        if (has_ignore && i == ignore) { y[o] = ($T)0; continue; }
        if (i < 0) i += N;
        y[o] = (i >= 0 && i < N) ? x[(a * N + i) * B + b] : $NAN;
"""
_ALONG_GRAD_ONE = """\
        const long long b = o % B, i = (o / B) % N, a = o / (B * N);
        $T acc = ($T)0;
        bool first = true;
        for (long long k = 0; k < K; ++k) {
            const long long p = (a * K + k) * B + b;
            long long d = ids[p];
            if (has_ignore && d == ignore) continue;
            if (d < 0) d += N;
            if (d != i) continue;
            acc = first ? g[p] : $ADD(acc, g[p]);
            first = false;
        }
        y[o] = acc;
"""
_GRID_LOOP = """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += step) {
$ONE    }"""
_CPU_LOOP = """\
    gtcpu::parallel_for(n, $COST, [=](long long lo, long long hi) {
        for (long long o = lo; o < hi; ++o) {
$ONE        }
    });"""


def _loop(template: str, one: str, cost: str = "2") -> Template:
    """A kernel body: ``one`` output's statements inside a CUDA or cpu loop over outputs."""
    indent = "    " if template is _CPU_LOOP else ""
    body = "".join(indent + line + "\n" for line in one.splitlines())
    return Template(template.replace("$ONE", body).replace("$COST", cost))


_ALONG = _loop(_GRID_LOOP, _ALONG_ONE)
_CPU_ALONG = _loop(_CPU_LOOP, _ALONG_ONE)
_ALONG_GRAD = _loop(_GRID_LOOP, _ALONG_GRAD_ONE)
# The cpu kernel walks each destination column (a, :, b) once instead of scanning the K ids for
# every one of its N outputs: the column is +0.0-filled, then its ids are visited k ascending,
# the first contribution to a destination stored and later ones added (the defined order and
# the defined first-contribution start: ``seen`` marks the destinations already started and
# is cleared again for the ids of the column). An id outside [0, N) after wrapping (never
# there after the host's check) contributes nothing, as in the per-output kernel.
_CPU_ALONG_GRAD = Template("""\
    gtcpu::parallel_for(A * B, N + 2 * K, [=](long long lo, long long hi) {
        std::vector<unsigned char> seen((size_t)N, 0);
        for (long long c = lo; c < hi; ++c) {
            const long long a = c / B, b = c % B;
            $T* yc = y + a * N * B + b;
            for (long long i = 0; i < N; ++i) yc[i * B] = ($T)0;
            for (long long k = 0; k < K; ++k) {
                const long long p = (a * K + k) * B + b;
                long long d = ids[p];
                if (has_ignore && d == ignore) continue;
                if (d < 0) d += N;
                if (d < 0 || d >= N) continue;
                yc[d * B] = seen[d] ? $ADD(yc[d * B], g[p]) : g[p];
                seen[d] = 1;
            }
            for (long long k = 0; k < K; ++k) {
                long long d = ids[(a * K + k) * B + b];
                if (d < 0) d += N;
                if (d >= 0 && d < N) seen[d] = 0;
            }
        }
    });""")


def _along_kernels(name: str, cuda: Template, cpu_t: Template, cpu: bool, first: str):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(f"const {t}* {first}, const long long* ids, {t}* y, long long n, "
                     "long long A, long long N, long long K, long long B, long long ignore, "
                     "int has_ignore")
        body = (cpu_t if cpu else cuda).substitute(T=t, NAN=ft.literal(np.nan),
                                                   ADD=ADD[ft].cname)
        grad = name.endswith("_grad")
        return [Kernel(ft.kernel(name), sig, body, Kind.SCATTER if grad else Kind.GATHER,
                       (ADD[ft],) if grad else (), SCATTER if grad else GATHER)]

    return kernels


def _along_launch(rt, ks, ins, out, *, axis, ignore, strict=None):
    x, ids = ins
    n = x.shape[axis]
    a, _, b = _around(x.shape, axis)
    if out.size:
        rt.launch(ks.only, grid_for(out.size),
                  BLOCK, (x, ids, out, out.size, a, n, ids.shape[axis], b,
                          0 if ignore is None else ignore, int(ignore is not None)))


def _along_vjp(be, g, ins, out, needs, axis, ignore, strict=None):
    x, ids = ins
    return (be.take_along_axis_grad(g, ids, x.shape[axis], axis, ignore) if needs[0] else None,
            None)


register(Op("take_along_axis", ("x", "ids"), ("axis", "ignore", "strict"), _along_infer,
            _along_ref, _along_kernels("take_along_axis", _ALONG, _CPU_ALONG, False, "x"),
            _along_launch, _along_vjp,
            "numpy's take_along_axis (ids == ignore give +0.0; strict: ids in [0, n) only)",
            {"axis": -1, "ignore": None, "strict": None},
            cpu=_along_kernels("take_along_axis", _ALONG, _CPU_ALONG, True, "x"),
            types=(F, IDS), check=lambda ins, at: check_ids(
                "take_along_axis", "ids", ins[1], ins[0].shape[at["axis"]], at["ignore"],
                at.get("strict"))))


def _along_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    g, ids = shapes_
    n, axis, ignore = attrs["n"], attrs["axis"], attrs.get("ignore")
    if g != ids or not isinstance(axis, (int, np.integer)) or not 0 <= axis < len(g):
        raise ValueError(f"take_along_axis_grad: g {g} and ids {ids} must have one shape with "
                         f"axis {axis} in range")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise TypeError(f"take_along_axis_grad: n must be a non-negative int, got {n!r}")
    out = g[:axis] + (int(n),) + g[axis + 1:]
    return out, {"n": int(n), "axis": int(axis), "ignore": None if ignore is None else int(ignore)}


def _along_grad_ref(g, ids, *, n, axis, ignore):
    gm = np.moveaxis(g, axis, -1)
    im = np.moveaxis(ids, axis, -1)
    out = np.zeros(gm.shape[:-1] + (n,), g.dtype)
    seen = np.zeros(out.shape, bool)
    add = ADD[dtypes.float_type(g)]
    lead = np.indices(gm.shape[:-1]) if gm.ndim > 1 else ()
    for k in range(gm.shape[-1]):  # k ascending: the defined order
        d = im[..., k]
        keep = np.ones(d.shape, bool) if ignore is None else d != ignore
        d = np.where(keep, _norm(d, n), 0)
        at = (*lead, d) if gm.ndim > 1 else (d,)
        cur, s, v = out[at], seen[at], gm[..., k]
        new = np.where(s, add.eval(cur, v), v)
        out[at] = np.where(keep, new, cur)
        seen[at] = s | keep
    return np.moveaxis(out, -1, axis)


def _along_grad_launch(rt, ks, ins, out, *, n, axis, ignore):
    g, ids = ins
    a, k, b = _around(g.shape, axis)
    if out.size:
        rt.launch(ks.only, grid_for(out.size),
                  BLOCK, (g, ids, out, out.size, a, n, k, b, 0 if ignore is None else ignore,
                          int(ignore is not None)))


register(Op("take_along_axis_grad", ("g", "ids"), ("n", "axis", "ignore"), _along_grad_infer,
            _along_grad_ref,
            _along_kernels("take_along_axis_grad", _ALONG_GRAD, _CPU_ALONG_GRAD, False, "g"),
            _along_grad_launch,
            lambda be, g, ins, out, needs, n, axis, ignore: (
                be.take_along_axis(g, ins[1], axis, ignore) if needs[0] else None, None),
            "take_along_axis's backward: per destination a serial sum over k ascending",
            {"ignore": None},
            cpu=_along_kernels("take_along_axis_grad", _ALONG_GRAD, _CPU_ALONG_GRAD, True, "g"),
            types=(F, IDS), check=lambda ins, at: check_ids(
                "take_along_axis_grad", "ids", ins[1], at["n"], at["ignore"])))


# --------------------------------------------------------------------------- argmax
def _argmax_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (x,) = shapes_
    if len(x) == 0:
        raise ValueError("argmax: x is 0-d; expected an array with at least one axis")
    axis = shapes.normalize_axis("argmax", attrs.get("axis", -1), len(x))
    if x[axis] == 0:
        raise ValueError(f"argmax: axis {axis} of shape {x} is empty; an empty row has no "
                         "maximum")
    return x[:axis] + x[axis + 1:], {"axis": axis}


def _argmax_ref(x, *, axis):
    return np.argmax(x, axis=axis).astype(np.int64)


# one output of argmax (a serial scan of its row)
_ARGMAX_ONE = """\
        const long long a = o / B, b = o % B;
        const long long base = a * R * B + b;
        long long best = 0;
        bool nan = x[base] != x[base];
        for (long long r = 1; r < R && !nan; ++r) {
            const auto v = x[base + r * B];
            if (v != v) { best = r; nan = true; }
            else if (v > x[base + best * B]) best = r;
        }
        y[o] = best;
"""
_ARGMAX = _loop(_GRID_LOOP, _ARGMAX_ONE).template
_CPU_ARGMAX = _loop(_CPU_LOOP, _ARGMAX_ONE, "R").template


def _argmax_kernels(cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(f"const {t}* x, long long* y, long long n, long long R, long long B")
        return [Kernel(ft.kernel("argmax"), sig, _CPU_ARGMAX if cpu else _ARGMAX, Kind.INDEX,
                       form=INDEX)]

    return kernels


def _argmax_launch(rt, ks, ins, out, *, axis):
    (x,) = ins
    a, r, b = _around(x.shape, axis)
    if out.size:
        rt.launch(ks.only, grid_for(out.size), BLOCK,
                  (x, out, out.size, r, b))


register(Op("argmax", ("x",), ("axis",), _argmax_infer, _argmax_ref, _argmax_kernels(False),
            _argmax_launch, None,
            "int64 first index of the maximum along one axis (the first NaN wins)",
            {"axis": -1}, cpu=_argmax_kernels(True), types=(F,), out_type=IDS))


# --------------------------------------------------------------------------- index_weight
def _weight_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    ignore = attrs["ignore"]
    if isinstance(ignore, bool) or not isinstance(ignore, (int, np.integer)):
        raise TypeError(f"index_weight: ignore must be an int, got {ignore!r}")
    return shapes_[0], {"ignore": int(ignore),
                        "dtype": dtypes.normalize(attrs["dtype"], "index_weight")}


def _weight_ref(ids, *, ignore, dtype):
    return (ids != ignore).astype(dtype)


_WEIGHT = """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = ids[i] != ignore ? 1 : 0;"""
_CPU_WEIGHT = """\
    gtcpu::parallel_for(n, 1, [=](long long lo, long long hi) {
        for (long long i = lo; i < hi; ++i) y[i] = ids[i] != ignore ? 1 : 0;
    });"""


def _weight_kernels(cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(f"const long long* ids, {t}* y, long long n, long long ignore")
        return [Kernel(ft.kernel("index_weight"), sig, _CPU_WEIGHT if cpu else _WEIGHT,
                       Kind.INDEX, form=INDEX)]

    return kernels


def _weight_launch(rt, ks, ins, out, *, ignore, dtype):
    if out.size:
        rt.launch(ks.only, grid_for(out.size), BLOCK,
                  (ins[0], out, out.size, ignore))


register(Op("index_weight", ("ids",), ("ignore", "dtype"), _weight_infer, _weight_ref,
            _weight_kernels(False), _weight_launch, None,
            "1.0 where ids != ignore else +0.0, in a float dtype (not differentiable)",
            cpu=_weight_kernels(True), types=(IDS,)))
