"""2-D convolution (NCHW, as torch's conv2d without bias: strides, paddings, dilations and
groups) and its two backward ops.

Definitions (x (N, C, H, W), w (O, C/G, KH, KW) for G = groups (G divides C and O; output
channel o belongs to group o // (O/G), which reads input channels [gi*C/G, (gi+1)*C/G)),
stride (sh, sw), padding (ph, pw), dilation (dh, dw); OH = (H + 2ph - dh*(KH-1) - 1) // sh + 1,
OW likewise; ``xp`` is x padded with +0.0 on each side; K = (C/G)*KH*KW taps k = (c, i, j) in
row-major order, tap (i, j) reading xp at (oy*sh + i*dh, ox*sw + j*dw); P = (n, oy, ox)
output positions):

* ``conv2d(x, w)``: y[n, o, oy, ox] = the serial chain over k ascending (matmul's: acc = the
  first product, then acc + product, each rounded; no FMA) of
  w[o, c, i, j] * xp[n, gi*C/G + c, oy*sh + i*dh, ox*sw + j*dw]. Padded elements are +0.0 and
  ARE multiplied (0 * inf = NaN, 0 * -1 = -0.0). Per group this is
  matmul(w_g.reshape(O/G, K), im2col(xp_g)) exactly. The bias is not part of the op:
  ``gtape.conv2d`` adds it with one broadcast ``add``.
* ``conv2d_grad_weight(g, x)``: dw[o, c, i, j] = the serial chain over the positions
  (n, oy, ox) in row-major order of g[n, o, oy, ox] * xp[n, gi*C/G + c, oy*sh + i*dh,
  ox*sw + j*dw] (padded elements multiplied too): per group matmul(g_g as (O/G, N*OH*OW),
  im2col(xp_g) transposed). No positions (N == 0): +0.0.
* ``conv2d_grad_input(g, w)``: first, per tap k and position (n, oy, ox), the serial chain
  over the group's output channels o ascending t = w[o0, k] * g[n, o0, oy, ox], then
  t + w[o, k] * g[n, o, oy, ox] (per group matmul(w_g.reshape(O/G, K).T, g_g)); then col2im:
  dx[n, c, y, x] = the serial sum over the taps (i, j) in row-major order that reach it
  (oy = (y + ph - i*dh) / sh an integer in [0, OH), ox likewise) of t[(c, i, j), (n, oy, ox)],
  the accumulator starting at the first one; an element no tap reaches is +0.0. Taps landing
  in the padding are dropped. This is also torch's ``conv_transpose2d`` (gtape's
  ``conv_transpose2d`` records this op: weight (C_in, C_out/G, KH, KW) as torch's).

The ``inner`` attr chooses the inner-product contract, as matmul's (a tape sets it from
``Tape.inner``): ``"plain"`` (above) or ``"fma"``: every chain above (conv2d's over k, the
weight gradient's over (n, oy, ox), the input gradient's per tap over o) keeps its order but
starts from acc = +0.0 and takes one fused multiply-add per term, acc = fma(a, b, acc) (the fma
matmul of the same operands). The input gradient's col2im sums over the taps stay plain adds
(the first tap starts) under both.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import dtypes
from ..kernels import Kernel, Kind, params
from .elementwise import ADD, MUL
from .forms import BLOCK, CONV, ELEMENT_COST, grid_for
from .inner import (
    FMA_INTRINSIC,
    FMA_KERNELS,
    INNER,
    check_inner,
    cpu_product,
    cpu_scratch,
    serial_matmul,
)
from .registry import Op, register

ONE = (1, 1)


def pair(op: str, arg: str, value, minimum: int) -> tuple[int, int]:
    """An int or (h, w) pair of ints, each >= ``minimum``; TypeError / ValueError naming them."""
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    ok = len(vals) == 2 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                for v in vals)
    if not ok:
        raise TypeError(f"{op}: {arg} is {value!r}; expected an int or a pair (h, w) of ints")
    if any(v < minimum for v in vals):
        raise ValueError(f"{op}: {arg} is {value!r}; expected values >= {minimum}")
    return int(vals[0]), int(vals[1])


def check_4d(op: str, arg: str, shape: tuple, what: str) -> None:
    """ValueError unless ``shape`` is 4-D (``what`` names the axes)."""
    if len(shape) != 4:
        raise ValueError(f"{op}: {arg} has shape {tuple(shape)}; expected a 4-D array {what}")


def span(kernel: tuple, dilation: tuple) -> tuple[int, int]:
    """The extent of a dilated kernel: d*(k - 1) + 1 per axis."""
    return (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)


def out_size(op: str, size: tuple, kernel: tuple, stride: tuple, padding: tuple,
             dilation: tuple = ONE) -> tuple:
    """(OH, OW) of a window of ``kernel`` (dilated by ``dilation``) sliding over ``size``
    padded by ``padding``."""
    padded = (size[0] + 2 * padding[0], size[1] + 2 * padding[1])
    ext = span(kernel, dilation)
    if ext[0] > padded[0] or ext[1] > padded[1]:
        what = f"kernel {kernel}" if dilation == ONE else \
            f"kernel {kernel} dilated by {dilation} (extent {ext})"
        raise ValueError(f"{op}: {what} is larger than the padded input {padded} "
                         f"(input {tuple(size)}, padding {padding}); expected kernel <= "
                         "input + 2 * padding on both axes")
    return ((padded[0] - ext[0]) // stride[0] + 1, (padded[1] - ext[1]) // stride[1] + 1)


def _positive(op: str, arg: str, shape: tuple, axes: tuple) -> None:
    bad = [a for a in axes if shape[a] < 1]
    if bad:
        raise ValueError(f"{op}: {arg} has shape {tuple(shape)}; expected sizes >= 1 on axes "
                         f"{axes}")


def groups_of(op: str, value, channels: dict[str, int]) -> int:
    """``groups``: an int >= 1 dividing every count in ``channels`` ({what: count})."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: groups is {value!r}; expected an int >= 1")
    if value < 1:
        raise ValueError(f"{op}: groups is {value!r}; expected an int >= 1")
    bad = {k: v for k, v in channels.items() if v % value}
    if bad:
        said = ", ".join(f"{k} {v}" for k, v in bad.items())
        raise ValueError(f"{op}: groups is {value}, which does not divide the {said}; "
                         "expected groups dividing both the input and the output channels")
    return int(value)


def _attrs(op: str, attrs: dict) -> dict:
    """stride, padding, dilation and inner, normalized (groups is checked by the caller)."""
    check_inner(op, attrs)
    return {"stride": pair(op, "stride", attrs.get("stride", 1), 1),
            "padding": pair(op, "padding", attrs.get("padding", 0), 0),
            "dilation": pair(op, "dilation", attrs.get("dilation", 1), 1),
            "inner": attrs.get("inner", "plain")}


# --------------------------------------------------------------------------- numpy
def _padded(x: np.ndarray, padding: tuple) -> np.ndarray:
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))  # +0.0


def im2col(x: np.ndarray, kernel: tuple, stride: tuple, padding: tuple,
           dilation: tuple = ONE) -> np.ndarray:
    """(C*KH*KW, N, OH, OW): row (c, i, j) holds xp[n, c, oy*sh + i*dh, ox*sw + j*dw]."""
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    oh, ow = out_size("im2col", (h, w), kernel, stride, padding, dilation)
    xp = _padded(x, padding)
    cols = np.empty((c, kh, kw, n, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                               j * dw:j * dw + sw * (ow - 1) + 1:sw].transpose(1, 0, 2, 3)
    return cols.reshape(c * kh * kw, n, oh, ow)


def _grouped_cols(x: np.ndarray, groups: int, kernel: tuple, stride: tuple, padding: tuple,
                  dilation: tuple) -> np.ndarray:
    """(G, K, N*OH*OW): each group's im2col (its input channels only), and (N, OH, OW)."""
    cg = x.shape[1] // groups
    cols = [im2col(x[:, gi * cg:(gi + 1) * cg], kernel, stride, padding, dilation)
            for gi in range(groups)]
    k, n, oh, ow = cols[0].shape
    return np.stack(cols).reshape(groups, k, n * oh * ow), (n, oh, ow)


def _conv_ref(x, w, *, stride, padding, dilation=ONE, groups=1, inner="plain"):
    o = w.shape[0]
    cols, (n, oh, ow) = _grouped_cols(x, groups, w.shape[2:], stride, padding, dilation)
    wg = w.reshape(groups, o // groups, -1)
    y = serial_matmul(wg, cols, inner)  # (G, O/G, N*OH*OW)
    return np.ascontiguousarray(y.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))


def _grad_weight_ref(g, x, *, stride, padding, kernel, dilation=ONE, groups=1, inner="plain"):
    n, o, oh, ow = g.shape
    cols, _ = _grouped_cols(x, groups, kernel, stride, padding, dilation)
    gm = g.transpose(1, 0, 2, 3).reshape(groups, o // groups, n * oh * ow)
    dw = serial_matmul(gm, cols.transpose(0, 2, 1), inner)  # (G, O/G, K)
    return np.ascontiguousarray(dw.reshape((o, x.shape[1] // groups) + tuple(kernel)))


def col2im(t: np.ndarray, shape: tuple, kernel: tuple, stride: tuple, padding: tuple,
           dilation: tuple = ONE) -> np.ndarray:
    """x of ``shape`` (N, C, H, W): per element the serial sum over taps (i, j) row-major of
    t[(c, i, j), n, oy, ox] reaching it (first term starts; none: +0.0); padding dropped."""
    n, c, h, w = shape
    kh, kw = kernel
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    _, _, oh, ow = t.shape
    t6 = t.reshape(c, kh, kw, n, oh, ow)
    acc = np.zeros((n, c, h + 2 * ph, w + 2 * pw), t.dtype)
    seen = np.zeros(acc.shape, bool)
    with np.errstate(all="ignore"):
        for i in range(kh):
            for j in range(kw):
                at = (slice(None), slice(None), slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
                      slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))
                v = t6[:, i, j].transpose(1, 0, 2, 3)
                acc[at] = np.where(seen[at], acc[at] + v, v)
                seen[at] = True
    out = acc[:, :, ph:ph + h, pw:pw + w]
    return np.ascontiguousarray(np.where(seen[:, :, ph:ph + h, pw:pw + w], out,
                                         t.dtype.type(0.0)))


def _grad_input_ref(g, w, *, stride, padding, size, dilation=ONE, groups=1, inner="plain"):
    n, o, oh, ow = g.shape
    _, cg, kh, kw = w.shape
    k = cg * kh * kw
    og = o // groups
    gm = g.transpose(1, 0, 2, 3).reshape(groups, og, n * oh * ow)
    t = serial_matmul(w.reshape(groups, og, k).transpose(0, 2, 1), gm, inner)  # (G, K, P)
    return np.concatenate(
        [col2im(t[gi].reshape(k, n, oh, ow), (n, cg) + tuple(size), (kh, kw), stride, padding,
                dilation) for gi in range(groups)], axis=1)


# --------------------------------------------------------------------------- shape rules
def _conv_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, w = shapes_
    op = "conv2d"
    check_4d(op, "x", x, "(N, C, H, W)")
    check_4d(op, "w", w, "(O, C/groups, KH, KW)")
    _positive(op, "x", x, (1, 2, 3))
    _positive(op, "w", w, (0, 1, 2, 3))
    groups = groups_of(op, attrs.get("groups", 1), {"input channels": x[1],
                                                    "output channels": w[0]})
    if x[1] != w[1] * groups:
        raise ValueError(f"{op}: x has {x[1]} channels (shape {tuple(x)}) but w expects "
                         f"{w[1] * groups} (shape {tuple(w)}, groups {groups}); expected "
                         "x.shape[1] == w.shape[1] * groups")
    norm = _attrs(op, attrs)
    oh, ow = out_size(op, x[2:], w[2:], norm["stride"], norm["padding"], norm["dilation"])
    return (x[0], w[0], oh, ow), {**norm, "groups": groups}


def _grad_weight_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    g, x = shapes_
    op = "conv2d_grad_weight"
    check_4d(op, "g", g, "(N, O, OH, OW)")
    check_4d(op, "x", x, "(N, C, H, W)")
    _positive(op, "g", g, (1, 2, 3))
    _positive(op, "x", x, (1, 2, 3))
    norm = _attrs(op, attrs)
    groups = groups_of(op, attrs.get("groups", 1), {"input channels": x[1],
                                                    "output channels": g[1]})
    kernel = pair(op, "kernel", attrs["kernel"], 1)
    want = (x[0],) + out_size(op, x[2:], kernel, norm["stride"], norm["padding"],
                              norm["dilation"])
    if (g[0], g[2], g[3]) != want:
        raise ValueError(f"{op}: g has shape {tuple(g)}; expected (N, O, OH, OW) with "
                         f"(N, OH, OW) = {want} for x {tuple(x)}")
    return (g[1], x[1] // groups) + kernel, {**norm, "kernel": kernel, "groups": groups}


def _grad_input_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    g, w = shapes_
    op = "conv2d_grad_input"
    check_4d(op, "g", g, "(N, O, OH, OW)")
    check_4d(op, "w", w, "(O, C/groups, KH, KW)")
    _positive(op, "w", w, (0, 1, 2, 3))
    norm = _attrs(op, attrs)
    groups = groups_of(op, attrs.get("groups", 1), {"output channels": w[0]})
    size = pair(op, "size", attrs["size"], 1)
    want = (w[0],) + out_size(op, size, w[2:], norm["stride"], norm["padding"],
                              norm["dilation"])
    if (g[1], g[2], g[3]) != want:
        raise ValueError(f"{op}: g has shape {tuple(g)}; expected (N, O, OH, OW) with "
                         f"(O, OH, OW) = {want} for w {tuple(w)} and size {size}")
    return (g[0], w[1] * groups) + size, {**norm, "size": size, "groups": groups}


# --------------------------------------------------------------------------- kernels
# geom = [N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, G]: C and O count every
# channel; a group has Cg = C / G input and Og = O / G output channels
_GEOM = "long long n, const long long* geom"
_DECODE = """\
    const long long N = geom[0], C = geom[1], H = geom[2], W = geom[3], O = geom[4],
                    KH = geom[5], KW = geom[6], OH = geom[7], OW = geom[8], sh = geom[9],
                    sw = geom[10], ph = geom[11], pw = geom[12], dil_h = geom[13],
                    dil_w = geom[14], G = geom[15], Cg = C / G, Og = O / G;
    (void)N; (void)O; (void)Og;
"""
_GRID = _DECODE + """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {
$ONE    }"""

_CONV_ONE = """\
        const long long ox = e % OW, oy = (e / OW) % OH, oc = (e / (OW * OH)) % O,
                        nn = e / (OW * OH * O);
        const $T* xg = x + (nn * C + (oc / Og) * Cg) * H * W;
        const $T* wo = w + oc * Cg * KH * KW;
        $T acc = ($T)0;
        long long k = 0;
        for (long long c = 0; c < Cg; ++c)
            for (long long i = 0; i < KH; ++i)
                for (long long j = 0; j < KW; ++j, ++k) {
                    const long long yy = oy * sh + i * dil_h - ph, xx = ox * sw + j * dil_w - pw;
                    const $T xv = (yy >= 0 && yy < H && xx >= 0 && xx < W)
                                      ? xg[(c * H + yy) * W + xx] : ($T)0;
$STEP                }
        y[e] = acc;
"""
_GRAD_WEIGHT_ONE = """\
        const long long j = e % KW, i = (e / KW) % KH, c = (e / (KW * KH)) % Cg,
                        oc = e / (KW * KH * Cg);
        const long long xc = (oc / Og) * Cg + c;
        $T acc = ($T)0;
$INIT        for (long long nn = 0; nn < N; ++nn)
            for (long long oy = 0; oy < OH; ++oy)
                for (long long ox = 0; ox < OW; ++ox) {
                    const long long yy = oy * sh + i * dil_h - ph, xx = ox * sw + j * dil_w - pw;
                    const $T xv = (yy >= 0 && yy < H && xx >= 0 && xx < W)
                                      ? x[((nn * C + xc) * H + yy) * W + xx] : ($T)0;
$STEP                }
        y[e] = acc;
"""
_GRAD_INPUT_ONE = """\
        const long long xx = e % W, yy = (e / W) % H, c = (e / (W * H)) % C,
                        nn = e / (W * H * C);
        const long long cl = c % Cg, o0 = (c / Cg) * Og;
        $T acc = ($T)0;
        bool first = true;
        for (long long i = 0; i < KH; ++i) {
            const long long ty = yy + ph - i * dil_h;
            if (ty < 0 || ty % sh != 0 || ty / sh >= OH) continue;
            const long long oy = ty / sh;
            for (long long j = 0; j < KW; ++j) {
                const long long tx = xx + pw - j * dil_w;
                if (tx < 0 || tx % sw != 0 || tx / sw >= OW) continue;
                const long long ox = tx / sw, k = (cl * KH + i) * KW + j;
                const long long gp = ((nn * O + o0) * OH + oy) * OW + ox, gs = OH * OW;
$STEP                acc = first ? t : $ADD(acc, t);
                first = false;
            }
        }
        y[e] = acc;
"""

# Each output's chain step per contract (``$STEP`` of the bodies above; ``$INIT`` declares
# what the plain step needs): plain, the first product starts and each product and sum is
# rounded (MUL, ADD); fma, acc (t) starts at +0.0 and takes one fused multiply-add per term
# (__fma_rn / __fmaf_rn, as linalg's gt_dot_fma). The input gradient's sum over the taps is
# ADD under both.
_STEPS = {
    "conv2d": {
        "plain": ("", """\
                    const $T p = $MUL(wo[k], xv);
                    acc = k == 0 ? p : $ADD(acc, p);
"""),
        "fma": ("", """\
                    acc = $FMA(wo[k], xv, acc);
""")},
    "conv2d_grad_weight": {
        "plain": ("        bool first = true;\n", """\
                    const $T p = $MUL(g[((nn * O + oc) * OH + oy) * OW + ox], xv);
                    acc = first ? p : $ADD(acc, p);
                    first = false;
"""),
        "fma": ("", """\
                    acc = $FMA(g[((nn * O + oc) * OH + oy) * OW + ox], xv, acc);
""")},
    "conv2d_grad_input": {
        "plain": ("", """\
                $T t = $MUL(w[o0 * Cg * KH * KW + k], g[gp]);
                for (long long q = 1; q < Og; ++q)
                    t = $ADD(t, $MUL(w[(o0 + q) * Cg * KH * KW + k], g[gp + q * gs]));
"""),
        "fma": ("", """\
                $T t = ($T)0;
                for (long long q = 0; q < Og; ++q)
                    t = $FMA(w[(o0 + q) * Cg * KH * KW + k], g[gp + q * gs], t);
""")},
}

# cpu: each image's group is copied once into a padded buffer (+0.0 borders), its im2col
# rows made from it, then the products below run every output's chain in the defined order.
_COPY_ROW = """\
    // o[0..n) = s[0, st, 2 st, ..]: when st is 1 native-width vector moves, then one move
    // each of 32 and 16 bytes where they fit (a row of 8x8 images' 8 values: one move); when
    // st is 2 four values at a time by a shuffle of two loads (xp has XP_SLACK values after
    // its end for the last one); then one value at a time (the empty asm on the index keeps
    // the compiler from turning the loops into memcpy calls, a call per row costing more than
    // the row, without the memory barrier that made every row reload the kernel's geometry)
    // o[0..4) = s[0, 2, 4, 6]: the even lanes of two 4-value loads (reads s[7])
    auto even4 = [](T* __restrict__ o, const T* __restrict__ s) {
        typedef typename gtcpu::Vec<T, 4>::type V;
        typedef typename std::conditional<sizeof(T) == 8, long long, int>::type I;
        typedef I M __attribute__((vector_size(4 * sizeof(T))));
        const M even = {0, 2, 4, 6};
        gtcpu::vstore(o, __builtin_shuffle(gtcpu::vload<V>(s), gtcpu::vload<V>(s + 4), even));
    };
    auto copy_row = [=](T* __restrict__ o, const T* __restrict__ s, long long n, long long st) {
        constexpr long long LW = gtcpu::VEC_BYTES / sizeof(T), L4 = 32 / sizeof(T),
                            L2 = 16 / sizeof(T);
        typedef typename gtcpu::Vec<T, LW>::type VW;
        typedef typename gtcpu::Vec<T, L4>::type V4;
        typedef typename gtcpu::Vec<T, L2>::type V2;
        long long i = 0;
        if (st == 1) {
            for (; i + LW <= n; i += LW) {
                gtcpu::vstore(o + i, gtcpu::vload<VW>(s + i));
                asm("" : "+r"(i));
            }
            if (L4 < LW && i + L4 <= n) {
                gtcpu::vstore(o + i, gtcpu::vload<V4>(s + i));
                i += L4;
            }
            if (L2 < L4 && i + L2 <= n) {
                gtcpu::vstore(o + i, gtcpu::vload<V2>(s + i));
                i += L2;
            }
        }
        if (st == 2)  // reads s[2 i + 7]: one past the last value used
            for (; i + 4 <= n; i += 4) {
                even4(o + i, s + 2 * i);
                asm("" : "+r"(i));
            }
        for (; i < n; ++i) {
            o[i] = s[i * st];
            asm("" : "+r"(i));
        }
    };
"""
_IM2COL = """\
    // The im2col matrix's rows: for tap k = (c, i, j) and position p = (oy, ox) of one image's
    // group, xp[c, oy*sh + i*dh, ox*sw + j*dw] of the padded image (xp: the group's channels
    // copied once into a buffer of (H + 2 ph) x (W + 2 pw), borders +0.0): no bounds test per
    // element, and no library call per row (at 4x4 and 8x8 images a memcpy call per row costs
    // more than the copy)
    const long long Hp = H + 2 * ph, Wp = W + 2 * pw, XP_SLACK = 8;
    constexpr long long PANEL_W = 2 * gtcpu::VEC_BYTES / sizeof(T);  // the product's PW
    // xp = the group's channels of one image (xn), padded with +0.0
    auto pad_image = [=](const T* __restrict__ xn, T* __restrict__ xp) {
        for (long long q = 0; q < Cg * Hp * Wp; ++q) xp[q] = (T)0;
        for (long long c = 0; c < Cg; ++c)
            for (long long yy = 0; yy < H; ++yy)
                copy_row(xp + (c * Hp + yy + ph) * Wp + pw, xn + (c * H + yy) * W, W, 1);
    };
    // tap (c, i, j)'s rows of one padded image xp: out[oy * OW + ox] = xp[c, oy*sh + i*dh,
    // ox*sw + j*dw], a row by row_move
    auto tap_image = [=](auto bytes_, T* __restrict__ out, const T* __restrict__ xp,
                         long long c, long long i, long long j) {
        const T* src = xp + (c * Hp + i * dil_h) * Wp + j * dil_w;
        for (long long oy = 0; oy < OH; ++oy)
            row_move(bytes_, out + oy * OW, src + oy * sh * Wp, OW, sw);
    };
"""
# The forward's product takes b's panels from ``pack_cols`` (the product's ``pack`` hook): a
# panel's PANEL_W columns of the chunk's im2col matrix, made from the padded images when the
# product first uses it, into a buffer that stays in L1 (the whole im2col matrix of a chunk,
# written first and read back, went through L2: its copies cost as much as the product).
# xps: the chunk's padded images, XPS values apart.
_PACK_COLS = """\
    // every tap's copy of one run of len values at stride sw (row_move: by_width's B):
    // o[kk * PANEL_W ..] from s + the tap's offset
    auto tap_rows = [=](auto bytes_, T* __restrict__ o, const T* __restrict__ s,
                        long long len) {
        long long kk = 0;
        for (long long c = 0; c < Cg; ++c)
            for (long long i = 0; i < KH; ++i) {
                const T* sr = s + (c * Hp + i * dil_h) * Wp;
                for (long long j = 0; j < KW; ++j, ++kk)
                    row_move(bytes_, o + kk * PANEL_W, sr + j * dil_w, len, sw);
            }
    };
    const long long XPS = Cg * Hp * Wp + XP_SLACK;
    auto pack_cols = [=](const T* xps, T* __restrict__ panel, long long j0, long long w) {
        for (long long jj = 0, q = j0; jj < w;) {  // runs of one (image, output row)
            const long long u = q / P, ox = q % P % OW, oy = q % P / OW;
            const long long len = OW - ox < w - jj ? OW - ox : w - jj;
            const T* s = xps + u * XPS + oy * sh * Wp + ox * sw;
            by_width(len, sw, [&](auto bytes_) { tap_rows(bytes_, panel + jj, s, len); });
            jj += len;
            q += len;
        }
        if (w < PANEL_W)
            for (long long kk = 0; kk < K; ++kk)
                for (long long jj = w; jj < PANEL_W; ++jj) panel[kk * PANEL_W + jj] = (T)0;
    };
"""
# The products run by ``product`` (``inner.cpu_product``): the cpu matmul kernel's own body --
# its register tiles, packed panels, k blocks and thread split -- on slices, so each output's
# chain over k keeps its order (the first product starts, each product and sum rounded, no
# FMA; under the fma contract one fused multiply-add per term from +0.0) at the matmul's
# speed. The forward and the input gradient take the images in chunks of NB, enough for a
# product of at least CHUNK_COLS positions (one image when it has as many) but no more than
# an even share of the images per thread: small images (8x8, 4x4) then make a few wide
# products instead of many narrow ones. Chunks split across threads when there are at least
# as many as threads (each chunk's copies and product then run on its thread), else each
# product splits its own panels or rows.
# scratch(slot, n): n values of one of the calling thread's buffers, kept between calls (grown
# when short): a fresh allocation of a few MB is new pages every call, whose first touches
# cost as much as a small conv's copies
_SCRATCH = cpu_scratch(4)
# f(Int<B>{}): B the bytes of a run of len values at stride st when st is 1 and one vector
# move of 16, 32 or 64 bytes holds it exactly (8x8 and 4x4 images' rows: constant-size
# moves and adds, no loop); B = -1 for 4 values at stride 2 (a stride-2 conv's 4x4 output
# rows: one shuffle of two loads); else B = 0 (the caller's general loop). row_move(B, o, s,
# len, st) copies such a run.
_BY_WIDTH = """\
    auto by_width = [](long long len, long long st, auto f) {
        const long long bytes = st == 1 ? len * (long long)sizeof(T) : 0;
        if (bytes == 64)
            f(gtcpu::Int<64>{});
        else if (bytes == 32)
            f(gtcpu::Int<32>{});
        else if (bytes == 16)
            f(gtcpu::Int<16>{});
        else if (st == 2 && len == 4)
            f(gtcpu::Int<-1>{});
        else
            f(gtcpu::Int<0>{});
    };
    auto row_move = [=](auto bytes_, T* __restrict__ o, const T* __restrict__ s, long long len,
                        long long st) {
        constexpr int B = decltype(bytes_)::value;
        if constexpr (B > 0) {
            typedef typename gtcpu::Vec<T, B / sizeof(T)>::type V;
            gtcpu::vstore(o, gtcpu::vload<V>(s));
        } else if constexpr (B == -1) {
            even4(o, s);
        } else {
            copy_row(o, s, len, st);
        }
    };
"""
_CHUNKS = """\
    const long long CHUNK_COLS = 512;
    const long long threads = gtcpu::thread_count(), spread = (N + threads - 1) / threads;
    const long long per = (CHUNK_COLS + P - 1) / (P > 0 ? P : 1);
    const long long NB = P >= CHUNK_COLS ? 1 : per < spread ? per : (spread > 0 ? spread : 1);
    const long long chunks = (N + NB - 1) / NB;
    const bool outer = chunks >= threads;
"""
_CPU_CONV = Template(_DECODE + """\
    typedef $T T;
    const long long P = OH * OW, K = Cg * KH * KW;
$ROWS$IM2COL$PACK_COLS$PRODUCT$SCRATCH$CHUNKS
    // per chunk and group: the chunk's images padded (xps); yb (Og x Q) = w[group] (Og x K)
    // @ cols (K x Q, Q = nb * P: the chunk's im2col matrices side by side, made a panel at
    // a time by pack_cols), copied into y[n, group] (one image: the product writes y)
    auto run = [=](long long lo, long long hi) {
        T* yb = scratch(1, Og * NB * P);
        T* xps = scratch(2, NB * XPS);
        for (long long ch = lo; ch < hi; ++ch) {
            const long long n0 = ch * NB, nb = n0 + NB <= N ? NB : N - n0, Q = nb * P;
            for (long long gi = 0; gi < G; ++gi) {
                for (long long u = 0; u < nb; ++u)
                    pad_image(x + ((n0 + u) * C + gi * Cg) * H * W, xps + u * XPS);
                T* dst = nb == 1 ? y + (n0 * O + gi * Og) * P : yb;
                auto pack = [=](T* panel, long long j0, long long w) {
                    pack_cols(xps, panel, j0, w);
                };
                product(w + gi * Og * K, nullptr, dst, 1, Og, K, Q, gtcpu::Int<0>{}, 0, outer,
                        pack);
                if (nb > 1)
                    for (long long u = 0; u < nb; ++u)
                        for (long long q = 0; q < Og; ++q)
                            copy_row(y + ((n0 + u) * O + gi * Og + q) * P, yb + q * Q + u * P,
                                     P, 1);
            }
        }
    };
    if (outer)
        gtcpu::parallel_for(chunks, NB * (O * K * P + C * KH * KW * P), run);
    else
        run(0, chunks);""")
_CPU_GRAD_WEIGHT = Template(_DECODE + """\
    typedef $T T;
    const long long P = OH * OW, K = Cg * KH * KW, Q = N * P;
$ROWS$IM2COL$PRODUCT$SCRATCH
    if (Q == 0) {
        for (long long e = 0; e < n; ++e) y[e] = (T)0;
        return;
    }
    // One group at a time. First, per image (across threads): its channels padded (xps, the
    // calling thread's buffer, XPS values an image) and g's rows transposed into gt[q][o] =
    // g[nn, group's o, p] (q = (nn, p)). Then each thread its share of the taps t0..t1: their
    // rows of the im2col matrix over every position (cols[t][q], in the thread's own buffer:
    // written and read in its L2, where rows written by the other thread came through L3)
    // and dw[group]^T's rows (t1 - t0 x Og) = cols @ gt (Q x Og), one product whose one panel
    // its pack hook makes from gt (where tb gathered g's rows in every thread); dw^T copied
    // out transposed. Each weight's chain over the positions (n, oy, ox) in row-major order (a
    // product of two numbers is one rounding whichever comes first, as is a fused
    // multiply-add). The rows of cols and gt are QS = Q + Z long: a row of Q values whose
    // bytes are a multiple of 512 (8 images of 8x8, 32 of 4x4) would put a tile's rows of cols
    // in a few sets of the 8-way L1, evicting each other every few k-steps, so such rows get a
    // cache line more: Z terms closing every chain with (-0.0) * (+0.0) (cols' -0.0, gt's
    // +0.0), and x + (-0.0) is x for every x (-0.0, +0.0 and NaN included), as is
    // a fused multiply-add of -0.0, +0.0 and x: each chain's value is its Q terms' to the bit.
    const long long Z = (Q * (long long)sizeof(T)) % 512 == 0 ? 64 / (long long)sizeof(T) : 0;
    const long long QS = Q + Z, XPS = Cg * Hp * Wp + XP_SLACK;
    // a multiply-add weighs as in the product (64 / its lanes units)
    const long long UNIT = 64 / (gtcpu::VEC_BYTES / (long long)sizeof(T));
    T* xps = scratch(2, N * XPS);
    T* gt = scratch(1, QS * Og);
    T* dwt = scratch(3, K * Og);
    for (long long q = Q * Og; q < QS * Og; ++q) gt[q] = (T)0;
    for (long long gi = 0; gi < G; ++gi) {
        // an image's copies weigh a map element's units a value (forms.ELEMENT_COST)
        gtcpu::parallel_for(N, $COPY_COST * (Cg * Hp * Wp + Og * P),
                            [=](long long lo, long long hi) {
            for (long long nn = lo; nn < hi; ++nn) {
                pad_image(x + (nn * C + gi * Cg) * H * W, xps + nn * XPS);
                const T* gn = g + (nn * O + gi * Og) * P;
                for (long long p = 0; p < P; ++p)
                    for (long long o = 0; o < Og; ++o) gt[(nn * P + p) * Og + o] = gn[o * P + p];
            }
        });
        // gt's one panel (Og <= PANEL_W: the conv's few output channels), or its panels
        auto pack = [=](T* __restrict__ panel, long long j0, long long w) {
            for (long long q = 0; q < QS; ++q) {
                copy_row(panel + q * PANEL_W, gt + q * Og + j0, w, 1);
                for (long long o = w; o < PANEL_W; ++o) panel[q * PANEL_W + o] = (T)0;
            }
        };
        gtcpu::parallel_for(K, Q * $COPY_COST + QS * Og * UNIT, [=](long long t0, long long t1) {
            T* cols = scratch(0, (t1 - t0) * QS);
            by_width(OW, sw, [&](auto bytes_) {
                for (long long t = t0; t < t1; ++t) {
                    T* ct = cols + (t - t0) * QS;
                    for (long long q = Q; q < QS; ++q) ct[q] = (T)-0.0;
                    for (long long nn = 0; nn < N; ++nn)
                        tap_image(bytes_, ct + nn * P, xps + nn * XPS, t / (KH * KW),
                                  t / KW % KH, t % KW);
                }
            });
            product(cols, nullptr, dwt + t0 * Og, 1, t1 - t0, QS, Og, gtcpu::Int<0>{}, 0, true,
                    pack);
        });
        for (long long q = 0; q < Og; ++q)
            for (long long k = 0; k < K; ++k) y[(gi * Og + q) * K + k] = dwt[k * Og + q];
    }
""")
_CPU_GRAD_INPUT = Template(_DECODE + """\
    typedef $T T;
    const long long P = OH * OW, K = Cg * KH * KW;
$ROWS$PRODUCT$SCRATCH$CHUNKS
    const long long Hp = H + 2 * ph, Wp = W + 2 * pw, DPS = Cg * Hp * Wp;
    // reached[yy * W + xx]: some tap (i, j) and position (oy, ox) read x[.., yy, xx] (the
    // same for every channel and image)
    char* reached = new char[H * W];
    for (long long q = 0; q < H * W; ++q) reached[q] = 0;
    for (long long i = 0; i < KH; ++i)
        for (long long j = 0; j < KW; ++j)
            for (long long oy = 0; oy < OH; ++oy) {
                const long long yy = oy * sh + i * dil_h - ph;
                if (yy < 0 || yy >= H) continue;
                for (long long ox = 0; ox < OW; ++ox) {
                    const long long xx = ox * sw + j * dil_w - pw;
                    if (xx >= 0 && xx < W) reached[yy * W + xx] = 1;
                }
            }
    bool every = true;  // every position reached: the interior copied as it is
    for (long long q = 0; q < H * W; ++q) every = every && reached[q];
    // per chunk and group: gb (Og x Q), Q = nb * P, the chunk's g[n, group] side by side
    // (one image: g itself), t (K x Q) = w[group]^T (K x Og) @ gb: serial over o; then
    // col2im per image from its columns of t
    auto run = [=](long long lo, long long hi) {
        T* t = scratch(0, K * NB * P);
        T* gb = scratch(1, Og * NB * P);
        T* dp = scratch(2, NB * DPS);
        for (long long ch = lo; ch < hi; ++ch) {
            const long long n0 = ch * NB, nb = n0 + NB <= N ? NB : N - n0, Q = nb * P;
            for (long long gi = 0; gi < G; ++gi) {
                const T* src = g + (n0 * O + gi * Og) * P;
                if (nb > 1) {
                    for (long long u = 0; u < nb; ++u)
                        for (long long q = 0; q < Og; ++q)
                            std::memcpy(gb + q * Q + u * P, g + ((n0 + u) * O + gi * Og + q) * P,
                                        (size_t)P * sizeof(T));
                    src = gb;
                }
                product(w + gi * Og * K, src, t, 1, K, Og, Q, gtcpu::Int<1>{}, 0, outer,
                        gtcpu::NoPack{});
                // col2im into the padded images dp (one per image of the chunk, (H + 2 ph) x
                // (W + 2 pw) per channel, DPS values apart), every element starting at -0.0 (the
                // exact identity of +: -0.0 + v is v for every v, -0.0 included, so the sum
                // equals the one the first reaching tap starts): taps (c, i, j) in row-major
                // order, each adding its row of t into every image (an image's rows between a
                // tap's and the next's, whose rows overlap them shifted: a read of a row just
                // written shifted waits for the write to retire); then the interiors copied
                // out, +0.0 where no tap reaches
                for (long long q = 0; q < nb * DPS; ++q) dp[q] = (T)-0.0;
                by_width(OW, sw, [&](auto bytes_) {
                    constexpr int B = decltype(bytes_)::value;
                    // tap k = (c, i, j)'s rows of t added into image u's dp
                    auto tap = [&](long long u, long long k, long long c, long long i,
                                   long long j) {
                        T* dst = dp + u * DPS + (c * Hp + i * dil_h) * Wp + j * dil_w;
                        const T* tk = t + u * P + k * Q;
                        for (long long oy = 0; oy < OH; ++oy) {
                            T* dr = dst + oy * sh * Wp;
                            const T* tr = tk + oy * OW;
                            if constexpr (B > 0) {  // lane by lane the same adds
                                typedef typename gtcpu::Vec<T, B / sizeof(T)>::type V;
                                gtcpu::vstore(dr, gtcpu::vload<V>(dr) + gtcpu::vload<V>(tr));
                            } else {
                                for (long long ox = 0; ox < OW; ++ox)
                                    dr[ox * sw] = dr[ox * sw] + tr[ox];
                            }
                        }
                    };
                    // whole rows by vectors: the images inside the taps (the shifted rows far
                    // apart); else one image at a time (its dp stays in L1)
                    for (long long u = 0; u < (B > 0 ? 1 : nb); ++u) {
                        long long k = 0;
                        for (long long c = 0; c < Cg; ++c)
                            for (long long i = 0; i < KH; ++i)
                                for (long long j = 0; j < KW; ++j, ++k)
                                    if (B > 0)
                                        for (long long v = 0; v < nb; ++v) tap(v, k, c, i, j);
                                    else
                                        tap(u, k, c, i, j);
                    }
                });
                for (long long u = 0; u < nb; ++u) {
                    T* dx = y + ((n0 + u) * C + gi * Cg) * H * W;
                    for (long long c = 0; c < Cg; ++c)
                        for (long long yy = 0; yy < H; ++yy) {
                            const T* src = dp + u * DPS + (c * Hp + yy + ph) * Wp + pw;
                            const char* rr = reached + yy * W;
                            T* dst = dx + (c * H + yy) * W;
                            if (every)
                                copy_row(dst, src, W, 1);
                            else
                                for (long long xx = 0; xx < W; ++xx)
                                    dst[xx] = rr[xx] ? src[xx] : (T)0;
                        }
                }
            }
        }
    };
    if (outer)
        gtcpu::parallel_for(chunks, NB * (O * K * P + C * KH * KW * P), run);
    else
        run(0, chunks);
    delete[] reached;""")

_FORWARD = ("conv2d", "const $T* x, const $T* w", _CONV_ONE, _CPU_CONV)
_WEIGHT = ("conv2d_grad_weight", "const $T* g, const $T* x", _GRAD_WEIGHT_ONE, _CPU_GRAD_WEIGHT)
_INPUT = ("conv2d_grad_input", "const $T* g, const $T* w", _GRAD_INPUT_ONE, _CPU_GRAD_INPUT)


def kernel_base(op: str, inner: str) -> str:
    """The base name of conv op ``op``'s kernel of contract ``inner`` (its KernelSet key)."""
    return op if inner == "plain" else f"{op}_{inner}"


FMA_KERNELS.update(ft.kernel(kernel_base(spec[0], "fma")) for spec in (_FORWARD, _WEIGHT, _INPUT)
                   for ft in dtypes.FLOATS)


def _kernels(spec: tuple, cpu: bool):
    name, arrays, one, cpu_body = spec

    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        sig = params(Template(arrays).substitute(T=t) + f", {t}* y, " + _GEOM)
        out = []
        for inner in INNER:
            init, step = _STEPS[name][inner]
            if cpu:
                body = cpu_body.substitute(T=t, IM2COL=_IM2COL, ROWS=_COPY_ROW + _BY_WIDTH,
                                          PACK_COLS=_PACK_COLS,
                                          PRODUCT=cpu_product(inner),
                                          CHUNKS=_CHUNKS, SCRATCH=_SCRATCH,
                                          COPY_COST=str(ELEMENT_COST))
            else:
                text = _GRID.replace("$ONE", one.replace("$INIT", init).replace("$STEP", step))
                body = Template(text).substitute(T=t, MUL=MUL[ft].cname, ADD=ADD[ft].cname,
                                                 FMA=FMA_INTRINSIC[ft])
            # the scalar functions each contract's text calls (fma: the intrinsic, and the
            # input gradient's ADD over the taps)
            calls = ((MUL[ft], ADD[ft]) if inner == "plain"
                     else (ADD[ft],) if name == "conv2d_grad_input" else ())
            out.append(Kernel(ft.kernel(kernel_base(name, inner)), sig, body, Kind.CONV, calls,
                              CONV))
        return out

    return kernels


def _launch_with(kernel: Kernel, rt, a, b, out, x_shape, w_shape, y_shape, stride, padding,
                 dilation, groups):
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    oh, ow = y_shape[2:]
    if out.size:
        rt.launch(kernel, grid_for(out.size), BLOCK,
                  (a, b, out, out.size,
                   rt.geom((n, c, h, w, o, kh, kw, oh, ow, *stride, *padding, *dilation,
                            groups))))


def _conv_launch(rt, ks, ins, out, *, stride, padding, dilation=ONE, groups=1, inner="plain"):
    x, w = ins
    _launch_with(ks[kernel_base("conv2d", inner)], rt, x, w, out, x.shape, w.shape, out.shape,
                 stride, padding, dilation, groups)


def _grad_weight_launch(rt, ks, ins, out, *, stride, padding, kernel, dilation=ONE, groups=1,
                        inner="plain"):
    g, x = ins
    _launch_with(ks[kernel_base("conv2d_grad_weight", inner)], rt, g, x, out, x.shape,
                 out.shape, g.shape, stride, padding, dilation, groups)


def _grad_input_launch(rt, ks, ins, out, *, stride, padding, size, dilation=ONE, groups=1,
                       inner="plain"):
    g, w = ins
    _launch_with(ks[kernel_base("conv2d_grad_input", inner)], rt, g, w, out, out.shape,
                 w.shape, g.shape, stride, padding, dilation, groups)


# --------------------------------------------------------------------------- backward rules
# every backward inner product under the forward's contract (``inner`` passed on), with the
# forward's geometry (stride, padding, dilation, groups)
def _conv_vjp(be, g, ins, out, needs, stride, padding, dilation=ONE, groups=1, inner="plain"):
    x, w = ins
    geo = {"dilation": dilation, "groups": groups, "inner": inner}
    return (be.conv2d_grad_input(g, w, stride, padding, tuple(x.shape[2:]), **geo)
            if needs[0] else None,
            be.conv2d_grad_weight(g, x, stride, padding, tuple(w.shape[2:]), **geo)
            if needs[1] else None)


def _grad_input_vjp(be, g2, ins, out, needs, stride, padding, size, dilation=ONE, groups=1,
                    inner="plain"):
    # dx = T(g, w) is bilinear, the adjoint of conv2d in x: d/dg = conv2d(g2, w),
    # d/dw = conv2d_grad_weight(g, g2)
    g, w = ins
    geo = {"dilation": dilation, "groups": groups, "inner": inner}
    return (be.conv2d(g2, w, stride, padding, **geo) if needs[0] else None,
            be.conv2d_grad_weight(g, g2, stride, padding, tuple(w.shape[2:]), **geo)
            if needs[1] else None)


def _grad_weight_vjp(be, g2, ins, out, needs, stride, padding, kernel, dilation=ONE, groups=1,
                     inner="plain"):
    # dw = U(g, x) is bilinear, the adjoint of conv2d in w: d/dg = conv2d(x, g2),
    # d/dx = conv2d_grad_input(g, g2)
    g, x = ins
    geo = {"dilation": dilation, "groups": groups, "inner": inner}
    return (be.conv2d(x, g2, stride, padding, **geo) if needs[0] else None,
            be.conv2d_grad_input(g, g2, stride, padding, tuple(x.shape[2:]), **geo)
            if needs[1] else None)


_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "inner": "plain"}
register(Op("conv2d", ("x", "w"), ("stride", "padding", "dilation", "groups", "inner"),
            _conv_infer, _conv_ref, _kernels(_FORWARD, False), _conv_launch, _conv_vjp,
            "NCHW 2-D convolution (no bias; dilation, groups): per output a serial chain over "
            "its group's (c, kh, kw) row-major, padding +0.0 multiplied (inner: the plain or "
            "fma contract)", dict(_DEFAULTS), cpu=_kernels(_FORWARD, True)))
register(Op("conv2d_grad_weight", ("g", "x"),
            ("stride", "padding", "kernel", "dilation", "groups", "inner"),
            _grad_weight_infer, _grad_weight_ref, _kernels(_WEIGHT, False),
            _grad_weight_launch, _grad_weight_vjp,
            "conv2d's weight gradient: per weight a serial chain over (n, oy, ox) row-major "
            "(inner: the plain or fma contract)", dict(_DEFAULTS),
            cpu=_kernels(_WEIGHT, True)))
register(Op("conv2d_grad_input", ("g", "w"),
            ("stride", "padding", "size", "dilation", "groups", "inner"),
            _grad_input_infer, _grad_input_ref, _kernels(_INPUT, False), _grad_input_launch,
            _grad_input_vjp,
            "conv2d's input gradient (= conv_transpose2d): per tap a serial chain over the "
            "group's o, then col2im over the taps (kh, kw) row-major, plain adds (inner: the "
            "chains' plain or fma contract)", dict(_DEFAULTS), cpu=_kernels(_INPUT, True)))
