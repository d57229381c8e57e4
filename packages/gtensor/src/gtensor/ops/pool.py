"""2-D max pooling (NCHW, torch's max_pool2d: padding, dilation, ceil mode) and its backward
ops; the window geometry every pool shares.

Window geometry (x (N, C, H, W), kernel (KH, KW), stride (sh, sw; None: the kernel), padding
(ph, pw), dilation (dh, dw; max pooling only), ceil_mode): window (oy, ox) holds the taps
(i, j) in row-major order at (oy*sh - ph + i*dh, ox*sw - pw + j*dw); a tap outside the input
is padding. OH = floor-or-ceil((H + 2ph - dh*(KH-1) - 1) / sh) + 1, and in ceil mode one less
when the last window would start at or past H + ph (torch's rule); padding <= kernel // 2
(torch's rule).

* ``max_pool2d(x)``: a serial scan of the window's in-input taps in tap order: the first one
  starts, a later element wins only when strictly greater (ties, +-0.0 included, keep the first:
  the max of (-0.0, +0.0) is -0.0); a NaN is the maximum and the first NaN wins (argmax's
  rule; torch keeps the last NaN, which only changes where the gradient goes). Padding is
  -inf in torch's words: it never wins, so it is skipped; a window of padding only (possible
  with dilation) is -inf and chooses nothing. The result is the chosen element.
* ``max_pool2d_grad(g, x)``: dx[n, c, y, x] = the serial sum, over the windows (oy, ox) in
  row-major order whose chosen element it is, of g[n, c, oy, ox]; the accumulator starts at
  the first one; an element no window chooses is +0.0 (windows overlap when stride < kernel).
* ``max_pool2d_pick(v, x)``: v (x's shape) read at the element each window of x chooses (+0.0
  where it chooses nothing): max_pool2d_grad's adjoint in g (its double backward).
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import dtypes
from ..kernels import DeviceFn, Kernel, Kind, params
from .conv import check_4d, pair
from .elementwise import ADD
from .forms import BLOCK, POOL, grid_for
from .registry import Op, register

_ARGMAX = Template("""\
__device__ __forceinline__ long long $NAME(const $T* xp, long long H, long long W,
                                            long long y0, long long x0, long long KH,
                                            long long KW, long long dh, long long dw)
{
    long long best = -1;
    $T bv = ($T)0;
    for (long long i = 0; i < KH; ++i) {
        const long long yy = y0 + i * dh;
        if (yy < 0 || yy >= H) continue;
        for (long long j = 0; j < KW; ++j) {
            const long long xx = x0 + j * dw;
            if (xx < 0 || xx >= W) continue;
            const long long q = yy * W + xx;
            const $T v = xp[q];
            if (v != v) return q;
            if (best < 0 || v > bv) {
                best = q;
                bv = v;
            }
        }
    }
    return best;
}
""")
# the element a max-pool window chooses (its flat offset in the plane, -1 for none): one
# function for the forward, the gradient and the pick, on every engine
ARGMAX = {ft: DeviceFn(ft.fn("pool_argmax"),
                        _ARGMAX.substitute(T=ft.ctype, NAME=ft.fn("pool_argmax")))
          for ft in dtypes.FLOATS}


# --------------------------------------------------------------------------- geometry
def _flag(op: str, arg: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {arg} is {value!r}; expected a bool")
    return bool(value)


def window_attrs(op: str, attrs: dict, dilated: bool) -> dict:
    """kernel, stride (None: the kernel), padding (<= kernel // 2), dilation (max pooling
    only) and ceil_mode, normalized."""
    kernel = pair(op, "kernel", attrs["kernel"], 1)
    stride = attrs.get("stride")
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    padding = pair(op, "padding", attrs.get("padding", 0), 0)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ValueError(f"{op}: padding {padding} is more than half the kernel {kernel}; "
                         "expected padding <= kernel // 2 on each axis (torch's rule)")
    out = {"kernel": kernel, "stride": stride, "padding": padding}
    if dilated:
        out["dilation"] = pair(op, "dilation", attrs.get("dilation", 1), 1)
    out["ceil_mode"] = _flag(op, "ceil_mode", attrs.get("ceil_mode", False))
    return out


def pooled_size(op: str, size: tuple, at: dict) -> tuple[int, int]:
    """(OH, OW) of the windows of ``at`` (``window_attrs``) over ``size`` (torch's rule)."""
    out = []
    for ax in (0, 1):
        k, s, p = at["kernel"][ax], at["stride"][ax], at["padding"][ax]
        d = at.get("dilation", (1, 1))[ax]
        room = size[ax] + 2 * p - d * (k - 1) - 1
        o = (-(-room // s) if at["ceil_mode"] else room // s) + 1
        if at["ceil_mode"] and (o - 1) * s >= size[ax] + p:
            o -= 1
        if o < 1:
            what = f"kernel {at['kernel']}" + (
                f" dilated by {at['dilation']}" if at.get("dilation", (1, 1)) != (1, 1) else "")
            raise ValueError(f"{op}: {what} is larger than the padded input "
                             f"{(size[0] + 2 * at['padding'][0], size[1] + 2 * at['padding'][1])}"
                             f" (input {tuple(size)}, padding {at['padding']}); expected "
                             "kernel <= input + 2 * padding on both axes (or a window in ceil "
                             "mode)")
        out.append(o)
    return out[0], out[1]


def window_rows(size: int, out: int, k: int, s: int, p: int, d: int = 1):
    """Per tap i: (the element rows (or columns) window o reads, o = 0..out-1, and whether
    each is inside the input): ``(idx (k, out), inside (k, out))``."""
    o = np.arange(out)
    idx = o[None, :] * s - p + np.arange(k)[:, None] * d
    return np.clip(idx, 0, max(size - 1, 0)), (idx >= 0) & (idx < size)


def taps(x: np.ndarray, at: dict):
    """Per tap (i, j) in row-major order: (x at the tap of every window (N, C, OH, OW) -- an
    arbitrary element where the tap is padding -- and the in-input mask (OH, OW))."""
    oh, ow = pooled_size("pool", x.shape[2:], at)
    d = at.get("dilation", (1, 1))
    ri, rin = window_rows(x.shape[2], oh, at["kernel"][0], at["stride"][0], at["padding"][0],
                          d[0])
    ci, cin = window_rows(x.shape[3], ow, at["kernel"][1], at["stride"][1], at["padding"][1],
                          d[1])
    for i in range(at["kernel"][0]):
        for j in range(at["kernel"][1]):
            yield (i, j), x[:, :, ri[i][:, None], ci[j][None, :]], rin[i][:, None] & cin[j]


def scatter(terms: np.ndarray, mask, shape: tuple, at: dict) -> np.ndarray:
    """dx of ``shape``: per element the serial sum of terms[n, c, oy, ox] over the windows in
    row-major order holding it at a tap where ``mask(i, j)`` (N, C, OH, OW or broadcastable)
    is true; the first term starts; an element no window sends to is +0.0."""
    oh, ow = terms.shape[2:]
    d = at.get("dilation", (1, 1))
    kh, kw = at["kernel"]
    ri, rin = window_rows(shape[2], oh, kh, at["stride"][0], at["padding"][0], d[0])
    ci, cin = window_rows(shape[3], ow, kw, at["stride"][1], at["padding"][1], d[1])
    acc = np.zeros(shape, terms.dtype)
    seen = np.zeros(shape, bool)
    # for one tap the windows land on distinct elements, and the taps in reverse row-major
    # order visit an element's windows in row-major order
    with np.errstate(all="ignore"):
        for i in range(kh - 1, -1, -1):
            for j in range(kw - 1, -1, -1):
                inside = rin[i][:, None] & cin[j][None, :]
                sel = np.broadcast_to(mask(i, j) & inside, terms.shape)
                n, c, oy, ox = np.nonzero(sel)
                y, x = ri[i][oy], ci[j][ox]
                t = terms[n, c, oy, ox]
                acc[n, c, y, x] = np.where(seen[n, c, y, x], acc[n, c, y, x] + t, t)
                seen[n, c, y, x] = True
    return np.where(seen, acc, terms.dtype.type(0.0))


# --------------------------------------------------------------------------- numpy
def window_choice(x: np.ndarray, at: dict) -> np.ndarray:
    """(N, C, OH, OW) int64: the tap i*KW + j each max-pool window chooses (the scan rule),
    -1 where it holds no input element."""
    kw = at["kernel"][1]
    best = choice = nan = None
    for (i, j), v, inside in taps(x, at):
        if best is None:
            best = np.zeros(v.shape, x.dtype)
            choice = np.full(v.shape, -1, np.int64)
            nan = np.zeros(v.shape, bool)
        vnan = np.isnan(v) & inside
        with np.errstate(invalid="ignore"):
            take = inside & ~nan & ((choice < 0) | vnan | (v > best))
        best = np.where(take, v, best)
        choice = np.where(take, i * kw + j, choice)
        nan |= vnan
    return choice


def _pick(v: np.ndarray, choice: np.ndarray, at: dict, empty: float) -> np.ndarray:
    kw = at["kernel"][1]
    out = np.full(choice.shape, empty, v.dtype)
    for (i, j), vv, _ in taps(v, at):
        out = np.where(choice == i * kw + j, vv, out)
    return out


def _max_ref(x, **at):
    return _pick(x, window_choice(x, at), at, -np.inf)


def _max_grad_ref(g, x, **at):
    choice = window_choice(x, at)
    kw = at["kernel"][1]
    return scatter(g, lambda i, j: choice == i * kw + j, x.shape, at)


def _pick_ref(v, x, **at):
    return _pick(v, window_choice(x, at), at, 0.0)


# --------------------------------------------------------------------------- shape rules
def nonempty(op: str, x: tuple) -> None:
    """ValueError unless the input planes are not empty (H, W >= 1), as torch."""
    if x[2] < 1 or x[3] < 1:
        raise ValueError(f"{op}: x has shape {tuple(x)}; expected H, W >= 1")


def _pool_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (x,) = shapes_
    check_4d("max_pool2d", "x", x, "(N, C, H, W)")
    nonempty("max_pool2d", x)
    at = window_attrs("max_pool2d", attrs, True)
    return tuple(x[:2]) + pooled_size("max_pool2d", x[2:], at), at


def _two_infer(op: str, first: str):
    """(first, x) of x's shape (pick) or (g, x) with g the pool's output shape (grad)."""
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        a, x = shapes_
        check_4d(op, first, a, "")
        check_4d(op, "x", x, "(N, C, H, W)")
        nonempty(op, x)
        at = window_attrs(op, attrs, True)
        pooled = tuple(x[:2]) + pooled_size(op, x[2:], at)
        want, out = (pooled, x) if first == "g" else (x, pooled)
        if tuple(a) != tuple(want):
            raise ValueError(f"{op}: {first} has shape {tuple(a)}; expected {tuple(want)} for x "
                             f"{tuple(x)}, kernel {at['kernel']} and stride {at['stride']}")
        return tuple(out), at

    return infer


# --------------------------------------------------------------------------- kernels
# every pool kernel takes this geometry, geom = [H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw,
# inc] (inc: avg_pool2d's count_include_pad; the dilation is 1 for the average pools, and the
# adaptive pools read only H, W, OH, OW)
GEOM = "long long n, const long long* geom"
DECODE = """\
    const long long H = geom[0], W = geom[1], OH = geom[2], OW = geom[3], KH = geom[4],
                    KW = geom[5], sh = geom[6], sw = geom[7], ph = geom[8], pw = geom[9],
                    dh = geom[10], dw = geom[11], inc = geom[12];
    (void)KH; (void)KW; (void)sh; (void)sw; (void)ph; (void)pw; (void)dh; (void)dw; (void)inc;
"""
GRID = """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
$ONE    }"""
CPU = """\
    gtcpu::parallel_for(n, KH * KW + 1, [=](long long lo, long long hi) {
        for (long long e = lo; e < hi; ++e) {
$ONE        }
    });"""
# one pooled output e = (plane, oy, ox)
OUT = """\
        const long long ox = e % OW, oy = (e / OW) % OH, pl = e / (OW * OH);
"""
# one input element e = (plane, y, x) and the windows holding it, in row-major order (a window
# oy holds row yy at a tap iff yy + ph - oy*sh is a multiple of dh in [0, (KH-1)*dh])
IN = """\
        const long long xx = e % W, yy = (e / W) % H, pl = e / (W * H);
        const long long ty = yy + ph, tx = xx + pw, ey = (KH - 1) * dh, ex = (KW - 1) * dw;
        const long long oy0 = ty <= ey ? 0 : (ty - ey + sh - 1) / sh;
        const long long ox0 = tx <= ex ? 0 : (tx - ex + sw - 1) / sw;
        const long long oy1 = ty / sh < OH - 1 ? ty / sh : OH - 1;
        const long long ox1 = tx / sw < OW - 1 ? tx / sw : OW - 1;
        $T acc = ($T)0;
        bool first = true;
        for (long long oy = oy0; oy <= oy1; ++oy) {
            if ((ty - oy * sh) % dh != 0) continue;
            for (long long ox = ox0; ox <= ox1; ++ox) {
                if ((tx - ox * sw) % dw != 0) continue;
"""
_CHOICE = "$ARGMAX(x + pl * H * W, H, W, oy * sh - ph, ox * sw - pw, KH, KW, dh, dw)"
_BODIES = {
    "max_pool2d": OUT + """\
        const $T* xp = x + pl * H * W;
        const long long q = $ARGMAX(xp, H, W, oy * sh - ph, ox * sw - pw, KH, KW, dh, dw);
        y[e] = q < 0 ? $NEGINF : xp[q];
""",
    "max_pool2d_pick": OUT + f"""\
        const long long q = {_CHOICE};
        y[e] = q < 0 ? ($T)0 : v[pl * H * W + q];
""",
    "max_pool2d_grad": IN + f"""\
                if ({_CHOICE} != yy * W + xx)
                    continue;
                const $T t = g[(pl * OH + oy) * OW + ox];
                acc = first ? t : $ADD(acc, t);
                first = false;
            }}
        }}
        y[e] = acc;
""",
}
# cpu pooled outputs: planes split across threads, each plane's outputs in a plain loop
CPU_PLANE = """\
    const long long planes = n / (OH * OW);
    gtcpu::parallel_for(planes, OH * OW * KH * KW, [=](long long lo, long long hi) {
        for (long long pl = lo; pl < hi; ++pl)
            for (long long oy = 0; oy < OH; ++oy)
                for (long long ox = 0; ox < OW; ++ox) {
                    const long long e = (pl * OH + oy) * OW + ox;
$ONE                }
    });"""
# cpu gradients: planes split across threads; each plane's windows visited in row-major order,
# each adding its term to its element(s) (the first term of an element starts; untouched
# elements +0.0): per element, the same serial sum in window order as the CUDA loop above
CPU_SCATTER = """\
    const long long planes = n / (H * W);
    gtcpu::parallel_for(planes, H * W + OH * OW * KH * KW, [=](long long lo, long long hi) {
        char* seen = new char[H * W];
        for (long long pl = lo; pl < hi; ++pl) {
            $T* dp = y + pl * H * W;
            const $T* gp = g + pl * OH * OW;
            for (long long q = 0; q < H * W; ++q) seen[q] = 0;
            auto put = [&](long long q, $T t) {
                if (seen[q]) {
                    dp[q] = $ADD(dp[q], t);
                } else {
                    dp[q] = t;
                    seen[q] = 1;
                }
            };
            for (long long oy = 0; oy < OH; ++oy)
                for (long long ox = 0; ox < OW; ++ox) {
$WINDOW                }
            for (long long q = 0; q < H * W; ++q)
                if (!seen[q]) dp[q] = ($T)0;
        }
        delete[] seen;
    });"""
_CPU_WINDOW = {
    "max_pool2d_grad": f"""\
                    const long long q = {_CHOICE};
                    if (q >= 0) put(q, gp[oy * OW + ox]);
""",
}
_ARRAYS = {"max_pool2d": "const $T* x", "max_pool2d_pick": "const $T* v, const $T* x",
           "max_pool2d_grad": "const $T* g, const $T* x"}


def pool_kernels(arrays: str, one: str, cpu_window: str | None, calls: tuple, cpu: bool,
                 subs: dict, cpu_first: str = "") -> Kernel:
    """A pool kernel named ``subs["KNAME"]`` of C type ``subs["T"]``: on CUDA a grid loop over
    outputs (``one`` starting with ``OUT``) or input elements (``IN``); on cpu planes of
    outputs, or ``cpu_window`` scattered window by window, after ``cpu_first`` (a cpu fast
    path that returns where it applies)."""
    t = subs["T"]
    sig = params(Template(arrays).substitute(T=t) + f", {t}* y, " + GEOM)
    loop = CPU if cpu else GRID
    if cpu and one.startswith(OUT):  # pooled outputs: plane by plane, no index decode
        one, loop = one[len(OUT):], CPU_PLANE
    if cpu:
        one = "".join("    " + line + "\n" for line in one.splitlines())
    if cpu and cpu_window is not None:
        loop = CPU_SCATTER.replace("$WINDOW", cpu_window)
    body = Template(DECODE + (cpu_first if cpu else "") + loop.replace("$ONE", one)).substitute(
        subs)
    return Kernel(subs["KNAME"], sig, body, Kind.POOL, calls, POOL)


def _kernels(name: str, cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        calls = {"max_pool2d": (ARGMAX[ft],), "max_pool2d_pick": (ARGMAX[ft],),
                 "max_pool2d_grad": (ARGMAX[ft], ADD[ft])}[name]
        subs = {"T": ft.ctype, "ARGMAX": ARGMAX[ft].name, "ADD": ADD[ft].cname,
                "NEGINF": ft.literal(-np.inf), "KNAME": ft.kernel(name)}
        return [pool_kernels(_ARRAYS[name], _BODIES[name], _CPU_WINDOW.get(name), calls,
                             cpu, subs)]

    return kernels


def launch_pool(rt, ks, args: tuple, out, big: tuple, small: tuple, kernel=(1, 1),
                stride=(1, 1), padding=(0, 0), dilation=(1, 1), inc: bool = False) -> None:
    """Launch a pool kernel over ``out``: ``big`` the (N, C, H, W) side, ``small`` the pooled
    (the op's pool kernel, ``k_<op>``: the average pools' sets also hold a window reduction)."""
    h, w = big[2:]
    oh, ow = small[2:]
    if out.size:
        rt.launch(ks[ks.owner], grid_for(out.size), BLOCK,
                  (*args, out, out.size, rt.geom((h, w, oh, ow, *kernel, *stride, *padding,
                                                  *dilation, int(inc)))))


def _launch(name: str):
    def launch(rt, ks, ins, out, *, kernel, stride, padding, dilation, ceil_mode):
        small = out.shape if name in ("max_pool2d", "max_pool2d_pick") else ins[0].shape
        launch_pool(rt, ks, tuple(ins), out, ins[-1].shape, small, kernel, stride, padding,
                    dilation)

    return launch


# --------------------------------------------------------------------------- backward rules
def zeros_like(be, x, g):
    """+0.0 of x's shape (a piecewise-constant input's gradient)."""
    return be.fill(tuple(x.shape), 0.0, g.dtype)


def _max_vjp(be, g, ins, out, needs, **at):
    return (be.max_pool2d_grad(g, ins[0], **at) if needs[0] else None,)


def _max_grad_vjp(be, g2, ins, out, needs, **at):
    # linear in g (its adjoint: the pick of g2 at the chosen elements); piecewise constant
    # in x (zero almost everywhere, as torch's double backward)
    g, x = ins
    return (be.max_pool2d_pick(g2, x, **at) if needs[0] else None,
            zeros_like(be, x, g2) if needs[1] else None)


def _pick_vjp(be, g, ins, out, needs, **at):
    v, x = ins
    return (be.max_pool2d_grad(g, x, **at) if needs[0] else None,
            zeros_like(be, x, g) if needs[1] else None)


_ATTRS = ("kernel", "stride", "padding", "dilation", "ceil_mode")
_DEFAULTS = {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False}


def _op(name, inputs, infer, ref, vjp, doc):
    register(Op(name, inputs, _ATTRS, infer, ref, _kernels(name, False), _launch(name), vjp, doc,
                dict(_DEFAULTS), cpu=_kernels(name, True)))


_op("max_pool2d", ("x",), _pool_infer, _max_ref, _max_vjp,
    "2-D max pooling (padding, dilation, ceil mode): a serial scan of each window's input "
    "taps, the first maximum (the first NaN) wins")
_op("max_pool2d_grad", ("g", "x"), _two_infer("max_pool2d_grad", "g"), _max_grad_ref,
    _max_grad_vjp,
    "max_pool2d's backward: g to each window's chosen element, summed over windows row-major")
_op("max_pool2d_pick", ("v", "x"), _two_infer("max_pool2d_pick", "v"), _pick_ref, _pick_vjp,
    "v read at the element each max_pool2d window of x chooses")
