"""2-D max and average pooling (NCHW, no padding, floor mode, as torch's defaults) and their
backward ops.

Definitions (x (N, C, H, W), kernel (KH, KW), stride (sh, sw), None meaning the kernel;
OH = (H - KH) // sh + 1, OW likewise; window (oy, ox) = x[n, c, oy*sh + i, ox*sw + j] for the
taps (i, j) in row-major order):

* ``max_pool2d(x)``: a serial scan of the window in tap order: a later element wins only when
  strictly greater (ties, +-0.0 included, keep the first: the max of (-0.0, +0.0) is -0.0);
  a NaN is the maximum and the first NaN wins (argmax's rule; torch keeps the last NaN, which
  only changes where the gradient goes). The result is the chosen element.
* ``max_pool2d_grad(g, x)``: dx[n, c, y, x] = the serial sum, over the windows (oy, ox) in
  row-major order whose chosen element it is, of g[n, c, oy, ox]; the accumulator starts at
  the first one; an element no window chooses is +0.0 (windows overlap when stride < kernel).
* ``max_pool2d_pick(v, x)``: v (x's shape) read at the element each window of x chooses:
  max_pool2d_grad's adjoint in g (its double backward).
* ``avg_pool2d(x)``: the serial sum of the window in tap order (the first element starts),
  then one IEEE division by KH*KW (rounded to the dtype; exact for small kernels).
* ``avg_pool2d_grad(g)``: dx[n, c, y, x] = the serial sum, over the windows (oy, ox) in
  row-major order that contain it, of g[n, c, oy, ox] / (KH*KW) (one division per term);
  the first term starts; an element no window contains is +0.0.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import dtypes
from ..kernels import DeviceFn, Kernel, params
from .conv import check_4d, out_size, pair
from .elementwise import ADD, BLOCK, DIV, grid_for
from .registry import Op, register

_ARGMAX = Template("""\
__device__ __forceinline__ long long $NAME(const $T* xp, long long W, long long y0,
                                            long long x0, long long KH, long long KW)
{
    long long best = y0 * W + x0;
    $T bv = xp[best];
    if (bv != bv) return best;
    for (long long i = 0; i < KH; ++i)
        for (long long j = 0; j < KW; ++j) {
            const long long q = (y0 + i) * W + x0 + j;
            const $T v = xp[q];
            if (v != v) return q;
            if (v > bv) {
                best = q;
                bv = v;
            }
        }
    return best;
}
""")
# the element a max-pool window chooses (its flat offset in the plane): one function for the
# forward, the gradient and the pick, on every engine
ARGMAX = {ft: DeviceFn(ft.fn("pool_argmax"),
                        _ARGMAX.substitute(T=ft.ctype,
                                           NAME=ft.fn("pool_argmax")))
          for ft in dtypes.FLOATS}


# --------------------------------------------------------------------------- shape rules
def _attrs(op: str, attrs: dict) -> tuple[tuple, tuple]:
    kernel = pair(op, "kernel", attrs["kernel"], 1)
    stride = attrs.get("stride")
    stride = kernel if stride is None else pair(op, "stride", stride, 1)
    return kernel, stride


def _pool_out(op: str, x: tuple, kernel: tuple, stride: tuple) -> tuple:
    return tuple(x[:2]) + out_size(op, x[2:], kernel, stride, (0, 0))


def _pool_infer(op: str):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        (x,) = shapes_
        check_4d(op, "x", x, "(N, C, H, W)")
        kernel, stride = _attrs(op, attrs)
        return _pool_out(op, x, kernel, stride), {"kernel": kernel, "stride": stride}

    return infer


def _two_infer(op: str, first: str):
    """(first, x) of x's shape (pick) or (g, x) with g the pool's output shape (grad)."""
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        a, x = shapes_
        check_4d(op, first, a, "")
        check_4d(op, "x", x, "(N, C, H, W)")
        kernel, stride = _attrs(op, attrs)
        pooled = _pool_out(op, x, kernel, stride)
        want, out = (pooled, x) if first == "g" else (x, pooled)
        if tuple(a) != want:
            raise ValueError(f"{op}: {first} has shape {tuple(a)}; expected {want} for x "
                             f"{tuple(x)}, kernel {kernel} and stride {stride}")
        return tuple(out), {"kernel": kernel, "stride": stride}

    return infer


def _avg_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    (g,) = shapes_
    op = "avg_pool2d_grad"
    check_4d(op, "g", g, "(N, C, OH, OW)")
    kernel, stride = _attrs(op, attrs)
    size = pair(op, "size", attrs["size"], 1)
    want = out_size(op, size, kernel, stride, (0, 0))
    if tuple(g[2:]) != want:
        raise ValueError(f"{op}: g has shape {tuple(g)}; expected (OH, OW) = {want} for size "
                         f"{size}, kernel {kernel} and stride {stride}")
    return tuple(g[:2]) + size, {"kernel": kernel, "stride": stride, "size": size}


# --------------------------------------------------------------------------- numpy
def _win(x: np.ndarray, i: int, j: int, stride: tuple, oh: int, ow: int):
    sh, sw = stride
    return (slice(None), slice(None), slice(i, i + sh * (oh - 1) + 1, sh),
            slice(j, j + sw * (ow - 1) + 1, sw))


def window_choice(x: np.ndarray, kernel: tuple, stride: tuple) -> np.ndarray:
    """(N, C, OH, OW) int64: the tap i*KW + j each max-pool window chooses (the scan rule)."""
    kh, kw = kernel
    oh, ow = out_size("max_pool2d", x.shape[2:], kernel, stride, (0, 0))
    best = x[_win(x, 0, 0, stride, oh, ow)]
    choice = np.zeros(best.shape, np.int64)
    nan = np.isnan(best)
    for i in range(kh):
        for j in range(kw):
            v = x[_win(x, i, j, stride, oh, ow)]
            vnan = np.isnan(v)
            take = ~nan & (vnan | (v > best))
            best = np.where(take, v, best)
            choice = np.where(take, i * kw + j, choice)
            nan |= vnan
    return choice


def _pick(v: np.ndarray, choice: np.ndarray, kernel: tuple, stride: tuple) -> np.ndarray:
    kh, kw = kernel
    oh, ow = choice.shape[2:]
    out = np.zeros(choice.shape, v.dtype)
    for i in range(kh):
        for j in range(kw):
            out = np.where(choice == i * kw + j, v[_win(v, i, j, stride, oh, ow)], out)
    return out


def _scatter(terms: np.ndarray, mask, shape: tuple, kernel: tuple, stride: tuple) -> np.ndarray:
    """dx of ``shape``: per element the serial sum of terms[n, c, oy, ox] over the windows in
    row-major order containing it (where ``mask(i, j)`` says the window sends it there)."""
    kh, kw = kernel
    oh, ow = terms.shape[2:]
    acc = np.zeros(shape, terms.dtype)
    seen = np.zeros(shape, bool)
    # for one tap every window lands on a different element, and the taps in reverse
    # row-major order visit an element's windows in row-major order
    with np.errstate(all="ignore"):
        for i in range(kh - 1, -1, -1):
            for j in range(kw - 1, -1, -1):
                at = _win(acc, i, j, stride, oh, ow)
                sel = mask(i, j)
                acc[at] = np.where(sel, np.where(seen[at], acc[at] + terms, terms), acc[at])
                seen[at] = seen[at] | sel
    return np.where(seen, acc, terms.dtype.type(0.0))


def _max_ref(x, *, kernel, stride):
    return _pick(x, window_choice(x, kernel, stride), kernel, stride)


def _max_grad_ref(g, x, *, kernel, stride):
    choice = window_choice(x, kernel, stride)
    kw = kernel[1]
    return _scatter(g, lambda i, j: choice == i * kw + j, x.shape, kernel, stride)


def _pick_ref(v, x, *, kernel, stride):
    return _pick(v, window_choice(x, kernel, stride), kernel, stride)


def _avg_ref(x, *, kernel, stride):
    kh, kw = kernel
    oh, ow = out_size("avg_pool2d", x.shape[2:], kernel, stride, (0, 0))
    with np.errstate(all="ignore"):
        acc = x[_win(x, 0, 0, stride, oh, ow)].copy()
        for i in range(kh):
            for j in range(kw):
                if i or j:
                    acc = acc + x[_win(x, i, j, stride, oh, ow)]
        return acc / x.dtype.type(kh * kw)


def _avg_grad_ref(g, *, kernel, stride, size):
    with np.errstate(all="ignore"):
        terms = g / g.dtype.type(kernel[0] * kernel[1])
    return _scatter(terms, lambda i, j: True, g.shape[:2] + tuple(size), kernel, stride)


# --------------------------------------------------------------------------- kernels
_GEOM = ("long long n, long long H, long long W, long long OH, long long OW, long long KH, "
         "long long KW, long long sh, long long sw")
_GRID = """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
$ONE    }"""
_CPU = """\
    gtcpu::parallel_for(n, KH * KW + 1, [=](long long lo, long long hi) {
        for (long long e = lo; e < hi; ++e) {
$ONE        }
    });"""

# one pooled output e = (plane, oy, ox)
_OUT = """\
        const long long ox = e % OW, oy = (e / OW) % OH, pl = e / (OW * OH);
"""
# one input element e = (plane, y, x) and the windows containing it, in row-major order
_IN = """\
        const long long xx = e % W, yy = (e / W) % H, pl = e / (W * H);
        const long long oy0 = yy < KH ? 0 : (yy - KH) / sh + 1;
        const long long ox0 = xx < KW ? 0 : (xx - KW) / sw + 1;
        const long long oy1 = yy / sh < OH - 1 ? yy / sh : OH - 1;
        const long long ox1 = xx / sw < OW - 1 ? xx / sw : OW - 1;
        $T acc = ($T)0;
        bool first = true;
        for (long long oy = oy0; oy <= oy1; ++oy)
            for (long long ox = ox0; ox <= ox1; ++ox) {
"""
_BODIES = {
    "max_pool2d": _OUT + """\
        const $T* xp = x + pl * H * W;
        y[e] = xp[$ARGMAX(xp, W, oy * sh, ox * sw, KH, KW)];
""",
    "max_pool2d_pick": _OUT + """\
        const long long q = $ARGMAX(x + pl * H * W, W, oy * sh, ox * sw, KH, KW);
        y[e] = v[pl * H * W + q];
""",
    "max_pool2d_grad": _IN + """\
                if ($ARGMAX(x + pl * H * W, W, oy * sh, ox * sw, KH, KW) != yy * W + xx)
                    continue;
                const $T t = g[(pl * OH + oy) * OW + ox];
                acc = first ? t : $ADD(acc, t);
                first = false;
            }
        y[e] = acc;
""",
    "avg_pool2d": _OUT + """\
        const $T* xp = x + (pl * H + oy * sh) * W + ox * sw;
        // NOTE: no `if (i || j)` inside one loop: g++ if-converted that into adding +0.0,
        // which turns a sum of -0.0 into +0.0; the first row is split off instead
        $T acc = xp[0];
        for (long long j = 1; j < KW; ++j) acc = $ADD(acc, xp[j]);
        for (long long i = 1; i < KH; ++i)
            for (long long j = 0; j < KW; ++j) acc = $ADD(acc, xp[i * W + j]);
        y[e] = $DIV(acc, ($T)(KH * KW));
""",
    "avg_pool2d_grad": _IN + """\
                const $T t = $DIV(g[(pl * OH + oy) * OW + ox], ($T)(KH * KW));
                acc = first ? t : $ADD(acc, t);
                first = false;
            }
        y[e] = acc;
""",
}
# cpu pooled outputs: planes split across threads, each plane's outputs in a plain loop
_CPU_PLANE = """\
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
_CPU_SCATTER = """\
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
    "max_pool2d_grad": """\
                    put($ARGMAX(x + pl * H * W, W, oy * sh, ox * sw, KH, KW),
                        gp[oy * OW + ox]);
""",
    "avg_pool2d_grad": """\
                    const $T t = $DIV(gp[oy * OW + ox], ($T)(KH * KW));
                    for (long long i = 0; i < KH; ++i)
                        for (long long j = 0; j < KW; ++j) put((oy * sh + i) * W + ox * sw + j, t);
""",
}
_ARRAYS = {"max_pool2d": "const $T* x", "max_pool2d_pick": "const $T* v, const $T* x",
           "max_pool2d_grad": "const $T* g, const $T* x", "avg_pool2d": "const $T* x",
           "avg_pool2d_grad": "const $T* g"}


def _kernels(name: str, cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(Template(_ARRAYS[name]).substitute(T=t) + f", {t}* y, " + _GEOM)
        one = _BODIES[name]
        loop = _CPU if cpu else _GRID
        if cpu and one.startswith(_OUT):  # pooled outputs: plane by plane, no index decode
            one, loop = one[len(_OUT):], _CPU_PLANE
        if cpu:
            one = "".join("    " + line + "\n" for line in one.splitlines())
        if cpu and name in _CPU_WINDOW:
            loop = _CPU_SCATTER.replace("$WINDOW", _CPU_WINDOW[name])
        body = Template(loop.replace("$ONE", one)).substitute(
            T=t, ARGMAX=ARGMAX[ft].name, ADD=ADD[ft].cname, DIV=DIV[ft].cname)
        calls = {"max_pool2d": (ARGMAX[ft],), "max_pool2d_pick": (ARGMAX[ft],),
                 "max_pool2d_grad": (ARGMAX[ft], ADD[ft]), "avg_pool2d": (ADD[ft], DIV[ft]),
                 "avg_pool2d_grad": (ADD[ft], DIV[ft])}[name]
        return [Kernel(ft.kernel(name), sig, body, "pool", calls)]

    return kernels


def _launch(name: str):
    def launch(rt, ks, ins, out, *, kernel, stride, size=None):
        big = ins[-1] if name != "avg_pool2d_grad" else out  # the (N, C, H, W) side
        small = out if name in ("max_pool2d", "max_pool2d_pick", "avg_pool2d") else ins[0]
        h, w = big.shape[2:]
        oh, ow = small.shape[2:]
        if out.size:
            rt.launch(ks.only, grid_for(out.size), BLOCK,
                      (*ins, out, out.size, h, w, oh, ow, *kernel, *stride))

    return launch


# --------------------------------------------------------------------------- backward rules
def _zeros(be, x, g):
    return be.fill(tuple(x.shape), 0.0, g.dtype)


def _max_vjp(be, g, ins, out, needs, kernel, stride):
    return (be.max_pool2d_grad(g, ins[0], kernel, stride) if needs[0] else None,)


def _max_grad_vjp(be, g2, ins, out, needs, kernel, stride):
    # linear in g (its adjoint: the pick of g2 at the chosen elements); piecewise constant
    # in x (zero almost everywhere, as torch's double backward)
    g, x = ins
    return (be.max_pool2d_pick(g2, x, kernel, stride) if needs[0] else None,
            _zeros(be, x, g2) if needs[1] else None)


def _pick_vjp(be, g, ins, out, needs, kernel, stride):
    v, x = ins
    return (be.max_pool2d_grad(g, x, kernel, stride) if needs[0] else None,
            _zeros(be, x, g) if needs[1] else None)


def _avg_vjp(be, g, ins, out, needs, kernel, stride):
    return (be.avg_pool2d_grad(g, kernel, stride, tuple(ins[0].shape[2:])) if needs[0]
            else None,)


def _avg_grad_vjp(be, g2, ins, out, needs, kernel, stride, size):
    # linear: its adjoint is the average over each window (the forward op)
    return (be.avg_pool2d(g2, kernel, stride) if needs[0] else None,)


def _op(name, inputs, attrs, infer, ref, vjp, doc, defaults):
    register(Op(name, inputs, attrs, infer, ref, _kernels(name, False), _launch(name), vjp, doc,
                defaults, cpu=_kernels(name, True)))


_op("max_pool2d", ("x",), ("kernel", "stride"), _pool_infer("max_pool2d"), _max_ref, _max_vjp,
    "2-D max pooling: a serial scan per window, the first maximum (the first NaN) wins",
    {"stride": None})
_op("max_pool2d_grad", ("g", "x"), ("kernel", "stride"), _two_infer("max_pool2d_grad", "g"),
    _max_grad_ref, _max_grad_vjp,
    "max_pool2d's backward: g to each window's chosen element, summed over windows "
    "row-major", {"stride": None})
_op("max_pool2d_pick", ("v", "x"), ("kernel", "stride"), _two_infer("max_pool2d_pick", "v"),
    _pick_ref, _pick_vjp, "v read at the element each max_pool2d window of x chooses",
    {"stride": None})
_op("avg_pool2d", ("x",), ("kernel", "stride"), _pool_infer("avg_pool2d"), _avg_ref, _avg_vjp,
    "2-D average pooling: a serial sum per window in tap order, then / (kh*kw)",
    {"stride": None})
_op("avg_pool2d_grad", ("g",), ("kernel", "stride", "size"), _avg_grad_infer, _avg_grad_ref,
    _avg_grad_vjp, "avg_pool2d's backward: g / (kh*kw) summed over windows row-major",
    {"stride": None})
