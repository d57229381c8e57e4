"""2-D average pooling (NCHW, torch's avg_pool2d: padding, ceil mode, count_include_pad) and
adaptive average pooling (torch's adaptive_avg_pool2d), with their backward ops. Windows as
``ops.pool`` defines them (no dilation).

* ``avg_pool2d(x)``: the serial sum of the window's in-input elements in tap order (the first
  starts; padding adds nothing), then one IEEE division by the divisor: the window's size
  clipped to the padded input, (min(hs + KH, H + ph) - hs) * (likewise for w) with
  hs = oy*sh - ph, under ``count_include_pad`` (torch's default), else the count of its
  in-input elements (torch's rule, the divisor an exact integer in the dtype). A window with
  no input element (impossible under padding <= kernel // 2) is +0.0.
* ``avg_pool2d_grad(g)``: dx[n, c, y, x] = the serial sum, over the windows (oy, ox) in
  row-major order holding it, of g[n, c, oy, ox] / divisor(oy, ox) (one division per term);
  the first term starts; an element no window holds is +0.0.
* ``adaptive_avg_pool2d(x)``: window (oy, ox) is rows [floor(oy*H/OH), ceil((oy+1)*H/OH))
  by columns likewise (torch's); the serial sum of its elements in row-major order, then one
  division by its element count. The output is at most the input on each axis.
* ``adaptive_avg_pool2d_grad(g)``: dx = the serial sum over the windows in row-major order
  holding the element of g / count (one division per term); none: +0.0.

Where every window is whole (no padding and none clipped by ceil mode; adaptive windows all of
one size: H % OH == W % OW == 0, global average pooling among them), that definition is the
generic reduction's (``forms.REDUCE`` with mean: the serial sum from the first element, one
division by the count) over the window's positions, and the forward runs its kernel
(``k_<op>_window``); fusion then reads it as it reads any reduction.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..kernels import Kernel
from .conv import check_4d, pair
from .elementwise import ADD, DIV
from .forms import REDUCE
from .pool import (
    IN,
    OUT,
    launch_pool,
    nonempty,
    pool_kernels,
    pooled_size,
    scatter,
    taps,
    window_attrs,
)
from .reduce import SUM, fold_kernels, launch_sum
from .registry import Op, register


# --------------------------------------------------------------------------- geometry
def _avg_attrs(op: str, attrs: dict) -> dict:
    at = window_attrs(op, attrs, False)
    inc = attrs.get("count_include_pad", True)
    if not isinstance(inc, (bool, np.bool_)):
        raise TypeError(f"{op}: count_include_pad is {inc!r}; expected a bool")
    at["count_include_pad"] = bool(inc)
    return at


def divisors(size: tuple, out: tuple, at: dict) -> np.ndarray:
    """(OH, OW) int64: each average-pool window's divisor (torch's rule, module doc)."""
    per = []
    for ax in (0, 1):
        k, s, p = at["kernel"][ax], at["stride"][ax], at["padding"][ax]
        start = np.arange(out[ax]) * s - p
        end = np.minimum(start + k, size[ax] + p)
        inside = np.minimum(end, size[ax]) - np.maximum(start, 0)
        per.append(end - start if at["count_include_pad"] else inside)
    return per[0][:, None] * per[1][None, :]


def adaptive_bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """The start and end rows of the ``out`` adaptive windows over ``size`` rows (torch's)."""
    o = np.arange(out)
    return (o * size) // out, ((o + 1) * size + out - 1) // out


def _adaptive_size(op: str, value, size: tuple) -> tuple[int, int]:
    """output_size: an int or a pair (None: the input's size), at most the input's size."""
    if isinstance(value, (tuple, list)) and len(value) == 2:  # None: the input's size
        value = tuple(size[k] if v is None else v for k, v in enumerate(value))
    out = pair(op, "output_size", value, 1)
    if out[0] > size[0] or out[1] > size[1]:
        raise ValueError(f"{op}: output_size {out} is larger than the input {tuple(size)}; "
                         "expected at most the input's size on each axis")
    return out


# --------------------------------------------------------------------------- numpy
def _avg_ref(x, **at):
    acc = seen = None
    with np.errstate(all="ignore"):
        for _, v, inside in taps(x, at):
            if acc is None:
                acc = np.zeros(v.shape, x.dtype)
                seen = np.zeros(inside.shape, bool)
            acc = np.where(inside, np.where(seen, acc + v, v), acc)
            seen = seen | inside
        div = divisors(x.shape[2:], acc.shape[2:], at).astype(x.dtype)
        return np.where(seen, acc / div, x.dtype.type(0.0))


def _avg_grad_ref(g, *, size, **at):
    with np.errstate(all="ignore"):
        terms = g / divisors(size, g.shape[2:], at).astype(g.dtype)
    return scatter(terms, lambda i, j: True, g.shape[:2] + tuple(size), at)


def _adaptive_ref(x, *, output_size):
    (r0, r1), (c0, c1) = (adaptive_bounds(x.shape[2], output_size[0]),
                          adaptive_bounds(x.shape[3], output_size[1]))
    y = np.empty(x.shape[:2] + tuple(output_size), x.dtype)
    with np.errstate(all="ignore"):
        for oy in range(output_size[0]):
            for ox in range(output_size[1]):
                acc = None
                for i in range(r0[oy], r1[oy]):
                    for j in range(c0[ox], c1[ox]):
                        acc = x[:, :, i, j] if acc is None else acc + x[:, :, i, j]
                count = (r1[oy] - r0[oy]) * (c1[ox] - c0[ox])
                y[:, :, oy, ox] = acc / x.dtype.type(count)
    return y


def _adaptive_grad_ref(g, *, size):
    oh, ow = g.shape[2:]
    (r0, r1), (c0, c1) = adaptive_bounds(size[0], oh), adaptive_bounds(size[1], ow)
    dx = np.zeros(g.shape[:2] + tuple(size), g.dtype)
    seen = np.zeros(tuple(size), bool)
    with np.errstate(all="ignore"):
        for oy in range(oh):  # windows in row-major order: each element's terms in order
            for ox in range(ow):
                at = (slice(r0[oy], r1[oy]), slice(c0[ox], c1[ox]))
                t = g[:, :, oy, ox] / g.dtype.type((r1[oy] - r0[oy]) * (c1[ox] - c0[ox]))
                block = dx[:, :, at[0], at[1]]
                dx[:, :, at[0], at[1]] = np.where(seen[at], block + t[:, :, None, None],
                                                  t[:, :, None, None])
                seen[at] = True
    return dx


# --------------------------------------------------------------------------- shape rules
def _avg_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (x,) = shapes_
    check_4d("avg_pool2d", "x", x, "(N, C, H, W)")
    nonempty("avg_pool2d", x)
    at = _avg_attrs("avg_pool2d", attrs)
    return tuple(x[:2]) + pooled_size("avg_pool2d", x[2:], at), at


def _avg_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (g,) = shapes_
    op = "avg_pool2d_grad"
    check_4d(op, "g", g, "(N, C, OH, OW)")
    at = _avg_attrs(op, attrs)
    size = pair(op, "size", attrs["size"], 1)
    want = pooled_size(op, size, at)
    if tuple(g[2:]) != want:
        raise ValueError(f"{op}: g has shape {tuple(g)}; expected (OH, OW) = {want} for size "
                         f"{size}, kernel {at['kernel']} and stride {at['stride']}")
    return tuple(g[:2]) + size, {**at, "size": size}


def _adaptive_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (x,) = shapes_
    op = "adaptive_avg_pool2d"
    check_4d(op, "x", x, "(N, C, H, W)")
    nonempty(op, x)
    out = _adaptive_size(op, attrs["output_size"], tuple(x[2:]))
    return tuple(x[:2]) + out, {"output_size": out}


def _adaptive_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (g,) = shapes_
    op = "adaptive_avg_pool2d_grad"
    check_4d(op, "g", g, "(N, C, OH, OW)")
    size = pair(op, "size", attrs["size"], 1)
    _adaptive_size(op, tuple(g[2:]), size)
    return tuple(g[:2]) + size, {"size": size}


# --------------------------------------------------------------------------- kernels
# the window (oy, ox) of an average pool: its in-input rows [h0, h1) and columns [w0, w1), and
# its divisor (torch's rule)
_WINDOW = """\
        const long long hs = oy * sh - ph, ws = ox * sw - pw;
        const long long he = hs + KH < H + ph ? hs + KH : H + ph;
        const long long we = ws + KW < W + pw ? ws + KW : W + pw;
        const long long h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws;
        const long long h1 = he < H ? he : H, w1 = we < W ? we : W;
        const long long divisor = inc ? (he - hs) * (we - ws) : (h1 - h0) * (w1 - w0);
"""
# the adaptive window (oy, ox): rows [h0, h1), columns [w0, w1), divisor its element count
_ADAPTIVE = """\
        const long long h0 = oy * H / OH, h1 = ((oy + 1) * H + OH - 1) / OH;
        const long long w0 = ox * W / OW, w1 = ((ox + 1) * W + OW - 1) / OW;
        const long long divisor = (h1 - h0) * (w1 - w0);
"""
# the serial sum of rows [h0, h1) x columns [w0, w1) of plane pl, then / divisor
# NOTE: no `if (i || j)` inside one loop: g++ if-converted that into adding +0.0, which turns
# a sum of -0.0 into +0.0; the first row is split off instead
_SUM = """\
        $T acc = ($T)0;
        if (h0 < h1 && w0 < w1) {
            const $T* xp = x + pl * H * W;
            acc = xp[h0 * W + w0];
            for (long long j = w0 + 1; j < w1; ++j) acc = $ADD(acc, xp[h0 * W + j]);
            for (long long i = h0 + 1; i < h1; ++i)
                for (long long j = w0; j < w1; ++j) acc = $ADD(acc, xp[i * W + j]);
            acc = $DIV(acc, ($T)divisor);
        }
        y[e] = acc;
"""
# a gradient element's term from window (oy, ox) (inside IN's loops, or ``_ADAPTIVE_IN``'s)
_TERM = """\
                const $T t = $DIV(g[(pl * OH + oy) * OW + ox], ($T)divisor);
                acc = first ? t : $ADD(acc, t);
                first = false;
            }
        }
        y[e] = acc;
"""
# one input element e and the adaptive windows holding it, in row-major order
_ADAPTIVE_IN = """\
        const long long xx = e % W, yy = (e / W) % H, pl = e / (W * H);
        $T acc = ($T)0;
        bool first = true;
        for (long long oy = yy * OH / H; oy < OH && oy * H / OH <= yy; ++oy) {
            if (((oy + 1) * H + OH - 1) / OH <= yy) continue;
            for (long long ox = xx * OW / W; ox < OW && ox * W / OW <= xx; ++ox) {
                if (((ox + 1) * W + OW - 1) / OW <= xx) continue;
"""


def _indent(text: str, n: int = 8) -> str:
    return "".join(" " * n + line + "\n" for line in text.splitlines())


_BODIES = {
    "avg_pool2d": OUT + _WINDOW + _SUM,
    "avg_pool2d_grad": IN + _indent(_WINDOW) + _TERM,
    "adaptive_avg_pool2d": OUT + _ADAPTIVE + _SUM,
    "adaptive_avg_pool2d_grad": _ADAPTIVE_IN + _indent(_ADAPTIVE) + _TERM,
}
_SCATTER = """\
                    const $T t = $DIV(gp[oy * OW + ox], ($T)divisor);
                    for (long long i = h0; i < h1; ++i)
                        for (long long j = w0; j < w1; ++j) put(i * W + j, t);
"""
# adaptive windows that tile the input (H % OH == W % OW == 0: global average pooling among
# them) hold each element once: its gradient is its window's one term, written directly
_CPU_TILES = """\
    if (H % OH == 0 && W % OW == 0) {
        const long long planes = n / (H * W), kh = H / OH, kw = W / OW;
        gtcpu::parallel_for(planes, H * W, [=](long long lo, long long hi) {
            for (long long pl = lo; pl < hi; ++pl)
                for (long long oy = 0; oy < OH; ++oy)
                    for (long long ox = 0; ox < OW; ++ox) {
                        const $T t = $DIV(g[(pl * OH + oy) * OW + ox], ($T)(kh * kw));
                        $T* dp = y + pl * H * W + oy * kh * W + ox * kw;
                        for (long long i = 0; i < kh; ++i)
                            for (long long j = 0; j < kw; ++j) dp[i * W + j] = t;
                    }
        });
        return;
    }
"""
_CPU_FIRST = {"adaptive_avg_pool2d_grad": _CPU_TILES}
_CPU_WINDOW = {"avg_pool2d_grad": _indent(_WINDOW, 12) + _SCATTER,
               "adaptive_avg_pool2d_grad": _indent(_ADAPTIVE, 12) + _SCATTER}
_ARRAYS = {"avg_pool2d": "const $T* x", "avg_pool2d_grad": "const $T* g",
           "adaptive_avg_pool2d": "const $T* x", "adaptive_avg_pool2d_grad": "const $T* g"}


def _kernels(name: str, cpu: bool):
    # the forward ops also hold a window reduction: the generic Reduce form's kernel (mean)
    window = fold_kernels(f"{name}_window", REDUCE, SUM, ADD, cpu) if name in _WINDOWED \
        else None

    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        subs = {"T": ft.ctype, "ADD": ADD[ft].cname, "DIV": DIV[ft].cname,
                "KNAME": ft.kernel(name)}
        return [pool_kernels(_ARRAYS[name], _BODIES[name], _CPU_WINDOW.get(name),
                             (ADD[ft], DIV[ft]), cpu, subs, _CPU_FIRST.get(name, "")),
                *(window(ft) if window else ())]

    return kernels


# Where every window is whole (no padding, no partial ceil-mode window; adaptive windows of one
# size), a window's definition -- the serial sum of its elements in tap (row-major) order, the
# first one starting, then one division by its element count -- is the generic reduction's
# (``forms.REDUCE`` with mean) over the positions (KH, KW) at strides (W, 1) from the window's
# corner: the forward ops run that kernel there (``k_<op>_window``: fusion reads it as any
# reduction). Padded or clipped windows keep the pool kernel (their divisor and taps vary).
_WINDOWED = ("avg_pool2d", "adaptive_avg_pool2d")


def _launch_windows(rt, ks, name: str, x, out, kernel: tuple, stride: tuple) -> None:
    """Enqueue ``k_<name>_window``: out[n, c, oy, ox] = mean of x's whole window there."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    nred, geom = REDUCE.strided_geometry(
        (n, c, oh, ow), (c * h * w, h * w, stride[0] * w, stride[1]), kernel, (w, 1))
    launch_sum(rt, ks[f"{name}_window"], x, out, nred, geom, True)


def _whole_windows(size: tuple, out: tuple, kernel: tuple, stride: tuple, padding: tuple) -> bool:
    """Every window lies inside the input (no padding, the last one ends by the edge)."""
    return tuple(padding) == (0, 0) and all(
        (o - 1) * s + k <= n for o, s, k, n in zip(out, stride, kernel, size))


def _avg_launch(rt, ks, ins, out, *, kernel, stride, padding, ceil_mode, count_include_pad):
    x = ins[0]
    if _whole_windows(x.shape[2:], out.shape[2:], kernel, stride, padding):
        _launch_windows(rt, ks, "avg_pool2d", x, out, kernel, stride)
        return
    launch_pool(rt, ks, tuple(ins), out, ins[0].shape, out.shape, kernel, stride, padding,
                inc=count_include_pad)


def _avg_grad_launch(rt, ks, ins, out, *, kernel, stride, padding, ceil_mode,
                     count_include_pad, size):
    launch_pool(rt, ks, tuple(ins), out, out.shape, ins[0].shape, kernel, stride, padding,
                inc=count_include_pad)


def _adaptive_launch(rt, ks, ins, out, *, output_size):
    x = ins[0]
    size, osz = x.shape[2:], out.shape[2:]
    if all(n % o == 0 for n, o in zip(size, osz)):  # windows of one size, edge to edge
        step = tuple(n // o for n, o in zip(size, osz))
        _launch_windows(rt, ks, "adaptive_avg_pool2d", x, out, step, step)
        return
    launch_pool(rt, ks, tuple(ins), out, ins[0].shape, out.shape)


def _adaptive_grad_launch(rt, ks, ins, out, *, size):
    launch_pool(rt, ks, tuple(ins), out, out.shape, ins[0].shape)


# --------------------------------------------------------------------------- backward rules
# each op is linear; its adjoint is the other one of its pair
def _avg_vjp(be, g, ins, out, needs, **at):
    return (be.avg_pool2d_grad(g, size=tuple(ins[0].shape[2:]), **at) if needs[0] else None,)


def _avg_grad_vjp(be, g2, ins, out, needs, size, **at):
    return (be.avg_pool2d(g2, **at) if needs[0] else None,)


def _adaptive_vjp(be, g, ins, out, needs, output_size):
    return (be.adaptive_avg_pool2d_grad(g, size=tuple(ins[0].shape[2:])) if needs[0]
            else None,)


def _adaptive_grad_vjp(be, g2, ins, out, needs, size):
    return (be.adaptive_avg_pool2d(g2, output_size=tuple(ins[0].shape[2:])) if needs[0]
            else None,)


_ATTRS = ("kernel", "stride", "padding", "ceil_mode", "count_include_pad")
_DEFAULTS = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True}
register(Op("avg_pool2d", ("x",), _ATTRS, _avg_infer, _avg_ref, _kernels("avg_pool2d", False),
            _avg_launch, _avg_vjp,
            "2-D average pooling (padding, ceil mode, count_include_pad): a serial sum of each "
            "window's input elements in tap order, then / its divisor (torch's)",
            dict(_DEFAULTS), cpu=_kernels("avg_pool2d", True)))
register(Op("avg_pool2d_grad", ("g",), ("kernel", "stride", "size", "padding", "ceil_mode",
                                       "count_include_pad"), _avg_grad_infer, _avg_grad_ref,
            _kernels("avg_pool2d_grad", False), _avg_grad_launch, _avg_grad_vjp,
            "avg_pool2d's backward: g / divisor summed over the windows row-major",
            dict(_DEFAULTS), cpu=_kernels("avg_pool2d_grad", True)))
register(Op("adaptive_avg_pool2d", ("x",), ("output_size",), _adaptive_infer, _adaptive_ref,
            _kernels("adaptive_avg_pool2d", False), _adaptive_launch, _adaptive_vjp,
            "adaptive average pooling (torch's windows): a serial sum of each window "
            "row-major, then / its element count", {},
            cpu=_kernels("adaptive_avg_pool2d", True)))
register(Op("adaptive_avg_pool2d_grad", ("g",), ("size",), _adaptive_grad_infer,
            _adaptive_grad_ref, _kernels("adaptive_avg_pool2d_grad", False),
            _adaptive_grad_launch, _adaptive_grad_vjp,
            "adaptive_avg_pool2d's backward: g / count summed over the windows row-major", {},
            cpu=_kernels("adaptive_avg_pool2d_grad", True)))
