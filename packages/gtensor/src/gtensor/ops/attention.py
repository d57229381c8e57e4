"""qkv_attention: self-attention of a packed qkv, fused -- scores, mask, softmax, dropout and
the value product in one kernel -- and its backward qkv_attention_grad, also one kernel.

``qkv`` is (B, T, 3, H, D) (nanoGPT's ``c_attn`` output viewed as (B, T, 3, H, D), flash
attention's packed layout), ``key`` a Philox key (2,) int64; the result is (B, T, H, D). The
definition is the composite ``gtape.scaled_dot_product_attention`` writes, per (b, h), with
q = qkv[b, :, 0, h], k = qkv[b, :, 1, h], v = qkv[b, :, 2, h] (T x D each), S = T::

    s = matmul(q, k^T)                    # each score one serial chain over D (``inner``)
    s = s * scale                         # muls: scale rounded once to the dtype
    s = where(j <= i, s, -inf)            # causal only (torch's top-left is_causal)
    y = softmax(s, axis=-1)               # exp(s - rowmax) / serial row sum (ops.softmax)
    w = dropout(y, p, key)                # p > 0 only: the mask of the (B, H, T, T) weights,
                                          # element ((b*H + h)*T + i)*T + j (ops.dropout)
    out[b, :, h] = matmul(w, v)           # serial chains over j (``inner``)

``qkv_attention_grad(g, qkv, key)`` (g (B, T, H, D)) is the composite's backward, the gradient
of qkv through the split into q, k and v::

    gw = g @ v^T;  dv = w^T @ g           # serial chains over D, over i
    dy = dropout(gw, p, key)              # the same mask (p > 0 only)
    dz = softmax_grad(dy, y)              # y * (dy - serial sum(dy * y))
    dz = where(j <= i, dz, +0.0)          # causal only
    ds = dz * scale
    dq = ds @ k;  dk = ds^T @ q           # serial chains over j, over i
    dqkv[b, :, c, h] = d{q,k,v} + (+0.0)  # the tape's sum with the other slices' zeros

(the last step turns a -0.0 into +0.0, as the composite's gradient of qkv does). The numpy
references are the composite itself, written with the other ops' references. The CUDA kernels
(also the ``sim`` ones): the forward a thread per row (its max and sum, then its outputs'
chains, the weights recomputed from the scores as they are used); the backward a block per
(b, h), each row's max, sum and softmax_grad sum held in shared memory (the first
``ROWS_CACHED`` rows; later ones computed again where used), dq by rows, dk and dv by columns.
The cpu kernels run one (b, h) block at a time on a thread, its products with the matmul
kernel's own tiles (``inner.cpu_product``) and the row steps in the composite's order; the
backward recomputes the forward's weights (no (B, H, T, T) array is kept between the two). A
causal tile draws only the dropout words its result can read (those on or below the
diagonal; every word where a non-finite value could read one above it: ``_CPU_WEIGHTS``).
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import dtypes
from ..dtypes import FloatType, round_scalar
from ..kernels import DeviceFn, Kernel, Kind, params
from .elementwise import ADD, DIV, EXP, MAX, MUL, SUB, of
from .forms import ATTENTION, BLOCK, FIRST_STAGE_LOOP, MAX_GRID, ROW_THREADS, grid_for
from .inner import (
    DOT,
    DOT_FMA,
    FMA_INTRINSIC,
    FMA_KERNELS,
    INNER,
    check_inner,
    cpu_product,
    cpu_scratch,
    serial_matmul,
)
from .random import PHILOX, check_p, threshold
from .random import scale as drop_scale
from .registry import Op, get, register
from .softmax import exp_staged

F, IDS = dtypes.FLOAT, dtypes.INT


# --------------------------------------------------------------------------- shape rules
def _check_attrs(op: str, attrs: dict) -> dict:
    check_inner(op, attrs)
    scale = attrs["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or \
            not np.isfinite(scale):
        raise ValueError(f"{op}: scale is {scale!r}; expected a finite number")
    causal = attrs.get("causal", False)
    if type(causal) is not bool and not isinstance(causal, np.bool_):
        raise TypeError(f"{op}: causal is {causal!r}; expected a bool")
    return {"scale": float(scale), "causal": bool(causal), "p": check_p(op, attrs.get("p", 0.0)),
            "inner": attrs.get("inner", "plain")}


def _check_qkv(op: str, qkv: tuple, key: tuple) -> None:
    if len(qkv) != 5 or qkv[2] != 3:
        raise ValueError(f"{op}: qkv has shape {qkv}; expected (B, T, 3, H, D): q, k and v "
                         "packed along dim 2")
    if key != (2,):
        raise ValueError(f"{op}: key has shape {key}; expected (2,) (a Philox key)")


def _forward_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    qkv, key = shapes_
    _check_qkv("qkv_attention", qkv, key)
    b, t, _, h, d = qkv
    return (b, t, h, d), _check_attrs("qkv_attention", attrs)


def _grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    g, qkv, key = shapes_
    _check_qkv("qkv_attention_grad", qkv, key)
    b, t, _, h, d = qkv
    if g != (b, t, h, d):
        raise ValueError(f"qkv_attention_grad: g has shape {g} and qkv {qkv}; expected g "
                         f"{(b, t, h, d)}")
    return qkv, _check_attrs("qkv_attention_grad", attrs)


# --------------------------------------------------------------------------- references
def _heads(qkv: np.ndarray) -> tuple[np.ndarray, ...]:
    """q, k, v as (B, H, T, D) copies (exact)."""
    return tuple(np.ascontiguousarray(qkv[:, :, c].transpose(0, 2, 1, 3)) for c in range(3))


def _causal(t: int) -> np.ndarray:
    return np.tril(np.ones((t, t), dtype=bool))


def _weights(q, k, scale, causal, inner) -> np.ndarray:
    """softmax(where(causal, (q @ k^T) * scale, -inf)): (B, H, T, T)."""
    ft = of(q)
    s = serial_matmul(q, np.swapaxes(k, -1, -2), inner)
    s = MUL[ft].eval(s, round_scalar(scale, q.dtype))
    if causal:
        s = np.where(_causal(s.shape[-1]), s, q.dtype.type(-np.inf))
    return get("softmax").reference(s, axis=3)


def _drop(x: np.ndarray, key: np.ndarray, p: float) -> np.ndarray:
    return get("dropout").reference(x, key, p=p) if p > 0 else x


def _forward_ref(qkv, key, *, scale, causal, p, inner="plain"):
    q, k, v = _heads(qkv)
    w = _drop(_weights(q, k, scale, causal, inner), key, p)
    return np.ascontiguousarray(serial_matmul(w, v, inner).transpose(0, 2, 1, 3))


def _grad_ref(g, qkv, key, *, scale, causal, p, inner="plain"):
    ft = of(qkv)
    q, k, v = _heads(qkv)
    y = _weights(q, k, scale, causal, inner)
    w = _drop(y, key, p)
    gh = np.ascontiguousarray(g.transpose(0, 2, 1, 3))
    dy = _drop(serial_matmul(gh, np.swapaxes(v, -1, -2), inner), key, p)
    dv = serial_matmul(np.swapaxes(w, -1, -2), gh, inner)
    dz = get("softmax_grad").reference(dy, y, axis=3)
    if causal:
        dz = np.where(_causal(dz.shape[-1]), dz, qkv.dtype.type(0.0))
    ds = MUL[ft].eval(dz, round_scalar(scale, qkv.dtype))
    dq = serial_matmul(ds, k, inner)
    dk = serial_matmul(np.swapaxes(ds, -1, -2), q, inner)
    out = np.stack([z.transpose(0, 2, 1, 3) for z in (dq, dk, dv)], axis=2)
    return ADD[ft].eval(out, qkv.dtype.type(0.0))


# --------------------------------------------------------------------------- CUDA kernels
# A row's steps, written once per dtype and contract (the score's chain is the contract's).
# at(b, i, c, h): the offset of q (c 0), k (1) or v (2) of token i, head h in qkv.
_ROW = Template("""\
__device__ __forceinline__ long long gt_attn_at(long long b, long long i, long long c,
                                                long long h, long long L, long long H,
                                                long long D)
{
    return ((b * L + i) * 3 + c) * H * D + h * D;
}
// Whether weight (i, j) of (b, h) survives dropout: element ((b*H + h)*L + i)*L + j's word.
__device__ __forceinline__ bool gt_attn_keep(const long long* key, long long b, long long h,
                                             long long i, long long j, long long L,
                                             long long H, long long thr)
{
    return (long long)(gt_philox_word(key, ((b * H + h) * L + i) * L + j) >> 11) >= thr;
}
""")
_ROW_FT = Template("""\
// Score (i, j) of (b, h): the chain over D, times scale; -inf where the causal mask hides it.
__device__ __forceinline__ $T ${P}score(const $T* qkv, long long b, long long i, long long j,
                                        long long h, long long L, long long H, long long D,
                                        $T sc, long long causal)
{
    if (causal && j > i) return $NEGINF;
    return $MUL($DOT(qkv + gt_attn_at(b, i, 0, h, L, H, D), 1,
                     qkv + gt_attn_at(b, j, 1, h, L, H, D), 1, D), sc);
}
// Row i's max and the serial sum of its shifted exponentials (softmax's).
__device__ __forceinline__ void ${P}stats(const $T* qkv, long long b, long long i, long long h,
                                          long long L, long long H, long long D, $T sc,
                                          long long causal, $T* m, $T* s)
{
    $T mx = ${P}score(qkv, b, i, 0, h, L, H, D, sc, causal);
    for (long long j = 1; j < L; ++j)
        mx = $MAX(mx, ${P}score(qkv, b, i, j, h, L, H, D, sc, causal));
    $T sum = $EXP($SUB(${P}score(qkv, b, i, 0, h, L, H, D, sc, causal), mx));
    for (long long j = 1; j < L; ++j)
        sum = $ADD(sum, $EXP($SUB(${P}score(qkv, b, i, j, h, L, H, D, sc, causal), mx)));
    *m = mx;
    *s = sum;
}
// Weight (i, j) after softmax (y) and after dropout (w).
__device__ __forceinline__ $T ${P}y(const $T* qkv, long long b, long long i, long long j,
                                    long long h, long long L, long long H, long long D, $T sc,
                                    long long causal, $T m, $T s)
{
    return $DIV($EXP($SUB(${P}score(qkv, b, i, j, h, L, H, D, sc, causal), m)), s);
}
__device__ __forceinline__ $T ${P}w(const $T* qkv, const long long* key, long long b,
                                    long long i, long long j, long long h, long long L,
                                    long long H, long long D, $T sc, long long causal, $T m,
                                    $T s, long long thr, $T dsc, long long drop)
{
    const $T y = ${P}y(qkv, b, i, j, h, L, H, D, sc, causal, m, s);
    if (!drop) return y;
    return gt_attn_keep(key, b, h, i, j, L, H, thr) ? $MUL(y, dsc) : ($T)0;
}
// The gradient reaching y (i, j): g_i . v_j (a chain over D), through dropout's mask.
__device__ __forceinline__ $T ${P}dy(const $T* g, const $T* qkv, const long long* key,
                                     long long b, long long i, long long j, long long h,
                                     long long L, long long H, long long D, long long thr,
                                     $T dsc, long long drop)
{
    const $T gw = $DOT(g + ((b * L + i) * H + h) * D, 1,
                       qkv + gt_attn_at(b, j, 2, h, L, H, D), 1, D);
    if (!drop) return gw;
    return gt_attn_keep(key, b, h, i, j, L, H, thr) ? $MUL(gw, dsc) : ($T)0;
}
// softmax_grad's serial sum of row i: dy_0 * y_0, then + dy_j * y_j.
__device__ __forceinline__ $T ${P}rowd(const $T* g, const $T* qkv, const long long* key,
                                       long long b, long long i, long long h, long long L,
                                       long long H, long long D, $T sc, long long causal, $T m,
                                       $T s, long long thr, $T dsc, long long drop)
{
    $T d = ($T)0;
    for (long long j = 0; j < L; ++j) {
        const $T t = $MUL(${P}dy(g, qkv, key, b, i, j, h, L, H, D, thr, dsc, drop),
                          ${P}y(qkv, b, i, j, h, L, H, D, sc, causal, m, s));
        d = j == 0 ? t : $ADD(d, t);
    }
    return d;
}
// Row i's max, sum and d: from the block's shared values (rows < $CACHED), else computed.
__device__ __forceinline__ void ${P}row(const $T* st, const $T* g, const $T* qkv,
                                        const long long* key, long long b, long long i,
                                        long long h, long long L, long long H, long long D,
                                        $T sc, long long causal, long long thr, $T dsc,
                                        long long drop, $T* m, $T* s, $T* d)
{
    if (i < $CACHED) {
        *m = st[i];
        *s = st[$CACHED + i];
        *d = st[2 * $CACHED + i];
        return;
    }
    ${P}stats(qkv, b, i, h, L, H, D, sc, causal, m, s);
    *d = ${P}rowd(g, qkv, key, b, i, h, L, H, D, sc, causal, *m, *s, thr, dsc, drop);
}
// The score gradient (i, j): y * (dy - d), +0.0 where masked, times scale.
__device__ __forceinline__ $T ${P}ds(const $T* g, const $T* qkv, const long long* key,
                                     long long b, long long i, long long j, long long h,
                                     long long L, long long H, long long D, $T sc,
                                     long long causal, $T m, $T s, $T d, long long thr, $T dsc,
                                     long long drop)
{
    const $T z = causal && j > i ? ($T)0
        : $MUL(${P}y(qkv, b, i, j, h, L, H, D, sc, causal, m, s),
               $SUB(${P}dy(g, qkv, key, b, i, j, h, L, H, D, thr, dsc, drop), d));
    return $MUL(z, sc);
}
""")
ROW = DeviceFn("gt_attn_at", _ROW.substitute(), (PHILOX,))

# One chain step over index u (0 first) of a * bv into the output element o[e] (each output
# is one thread's, its chain in order), per contract.
_STEP = {"plain": "o[e] = u == 0 ? $MUL(a, bv) : $ADD(o[e], $MUL(a, bv));",
         "fma": "o[e] = $FMA(a, bv, u == 0 ? ($T)0 : o[e]);"}
ROWS_CACHED = 1024  # the backward's per-row softmax values held in shared memory (more: again)

# One thread per row (b, h, i): its max and sum, then the chain over u of its weights times
# v's rows, into its D outputs.
_FORWARD = """\
    const long long n = B * H * L;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += step) {
        const long long i = r % L, h = (r / L) % H, b = r / (L * H);
        $T m, s;
        ${P}stats(qkv, b, i, h, L, H, D, sc, causal, &m, &s);
        $T* o = y + ((b * L + i) * H + h) * D;
        for (long long u = 0; u < L; ++u) {
            const $T a = ${P}w(qkv, key, b, i, u, h, L, H, D, sc, causal, m, s, thr, dsc, drop);
            const $T* vr = qkv + gt_attn_at(b, u, 2, h, L, H, D);
            for (long long e = 0; e < D; ++e) {
                const $T bv = vr[e];
                $STEP
            }
        }
    }"""

# One block per (b, h): each thread its rows' softmax values (max, sum, softmax_grad's d), held
# in shared memory; then dq by rows (chains over j) and dk, dv by columns (chains over i), a
# thread's rows and columns the same indices; then each of its outputs + 0.0.
_GRAD = """\
    __shared__ $T st[3 * $CACHED];
    const long long t = threadIdx.x, nt = blockDim.x;
    for (long long bh = blockIdx.x; bh < B * H; bh += gridDim.x) {
        const long long b = bh / H, h = bh % H;
        for (long long i = t; i < L && i < $CACHED; i += nt) {
            $T m, s;
            ${P}stats(qkv, b, i, h, L, H, D, sc, causal, &m, &s);
            st[i] = m;
            st[$CACHED + i] = s;
            st[2 * $CACHED + i] = ${P}rowd(g, qkv, key, b, i, h, L, H, D, sc, causal, m, s, thr,
                                           dsc, drop);
        }
        __syncthreads();
        for (long long i = t; i < L; i += nt) {  // dq[i]: the chain over j of ds(i, j) * k[j]
            $T m, s, d;
            ${P}row(st, g, qkv, key, b, i, h, L, H, D, sc, causal, thr, dsc, drop, &m, &s, &d);
            $T* o = y + gt_attn_at(b, i, 0, h, L, H, D);
            for (long long u = 0; u < L; ++u) {
                const $T a = ${P}ds(g, qkv, key, b, i, u, h, L, H, D, sc, causal, m, s, d, thr,
                                    dsc, drop);
                const $T* kr = qkv + gt_attn_at(b, u, 1, h, L, H, D);
                for (long long e = 0; e < D; ++e) {
                    const $T bv = kr[e];
                    $STEP
                }
            }
        }
        for (long long j = t; j < L; j += nt) {  // dk[j], dv[j]: chains over i
            for (long long u = 0; u < L; ++u) {
                $T m, s, d;
                ${P}row(st, g, qkv, key, b, u, h, L, H, D, sc, causal, thr, dsc, drop, &m, &s,
                        &d);
                const $T* qr = qkv + gt_attn_at(b, u, 0, h, L, H, D);
                const $T* gr = g + ((b * L + u) * H + h) * D;
                $T a = ${P}ds(g, qkv, key, b, u, j, h, L, H, D, sc, causal, m, s, d, thr, dsc,
                              drop);
                $T* o = y + gt_attn_at(b, j, 1, h, L, H, D);
                for (long long e = 0; e < D; ++e) {
                    const $T bv = qr[e];
                    $STEP
                }
                a = ${P}w(qkv, key, b, u, j, h, L, H, D, sc, causal, m, s, thr, dsc, drop);
                o = y + gt_attn_at(b, j, 2, h, L, H, D);
                for (long long e = 0; e < D; ++e) {
                    const $T bv = gr[e];
                    $STEP
                }
            }
            for (long long c = 0; c < 3; ++c) {  // the tape's sum with the other slices' +0.0
                $T* o = y + gt_attn_at(b, j, c, h, L, H, D);
                for (long long e = 0; e < D; ++e) o[e] = $ADD(o[e], ($T)0);
            }
        }
        __syncthreads();
    }"""


# --------------------------------------------------------------------------- cpu kernels
# One (b, h) block at a time per thread: q, k, v (and g) gathered into contiguous scratch
# (exact copies), the products by the matmul kernel's tiles on the calling thread, the row
# steps over whole rows in the composite's order.
_CPU_SCRATCH = cpu_scratch(13) + """\
    auto words = [](long long n) -> unsigned long long* {
        static thread_local std::vector<unsigned long long> buf;
        if ((long long)buf.size() < n) buf.resize((size_t)n);
        return buf.data();
    };
    // dropout's mask over a tile (out may be x): x[u] * dsc where word u's top 53 bits are
    // >= thr, else +0.0 -- the dropout op's rule, as one vector loop (the product computed in
    // every lane, kept where the lane survives; written as a ternary on the word, the loop
    // stayed scalar: 3.5 us a 32 x 32 tile)
    auto block_list = [](long long n) -> long long* {  // a thread's list of n blocks
        static thread_local std::vector<long long> buf;
        if ((long long)buf.size() < n) buf.resize((size_t)n);
        return buf.data();
    };
    // the Philox words of (b, h)'s tile (element u's word at wd[off + u], off = (bh L L) & 3;
    // block c of the tile at wd + 4 c), 16 blocks side by side: every block, or with lower
    // only the blocks holding an element on or below the diagonal (j <= i; the others' words
    // are left as they were: see _CPU_WEIGHTS for when no result can read them)
    auto tile_words = [=](unsigned long long* wd, long long bh, long long L, bool lower) {
        const long long off = (bh * L * L) & 3, b0 = (bh * L * L) >> 2;
        if (!lower) {
            const long long nb = (off + L * L + 3) >> 2;
            for (long long c = 0; c < nb; c += 16) {
                unsigned long long counters[16];
                for (int j = 0; j < 16; ++j)
                    counters[j] = (unsigned long long)(b0 + c + j) + 1ULL;
                gt_philox_lanes(key, counters, 0ULL, 16,
                                reinterpret_cast<unsigned long long (*)[4]>(wd + 4 * c));
            }
            return;
        }
        long long* want = block_list((off + L * L + 3) >> 2);  // the blocks, in order
        long long n = 0, next = 0;  // next: the first block not listed yet
        for (long long i = 0; i < L; ++i) {
            const long long c0 = (i * L + off) >> 2, c1 = (i * L + i + off) >> 2;
            for (long long c = c0 > next ? c0 : next; c <= c1; ++c) want[n++] = c;
            next = c1 + 1 > next ? c1 + 1 : next;
        }
        for (long long s0 = 0; s0 < n; s0 += 16) {
            unsigned long long counters[16], blk[16][4];
            for (int j = 0; j < 16; ++j)  // past the end: the last block again
                counters[j] = (unsigned long long)(b0 + want[s0 + j < n ? s0 + j : n - 1]) + 1ULL;
            gt_philox_lanes(key, counters, 0ULL, 16, blk);
            for (int j = 0; j < 16 && s0 + j < n; ++j)
                for (int e = 0; e < 4; ++e) wd[4 * want[s0 + j] + e] = blk[j][e];
        }
    };
    auto dropout_mask = [=](T* out, const T* x, const unsigned long long* wr, long long n) {
        const unsigned long long ut = (unsigned long long)thr;  // thr >= 0
#pragma GCC ivdep
        for (long long u = 0; u < n; ++u) {
            const T m = $MUL(x[u], dsc);
            out[u] = (wr[u] >> 11) >= ut ? m : (T)0;
        }
    };
"""
# a thread's tile buffers (what $WEIGHTS fills), both kernels
_CPU_TILE = """\
        T* q = scratch(0, L * D);
        T* k = scratch(1, L * D);
        T* v = scratch(2, L * D);
        T* yw = scratch(3, L * L);
        T* sr = scratch(10, L * L);
        T* zr = scratch(11, L * L);
        T* mx = scratch(12, L);
        unsigned long long* wd = words(4 * ((L * L + 3) / 4 + 17));
"""
# gather (b, h)'s q, k, v; the scores (sr), the softmax rows (yw), the Philox words of the
# dropout mask (wd, kept for the backward's mask) and the weights after dropout (w). The
# shifted scores of the whole tile take exp's first stage as one loop (zr; a causal tile's
# rows packed, the lower triangle's L (L + 1) / 2 entries alone: the exps of the masked half
# are not computed, the results written to sr, then unpacked into yw); a causal row's masked
# scores are -inf, which cannot change its max, and each masked weight is the one value
# exp(-inf - max) (+0.0, or NaN with a NaN max), added to the row's sum in its place.
# A causal tile whose masked weights are all +0.0 (no row's max or sum NaN) draws only the
# Philox blocks holding an element on or below the diagonal (tile_words' lower: about
# (L + 4) / 2L of them): a masked weight after dropout is +0.0 whatever its word says (kept,
# +0.0 times the scale; dropped, +0.0). In the backward a masked entry of g @ v^T reaches the
# result only through softmax_grad's row sum, times its +0.0 weight: a finite one adds a
# zero either way (its sign can change only a zero of the result's chains, and dqkv adds +0.0
# last), a non-finite one a NaN or not as its word says -- so a tile holding one (after
# dropout's scaling: a finite entry can overflow there) draws every word before the mask.
_CPU_WEIGHTS = """\
            const long long b = bh / H, h = bh % H;
            for (long long i = 0; i < L; ++i)
                for (int c = 0; c < 3; ++c) {
                    const T* src = qkv + ((b * L + i) * 3 + c) * H * D + h * D;
                    T* dst = (c == 0 ? q : c == 1 ? k : v) + i * D;
                    for (long long e = 0; e < D; ++e) dst[e] = src[e];
                }
            product(q, k, sr, 1, L, D, L, $NOTA, 1, true, gtcpu::NoPack{});  // scores: q @ k^T
            for (long long i = 0; i < L; ++i) {
                T* xr = sr + i * L;
                T* zrow = zr + (causal ? i * (i + 1) / 2 : i * L);
                const long long R = causal ? i + 1 : L;
                for (long long j = 0; j < R; ++j) xr[j] = $MUL(xr[j], sc);
                T m = xr[0];
                for (long long j = 1; j < R; ++j) m = $MAX(m, xr[j]);
                mx[i] = m;
                for (long long j = 0; j < R; ++j) zrow[j] = $SUB(xr[j], m);
            }
            {
                const long long R = causal ? L * (L + 1) / 2 : L * L;
                T* ez = causal ? sr : yw;
""" + exp_staged("ez[r] = $EXP_FIRST(zr[r], gt_bad);", " " * 16) + """\
                if (causal)
                    for (long long i = 0; i < L; ++i)
                        for (long long j = 0; j <= i; ++j) yw[i * L + j] = sr[i * (i + 1) / 2 + j];
            }
            bool lower = causal;  // every masked weight +0.0 (so far)
            for (long long i = 0; i < L; ++i) {
                T* yr = yw + i * L;
                if (causal && i + 1 < L) {
                    const T em = $EXP($SUB($NEGINF, mx[i]));
                    for (long long j = i + 1; j < L; ++j) yr[j] = em;
                }
                T s = yr[0];
                for (long long j = 1; j < L; ++j) s = $ADD(s, yr[j]);
                for (long long j = 0; j < L; ++j) yr[j] = $DIV(yr[j], s);
                if (causal && i + 1 < L)  // its masked weights em / s: NaN with a NaN max or s
                    lower = lower && yr[i + 1] == (T)0;
            }
            T* w = yw;
            const long long off = (bh * L * L) & 3;  // the tile's first word in its block
            if (drop) {  // the tile's Philox words (lower: the diagonal's and below), the mask
                w = scratch(4, L * L);
                tile_words(wd, bh, L, lower);
                dropout_mask(w, yw, wd + off, L * L);
            }
"""
_CPU_FORWARD = Template("""\
    typedef $T T;
$PRODUCT$SCRATCH
    gtcpu::parallel_for(B * H, L * L * (2 * D + 64), [=](long long lo, long long hi) {
$TILE        T* ob = scratch(5, L * D);
        for (long long bh = lo; bh < hi; ++bh) {
$WEIGHTS
            product(w, v, ob, 1, L, L, D, gtcpu::Int<0>{}, 0, true,
                    gtcpu::NoPack{});  // out = w @ v
            for (long long i = 0; i < L; ++i) {
                T* dst = y + ((b * L + i) * H + h) * D;
                for (long long e = 0; e < D; ++e) dst[e] = ob[i * D + e];
            }
        }
    });""")
_CPU_GRAD = Template("""\
    typedef $T T;
$PRODUCT$SCRATCH
    gtcpu::parallel_for(B * H, L * L * (6 * D + 96), [=](long long lo, long long hi) {
$TILE        T* gb = scratch(5, L * D);
        T* dy = scratch(6, L * L);
        T* dq = scratch(7, L * D);
        T* dk = scratch(8, L * D);
        T* dv = scratch(9, L * D);
        for (long long bh = lo; bh < hi; ++bh) {
$WEIGHTS
            for (long long i = 0; i < L; ++i) {
                const T* src = g + ((b * L + i) * H + h) * D;
                for (long long e = 0; e < D; ++e) gb[i * D + e] = src[e];
            }
            product(gb, v, dy, 1, L, D, L, 0, 1, true, gtcpu::NoPack{});  // g @ v^T
            product(w, gb, dv, 1, L, L, D, 1, 0, true, gtcpu::NoPack{});  // w^T @ g
            if (drop) {  // dropout's backward: the forward's mask, from the kept words
                unsigned char inf = 0;  // a masked (j > i) entry of g @ v^T not finite
                if (lower)          // once scaled (kept, it is its product with dsc)
                    for (long long i = 0; i + 1 < L; ++i)
                        for (long long j = i + 1; j < L; ++j)
                            inf |= (unsigned char)!std::isfinite($MUL(dy[i * L + j], dsc));
                if (inf)  // its product with its +0.0 weight reads its word
                    tile_words(wd, bh, L, false);
                dropout_mask(dy, dy, wd + off, L * L);
            }
            for (long long i = 0; i < L; ++i) {  // softmax_grad, the mask, the scale
                T* dr = dy + i * L;
                const T* yr = yw + i * L;
                T d = $MUL(dr[0], yr[0]);
                for (long long j = 1; j < L; ++j) d = $ADD(d, $MUL(dr[j], yr[j]));
                for (long long j = 0; j < L; ++j) dr[j] = $MUL(yr[j], $SUB(dr[j], d));
                if (causal)
                    for (long long j = i + 1; j < L; ++j) dr[j] = (T)0;
                for (long long j = 0; j < L; ++j) dr[j] = $MUL(dr[j], sc);
            }
            product(dy, k, dq, 1, L, L, D, 0, 0, true, gtcpu::NoPack{});  // ds @ k
            product(dy, q, dk, 1, L, L, D, 1, 0, true, gtcpu::NoPack{});  // ds^T @ q
            for (long long i = 0; i < L; ++i)
                for (int c = 0; c < 3; ++c) {
                    const T* src = (c == 0 ? dq : c == 1 ? dk : dv) + i * D;
                    T* dst = y + ((b * L + i) * 3 + c) * H * D + h * D;
                    for (long long e = 0; e < D; ++e) dst[e] = $ADD(src[e], (T)0);
                }
        }
    });""")

_SIGS = {"qkv_attention": "const $T* qkv, const long long* key, $T* y, long long B, long long L, "
                          "long long H, long long D, $T sc, long long causal, long long thr, "
                          "$T dsc, long long drop",
         "qkv_attention_grad": "const $T* g, const $T* qkv, const long long* key, $T* y, "
                               "long long B, long long L, long long H, long long D, $T sc, "
                               "long long causal, long long thr, $T dsc, long long drop"}


def kernel_base(op: str, inner: str) -> str:
    """The base name of ``op``'s kernel of contract ``inner`` (its KernelSet key)."""
    return op if inner == "plain" else f"{op}_{inner}"


FMA_KERNELS.update(ft.kernel(kernel_base(op, "fma")) for op in _SIGS for ft in dtypes.FLOATS)


def _fns(ft: FloatType, inner: str) -> dict[str, str]:
    dot = (DOT if inner == "plain" else DOT_FMA)[ft]
    return {"T": ft.ctype, "P": f"gt_attn_{inner}_{ft.suffix}_", "DOT": dot.name,
            "MUL": MUL[ft].cname, "ADD": ADD[ft].cname, "SUB": SUB[ft].cname,
            "DIV": DIV[ft].cname, "EXP": EXP[ft].cname, "MAX": MAX[ft].cname,
            "FMA": FMA_INTRINSIC[ft], "NEGINF": ft.literal(-np.inf),
            "EXP_FIRST": EXP[ft].first_cname, "FIRST_STAGE": FIRST_STAGE_LOOP,
            "CACHED": str(ROWS_CACHED)}


def _row_fn(ft: FloatType, inner: str) -> DeviceFn:
    f = _fns(ft, inner)
    dot = (DOT if inner == "plain" else DOT_FMA)[ft]
    return DeviceFn(f"{f['P']}score", _ROW_FT.substitute(f),
                    (ROW, dot, MUL[ft], ADD[ft], SUB[ft], DIV[ft], EXP[ft], MAX[ft]))


_ROW_FNS = {(ft, inner): _row_fn(ft, inner) for ft in dtypes.FLOATS for inner in INNER}


def _kernels(op: str, cpu: bool):
    def kernels(ft: FloatType) -> list[Kernel]:
        out = []
        for inner in INNER:
            f = _fns(ft, inner)
            sig = Template(_SIGS[op]).substitute(T=ft.ctype)
            calls = (PHILOX, ROW, _ROW_FNS[ft, inner], MUL[ft], ADD[ft], SUB[ft], DIV[ft],
                     EXP[ft], MAX[ft])
            if cpu:
                # ta = 0 as the kernel's other products pass it (one product instance each:
                # the forward's knows ta when compiled, the backward's takes it at run time)
                nota = "gtcpu::Int<0>{}" if op == "qkv_attention" else "0"
                weights = Template(_CPU_WEIGHTS).substitute(f, NOTA=nota)
                body = (_CPU_FORWARD if op == "qkv_attention" else _CPU_GRAD).substitute(
                    f, PRODUCT=cpu_product(inner),
                    SCRATCH=Template(_CPU_SCRATCH).substitute(f), TILE=_CPU_TILE,
                    WEIGHTS=weights)
            else:
                text = _FORWARD if op == "qkv_attention" else _GRAD
                body = Template(text.replace("$STEP", _STEP[inner])).substitute(f)
            out.append(Kernel(ft.kernel(kernel_base(op, inner)), params(sig), body,
                              Kind.ATTENTION, calls, ATTENTION))
        return out

    return kernels


def _scalars(dt: np.dtype, scale: float, causal: bool, p: float) -> tuple:
    """The kernels' trailing scalars: scale (rounded to dt), causal, dropout's threshold and
    scale, and whether it drops."""
    return (round_scalar(scale, dt), int(causal), threshold(p) if p > 0 else 0,
            drop_scale(p, dt), int(p > 0))


def _forward_launch(rt, ks, ins, out, *, scale, causal, p, inner="plain"):
    # a thread per row (b, h, i) (the cpu kernel: a (b, h) block per task)
    qkv, key = ins
    if out.size:
        b, t, _, h, d = qkv.shape
        rt.launch(ks[kernel_base("qkv_attention", inner)], grid_for(b * h * t), BLOCK,
                  (qkv, key, out, b, t, h, d, *_scalars(out.dtype, scale, causal, p)))


def _grad_launch(rt, ks, ins, out, *, scale, causal, p, inner="plain"):
    # a block per (b, h), a thread per row of it (the cpu kernel: a (b, h) block per task)
    g, qkv, key = ins
    if out.size:
        b, t, _, h, d = qkv.shape
        nt = 1
        while nt < min(t, ROW_THREADS):
            nt *= 2
        rt.launch(ks[kernel_base("qkv_attention_grad", inner)], min(b * h, MAX_GRID), nt,
                  (g, qkv, key, out, b, t, h, d, *_scalars(out.dtype, scale, causal, p)))


def composite_grad(be, g, qkv, key, scale: float, causal: bool, p: float, inner: str):
    """qkv_attention_grad spelled op by op on ``be`` (the module doc's composite: slices,
    batched products, softmax_grad, ...): the same operations on the same values, so the same
    bits as the fused kernel, and differentiable where ``be`` records (a higher order)."""
    b, t, _, h, d = qkv.shape
    n, dt = b * h, qkv.dtype

    def heads(x, c=None):  # (B, T, [3,] H, D) -> (B*H, T, D) of part c
        if c is not None:
            x = be.slice(qkv, 2, c, c + 1)
        return be.reshape(be.transpose(be.reshape(x, (b, t, h, d)), (0, 2, 1, 3)), (n, t, d))

    q, k, v, gh = heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), heads(g)
    mask = be.constant(_causal(t), "bool") if causal else None
    s = be.muls(be.bmm(q, k, inner=inner, tb=True), scale)
    if causal:
        s = be.where(mask, s, be.fill((), -np.inf, dt))
    y = be.softmax(s, -1)
    w = be.dropout(y, key, p) if p > 0 else y
    dy = be.bmm(gh, v, inner=inner, tb=True)
    dv = be.bmm(w, gh, inner=inner, ta=True)
    if p > 0:
        dy = be.dropout(dy, key, p)
    dz = be.softmax_grad(dy, y, -1)
    if causal:
        dz = be.where(mask, dz, be.fill((), 0.0, dt))
    ds = be.muls(dz, scale)
    dq, dk = be.bmm(ds, k, inner=inner), be.bmm(ds, q, inner=inner, ta=True)
    parts = [be.reshape(be.transpose(be.reshape(z, (b, h, t, d)), (0, 2, 1, 3)),
                        (b, t, 1, h, d)) for z in (dq, dk, dv)]
    return be.adds(be.concat(parts, 2), 0.0)


def _forward_vjp(be, g, ins, out, needs, scale, causal, p, inner="plain"):
    # qkv_attention_grad has no rule of its own: a recording backend (a higher order) takes
    # the composite, op by op (the same bits)
    if not needs[0]:
        return None, None
    qkv, key = ins
    if be.differentiates:
        return composite_grad(be, g, qkv, key, scale, causal, p, inner), None
    return be.qkv_attention_grad(g, qkv, key, scale=scale, causal=causal, p=p, inner=inner), None


_DEFAULTS = {"causal": False, "p": 0.0, "inner": "plain"}
register(Op("qkv_attention", ("qkv", "key"), ("scale", "causal", "p", "inner"), _forward_infer,
            _forward_ref, _kernels("qkv_attention", False), _forward_launch, _forward_vjp,
            "self-attention of a packed qkv (B, T, 3, H, D) -> (B, T, H, D): scores, scale, "
            "causal mask, softmax, dropout and the value product fused, in the composite's "
            "order (inner: the products' contract)", dict(_DEFAULTS),
            cpu=_kernels("qkv_attention", True), types=(F, IDS)))
register(Op("qkv_attention_grad", ("g", "qkv", "key"), ("scale", "causal", "p", "inner"),
            _grad_infer, _grad_ref, _kernels("qkv_attention_grad", False), _grad_launch, None,
            "qkv_attention's backward: the gradient of qkv (B, T, 3, H, D), the composite's "
            "backward in its order, fused", dict(_DEFAULTS),
            cpu=_kernels("qkv_attention_grad", True), types=(F, F, IDS)))
