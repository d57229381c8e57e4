"""Random ops: Philox4x64-10 draws and dropout, every bit a function of (key, element index).

The key is an int64 input of shape (2,): the bit patterns of the two uint64 Philox key words
(``gtape.rng.Key.array()``). Element ``i`` (row-major) of a draw reads word ``i`` of numpy's
``Philox(key=K).random_raw()`` stream (``gtensor.philox``): word ``i % 4`` of the block at
counter ``i // 4 + 1``. An output's words depend on its index alone (a CUDA thread computes
the block of each output it writes; a cpu thread each block once, walking its range of
outputs in order), so the bits depend on neither the launch geometry nor the thread count.
(Argument order here is the op's, ``dropout(x, key, p)``; ``g.dropout(x, p, key)`` wraps it.)

* ``rng_bits(key, shape)``: int64, the uint64 words' bit patterns.
* ``rng_uniform(key, shape, dtype)``: f64 ``(w >> 11) * 2**-53`` (numpy's
  ``Generator.random()``); f32 ``(w >> 40) * 2**-24``. Exact, in [0, 1).
* ``rng_normal(key, shape, dtype)``: element i from words 2i and 2i+1 (one block):
  ``u1 = ((w[2i] >> 11) + 1) * 2**-53`` in (0, 1], ``u2 = (w[2i+1] >> 11) * 2**-53``,
  ``sqrt(-2 * log(u1)) * cos(TWO_PI * u2)`` with the correctly rounded log and cos, every operation
  rounded once in float64; f32: that float64 value rounded once.
* ``rng_fold(key, i)``: the key (b0, b1) of the block ``Philox(key)`` at counter
  ``(i, 0, 0, 1)``; ``split(key, n)[j]`` (host only) the block at ``(j, 0, 0, 2)``. Draws use
  counters with c3 == 0, so a derived key comes from a block no draw of its parent reads.
* ``dropout(x, key, p)``: with ``t = ceil(p * 2**53)`` (exact), element i is kept iff
  ``(w[i] >> 11) >= t`` -- i.e. iff its f64 uniform is >= p, whatever the dtype -- and then
  ``x[i] * s`` (one rounding in x's dtype) with ``s = 1 / (1 - p)`` rounded to float64 (then
  once to float32 on an f32 tape); a dropped element is +0.0 whatever x holds (inf, NaN, -0).
  Backward: ``dropout(g, key, p)``, the same mask regenerated from the key (nothing stored).
"""

from __future__ import annotations

import math
from math import prod
from string import Template

import numpy as np

from .. import dtypes, philox
from ..kernels import DeviceFn, Kernel, Kind, params
from ..scalar.crlog import LOG_F64
from ..scalar.crtrig import COS_F64
from ..scalar.dsl import F32, F64, I64, ScalarFn, scalar_fn
from .elementwise import MUL
from .forms import BLOCK, RANDOM, grid_for
from .registry import Op, register

F, IDS = dtypes.FLOAT, dtypes.INT
TWO_PI = 6.283185307179586  # 2*pi rounded to float64 (0x1.921fb54442d18p+2)
MAX_ELEMENTS = 1 << 60  # word indices (2i for normal) stay below 2**62
# counter word c3 of the blocks that derive keys (draws use c3 = 0): Key.fold, Key.split, and
# the key stream of a seeded tape (gtape: the n-th default key of Tape(seed=s))
FOLD_TAG, SPLIT_TAG, STREAM_TAG = 1, 2, 3


# --------------------------------------------------------------------------- scalar transforms
@scalar_fn("gt_rng_uniform_f64", (I64,), F64)
def rng_uniform_f64(m, a):
    """The f64 uniform of a word's top 53 bits ``a = w >> 11``: ``a * 2**-53`` (exact)."""
    return m.i2f(a) * 1.1102230246251565e-16  # 2**-53


@scalar_fn("gt_rng_uniform_f32", (I64,), F32)
def rng_uniform_f32(m, a):
    """The f32 uniform of a word's top 24 bits ``a = w >> 40``: ``a * 2**-24`` (exact)."""
    return m.to_f32(m.i2f(a) * 5.960464477539063e-08)  # 2**-24


@scalar_fn("gt_rng_normal_f64", (I64, I64), F64)
def rng_normal_f64(m, a, b):
    """Box-Muller of two words' top 53 bits: sqrt(-2 log u1) * cos(2 pi u2), u1 in (0, 1]
    (log and cos correctly rounded: gtensor.scalar.crmath)."""
    u1 = m.i2f(a + 1) * 1.1102230246251565e-16
    u2 = m.i2f(b) * 1.1102230246251565e-16
    r = m.sqrt(-2.0 * m.call(LOG_F64, u1))
    return r * m.call(COS_F64, TWO_PI * u2)


@scalar_fn("gt_rng_normal_f32", (I64, I64), F32)
def rng_normal_f32(m, a, b):
    """The f64 normal rounded once to float32."""
    return m.to_f32(m.call(rng_normal_f64, a, b))


RNG_UNIFORM: dict[dtypes.FloatType, ScalarFn] = {dtypes.F64: rng_uniform_f64,
                                                  dtypes.F32: rng_uniform_f32}
RNG_NORMAL: dict[dtypes.FloatType, ScalarFn] = {dtypes.F64: rng_normal_f64,
                                                 dtypes.F32: rng_normal_f32}
UNIFORM_SHIFT = {dtypes.F64: 11, dtypes.F32: 40}

# --------------------------------------------------------------------------- Philox in C
PHILOX = DeviceFn("gt_philox_block", """\
// Philox4x64-10 (numpy.random.Philox, Random123): the 64x64 -> 128-bit product, ten rounds,
// the key bumped between rounds. The product is exact integer arithmetic whichever way it is
// computed: a*b and __umul64hi on a device; on the host, for one block, a 128-bit multiply
// (one mul instruction for both halves; 4x faster than the 32-bit halves as scalar code), and
// for blocks side by side the 32-bit halves, which GCC turns into vector code (vpmuludq or
// vpmullq lanes: 2.2x the 128-bit multiplies' rate, 16 blocks at a time, one AMD Zen 4 thread);
// with g++ and AVX-512, sixteen blocks are two 8-lane vectors whose 32 x 32 -> 64-bit products
// are vpmuludq by name (g++ had picked vpmullq, three uops on Intel parts: 1.6-1.9x the words
// a second on one thread of the Emerald Rapids Xeon, the same bits).
__device__ __forceinline__ unsigned long long gt_philox_mul(unsigned long long a,
                                                            unsigned long long b,
                                                            unsigned long long* hi)
{
#if defined(__CUDA_ARCH__)
    *hi = __umul64hi(a, b);
    return a * b;
#elif defined(__SIZEOF_INT128__)
    const unsigned __int128 p = (unsigned __int128)a * b;
    *hi = (unsigned long long)(p >> 64);
    return (unsigned long long)p;
#else
    const unsigned long long a_lo = a & 0xFFFFFFFFULL, a_hi = a >> 32;
    const unsigned long long b_lo = b & 0xFFFFFFFFULL, b_hi = b >> 32;
    const unsigned long long ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo;
    const unsigned long long mid = (ll >> 32) + (lh & 0xFFFFFFFFULL) + (hl & 0xFFFFFFFFULL);
    *hi = a_hi * b_hi + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (ll & 0xFFFFFFFFULL);
#endif
}
// The same product by 32-bit halves (a vector lane's form on the host; a device's own).
__device__ __forceinline__ unsigned long long gt_philox_mul_lane(unsigned long long a,
                                                                 unsigned long long b,
                                                                 unsigned long long* hi)
{
#if defined(__CUDA_ARCH__)
    *hi = __umul64hi(a, b);
    return a * b;
#else
    const unsigned long long a_lo = a & 0xFFFFFFFFULL, a_hi = a >> 32;
    const unsigned long long b_lo = b & 0xFFFFFFFFULL, b_hi = b >> 32;
    const unsigned long long ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo;
    const unsigned long long mid = (ll >> 32) + (lh & 0xFFFFFFFFULL) + (hl & 0xFFFFFFFFULL);
    *hi = a_hi * b_hi + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return (mid << 32) | (ll & 0xFFFFFFFFULL);
#endif
}
#if !defined(__CUDACC__) && !defined(__CUDA_ARCH__) && defined(__AVX512F__) && \
    defined(__GNUC__) && !defined(__clang__)
#define GT_PHILOX_X8 1
typedef unsigned long long gt_u64x8 __attribute__((vector_size(64)));
typedef int gt_i32x16 __attribute__((vector_size(64)));
typedef long long gt_i64x8 __attribute__((vector_size(64)));
// Lane by lane, the low 32 bits of a times those of b, as 64 bits (vpmuludq).
static inline __attribute__((always_inline)) gt_u64x8 gt_mul32_x8(gt_u64x8 a, gt_u64x8 b)
{
    return (gt_u64x8)__builtin_ia32_pmuludq512_mask((gt_i32x16)a, (gt_i32x16)b,
                                                    (gt_i64x8){0, 0, 0, 0, 0, 0, 0, 0},
                                                    (unsigned char)0xFF);
}
// Lane by lane, the 128-bit product m * b: lo and hi halves (gt_philox_mul_lane's, exact;
// neither partial sum carries out of 64 bits: lh + (ll >> 32) < 2^64, hl + 2^32 - 1 < 2^64).
static inline __attribute__((always_inline)) void gt_philox_mul_x8(unsigned long long m,
                                                                   gt_u64x8 b, gt_u64x8* lo,
                                                                   gt_u64x8* hi)
{
    const gt_u64x8 low32 = (gt_u64x8){0, 0, 0, 0, 0, 0, 0, 0} + 0xFFFFFFFFULL;
    const gt_u64x8 m_lo = (gt_u64x8){0, 0, 0, 0, 0, 0, 0, 0} + (m & 0xFFFFFFFFULL);
    const gt_u64x8 m_hi = (gt_u64x8){0, 0, 0, 0, 0, 0, 0, 0} + (m >> 32);
    const gt_u64x8 b_hi = b >> 32;
    const gt_u64x8 ll = gt_mul32_x8(m_lo, b), lh = gt_mul32_x8(m_lo, b_hi);
    const gt_u64x8 hl = gt_mul32_x8(m_hi, b), hh = gt_mul32_x8(m_hi, b_hi);
    const gt_u64x8 t = lh + (ll >> 32);
    const gt_u64x8 u = hl + (t & low32);
    *hi = hh + (t >> 32) + (u >> 32);
    *lo = (u << 32) | (ll & low32);
}
// gt_philox_lanes for g = 16: the same rounds on two 8-lane vectors.
static inline __attribute__((always_inline)) void gt_philox_lanes16(
    const long long* key, const unsigned long long* c0_in, unsigned long long c3_in,
    unsigned long long (*w)[4])
{
    unsigned long long k0 = (unsigned long long)key[0], k1 = (unsigned long long)key[1];
    gt_u64x8 c0[2], c1[2], c2[2], c3[2];
    for (int h = 0; h < 2; ++h) {
        __builtin_memcpy(&c0[h], c0_in + 8 * h, sizeof(gt_u64x8));
        c1[h] = (gt_u64x8){0, 0, 0, 0, 0, 0, 0, 0};
        c2[h] = c1[h];
        c3[h] = c1[h] + c3_in;
    }
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL; }
        for (int h = 0; h < 2; ++h) {
            gt_u64x8 lo0, hi0, lo1, hi1;
            gt_philox_mul_x8(0xD2E7470EE14C6C93ULL, c0[h], &lo0, &hi0);
            gt_philox_mul_x8(0xCA5A826395121157ULL, c2[h], &lo1, &hi1);
            c0[h] = hi1 ^ c1[h] ^ k0; c1[h] = lo1; c2[h] = hi0 ^ c3[h] ^ k1; c3[h] = lo0;
        }
    }
    // blocks 8h .. 8h + 7 from the four word vectors as four vectors of two blocks each
    // (w's order: a 4 x 8 transpose by eight two-vector shuffles, not 64 lane extracts)
    const gt_u64x8 lo = {0, 8, 1, 9, 2, 10, 3, 11}, hi = {4, 12, 5, 13, 6, 14, 7, 15};
    const gt_u64x8 first = {0, 1, 8, 9, 2, 3, 10, 11}, second = {4, 5, 12, 13, 6, 7, 14, 15};
    for (int h = 0; h < 2; ++h) {
        const gt_u64x8 a01 = __builtin_shuffle(c0[h], c1[h], lo);
        const gt_u64x8 a23 = __builtin_shuffle(c2[h], c3[h], lo);
        const gt_u64x8 b01 = __builtin_shuffle(c0[h], c1[h], hi);
        const gt_u64x8 b23 = __builtin_shuffle(c2[h], c3[h], hi);
        const gt_u64x8 out[4] = {__builtin_shuffle(a01, a23, first),
                                 __builtin_shuffle(a01, a23, second),
                                 __builtin_shuffle(b01, b23, first),
                                 __builtin_shuffle(b01, b23, second)};
        __builtin_memcpy(&w[8 * h][0], out, sizeof out);
    }
}
#endif
// Blocks side by side (C and CUDA alike, so no template): lane j < g (g <= 16) is the block at
// counter (c0[j], 0, 0, c3) under key (key[0], key[1]) as uint64, into w[j][0..3]. Every
// lane's round before the next round, so the cpu kernels run g = 16 lanes as vector code (the
// call is inlined with g a constant); one block is g = 1.
__device__ __forceinline__ void gt_philox_lanes(const long long* key,
                                                const unsigned long long* c0_in,
                                                unsigned long long c3_in, int g,
                                                unsigned long long (*w)[4])
{
#if defined(GT_PHILOX_X8)
    if (g == 16) {  // a constant where the call is inlined
        gt_philox_lanes16(key, c0_in, c3_in, w);
        return;
    }
#endif
    unsigned long long k0 = (unsigned long long)key[0], k1 = (unsigned long long)key[1];
    unsigned long long c0[16], c1[16], c2[16], c3[16];
    for (int j = 0; j < g; ++j) {
        c0[j] = c0_in[j];
        c1[j] = 0ULL;
        c2[j] = 0ULL;
        c3[j] = c3_in;
    }
    for (int r = 0; r < 10; ++r) {
        if (r) { k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL; }
        for (int j = 0; j < g; ++j) {
            unsigned long long hi0, hi1, lo0, lo1;
            if (g == 1) {
                lo0 = gt_philox_mul(0xD2E7470EE14C6C93ULL, c0[j], &hi0);
                lo1 = gt_philox_mul(0xCA5A826395121157ULL, c2[j], &hi1);
            } else {
                lo0 = gt_philox_mul_lane(0xD2E7470EE14C6C93ULL, c0[j], &hi0);
                lo1 = gt_philox_mul_lane(0xCA5A826395121157ULL, c2[j], &hi1);
            }
            c0[j] = hi1 ^ c1[j] ^ k0; c1[j] = lo1; c2[j] = hi0 ^ c3[j] ^ k1; c3[j] = lo0;
        }
    }
    for (int j = 0; j < g; ++j) {
        w[j][0] = c0[j]; w[j][1] = c1[j]; w[j][2] = c2[j]; w[j][3] = c3[j];
    }
}
// The block at counter (c0, 0, 0, c3) under key (key[0], key[1]) as uint64, into w[4].
__device__ __forceinline__ void gt_philox_block(const long long* key, unsigned long long c0,
                                                unsigned long long c3, unsigned long long* w)
{
    unsigned long long one[1][4];
    gt_philox_lanes(key, &c0, c3, 1, one);
    w[0] = one[0][0]; w[1] = one[0][1]; w[2] = one[0][2]; w[3] = one[0][3];
}
// Word i of the stream: word i % 4 of the block at counter i / 4 + 1 (numpy bumps first).
__device__ __forceinline__ unsigned long long gt_philox_word(const long long* key, long long i)
{
    unsigned long long w[4];
    gt_philox_block(key, (unsigned long long)(i >> 2) + 1ULL, 0ULL, w);
    return w[i & 3];
}
""")

# one output element of each op (o: the element; key, y and the op's own inputs in scope)
_ONE = {
    "bits": "        y[o] = (long long)gt_philox_word(key, o);\n",
    "uniform": "        y[o] = $FN((long long)(gt_philox_word(key, o) >> $SHIFT));\n",
    "normal": """\
        unsigned long long w[4];
        gt_philox_block(key, (unsigned long long)(o >> 1) + 1ULL, 0ULL, w);
        const int j = (int)(o & 1) * 2;
        y[o] = $FN((long long)(w[j] >> 11), (long long)(w[j + 1] >> 11));
""",
    "fold": """\
        unsigned long long w[4];
        gt_philox_block(key, (unsigned long long)i, $FOLD_TAG, w);
        y[o] = (long long)w[o];
""",
    "dropout": """\
        const long long a = (long long)(gt_philox_word(key, o) >> 11);
        y[o] = a >= t ? $FN(x[o], s) : ($T)0;
""",
}
_GRID = """\
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += step) {
$ONE    }"""
_CPU = """\
    gtcpu::parallel_for(n, 64, [=](long long lo, long long hi) {
        for (long long o = lo; o < hi; ++o) {
$ONE        }
    });"""
# The cpu kernels walk each thread's range of outputs in order and compute each Philox block
# once (not once per element: the same words, a quarter, for normal half, of the work), sixteen
# consecutive blocks at a time as vector lanes (gt_philox_lanes); dropout has its own body
# (_CPU_DROPOUT below).
_CPU_ONE = {
    "bits": "        y[o] = (long long)blk[o & 3];\n",
    "uniform": "        y[o] = $FN((long long)(blk[o & 3] >> $SHIFT));\n",
    "normal": """\
        const int j = (int)(o & 1) * 2;
        y[o] = $FN((long long)(blk[j] >> 11), (long long)(blk[j + 1] >> 11));
""",
}
# Split weight per output: measured ~22 ns an output for dropout on one AMD EPYC thread
# (Philox4x64-10, a block per 4 outputs), ~55 element operations of an add (0.4 ns): 64, so a
# draw or mask splits across threads from 64 K outputs (the GPT rung's attention weights)
_CPU_BLOCKED = """\
    gtcpu::parallel_for(n, 64, [=](long long lo, long long hi) {
        constexpr int G = 16;  // blocks side by side (vector lanes; gt_philox_lanes' most)
        unsigned long long held[G][4];
        long long first = -1;  // held[j] is the block first + j (b only grows)
        for (long long o = lo; o < hi; ++o) {
            const long long b = o >> $PER;
            if (first < 0 || b >= first + G) {
                first = b;
                unsigned long long counters[G];
                for (int j = 0; j < G; ++j) counters[j] = (unsigned long long)(first + j) + 1ULL;
                gt_philox_lanes(key, counters, 0ULL, G, held);
            }
            const unsigned long long* blk = held[b - first];
$ONE        }
    });"""
# dropout's cpu body: 16 blocks' 64 words at a time into a flat buffer (word e - base is
# element e's), then the mask over those elements as one vector loop (the product in every
# lane, kept where the word survives; t >= 0, so the unsigned comparison is the signed one):
# 3.4 -> 2.6 ns an element on one AMD Zen 4 thread, the per-element block lookup above gone
_CPU_DROPOUT = """\
    gtcpu::parallel_for(n, 64, [=](long long lo, long long hi) {
        constexpr int G = 16;  // blocks side by side (vector lanes; gt_philox_lanes' most)
        unsigned long long words[G][4];
        const unsigned long long ut = (unsigned long long)t;
        for (long long o = lo; o < hi;) {
            const long long first = o >> 2;
            unsigned long long counters[G];
            for (int j = 0; j < G; ++j) counters[j] = (unsigned long long)(first + j) + 1ULL;
            gt_philox_lanes(key, counters, 0ULL, G, words);
            const unsigned long long* w = &words[0][0];  // w[e - base]: element e's word
            const long long base = first << 2, end = base + 4 * G < hi ? base + 4 * G : hi;
#pragma GCC ivdep
            for (long long e = o; e < end; ++e) {
                const $T m = $FN(x[e], s);
                y[e] = (w[e - base] >> 11) >= ut ? m : ($T)0;
            }
            o = end;
        }
    });"""
_PER_BLOCK = {"bits": 2, "uniform": 2, "normal": 1, "dropout": 2}  # log2(outputs per block)
_SIGS = {
    "bits": "const long long* key, long long* y, long long n",
    "fold": "const long long* key, long long* y, long long n, long long i",
    "uniform": "const long long* key, $T* y, long long n",
    "normal": "const long long* key, $T* y, long long n",
    "dropout": "const $T* x, const long long* key, $T* y, long long n, long long t, $T s",
}
_FNS = {"bits": None, "fold": None, "uniform": RNG_UNIFORM, "normal": RNG_NORMAL, "dropout": MUL}


def _kernels(what: str, cpu: bool):
    def kernels(ft: dtypes.FloatType) -> list[Kernel]:
        t = ft.ctype
        fns = _FNS[what]
        blocked = cpu and what in _CPU_ONE
        one = "".join(("    " if cpu else "") + line + "\n"
                      for line in (_CPU_ONE if blocked else _ONE)[what].splitlines())
        template = (_CPU_DROPOUT if cpu and what == "dropout" else _CPU_BLOCKED if blocked
                    else _CPU if cpu else _GRID)
        body = Template(template.replace("$ONE", one)).substitute(
            PER=_PER_BLOCK.get(what, 0),
            FN=fns[ft].cname if fns else "", SHIFT=UNIFORM_SHIFT[ft], T=t,
            FOLD_TAG=f"{FOLD_TAG}ULL")
        calls = (PHILOX, fns[ft]) if fns else (PHILOX,)
        name = "dropout" if what == "dropout" else f"rng_{what}"
        return [Kernel(ft.kernel(name), params(Template(_SIGS[what]).substitute(T=t)), body,
                       Kind.RANDOM, calls, RANDOM)]

    return kernels


# --------------------------------------------------------------------------- shape rules
def _check_key_shape(op: str, key: tuple) -> None:
    if tuple(key) != (2,):
        raise ValueError(f"{op}: key has shape {tuple(key)}; expected an int64 key of shape "
                         "(2,) (the two Philox key words, gtape.rng.Key.array())")


def check_shape(op: str, shape) -> tuple[int, ...]:
    """A draw's shape: an int or a tuple of ints >= 0 with at most 2**60 elements."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) \
        else shape
    if not isinstance(dims, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"{op}: shape must be an int or a tuple of ints, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims) or prod(dims) > MAX_ELEMENTS:
        raise ValueError(f"{op}: shape {dims} is not a valid draw shape; expected sizes >= 0 "
                         "and at most 2**60 elements")
    return dims


def check_p(op: str, p) -> float:
    """A drop probability: a real number with 0 <= p < 1."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: p must be a real number in [0, 1), got {type(p).__name__} "
                        f"{p!r}")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"{op}: p must be in [0, 1), got {float(p)!r}")
    return float(p)


def _draw_infer(op: str, with_dtype: bool):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        _check_key_shape(op, shapes_[0])
        shape = check_shape(op, attrs["shape"])
        norm = {"shape": shape}
        if with_dtype:
            norm["dtype"] = dtypes.normalize(attrs["dtype"], op)
        return shape, norm

    return infer


def _dropout_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, key = shapes_
    _check_key_shape("dropout", key)
    return x, {"p": check_p("dropout", attrs["p"])}


def check_fold_index(op: str, i) -> int:
    """A fold index: an int in [0, 2**64)."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or \
            not 0 <= int(i) <= philox.MASK64:
        raise TypeError(f"{op}: i must be an int in [0, 2**64), got {i!r}")
    return int(i)


def _fold_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    _check_key_shape("rng_fold", shapes_[0])
    return (2,), {"i": check_fold_index("rng_fold", attrs["i"])}


def fold_words(key: tuple[int, int], i: int) -> tuple[int, int]:
    """The key words of ``fold(key, i)``: words 0, 1 of the block at counter (i, 0, 0, 1)."""
    b = philox.block(key, np.array([[i, 0, 0, FOLD_TAG]], dtype=np.uint64))
    return int(b[0, 0]), int(b[0, 1])


def split_words(key: tuple[int, int], n: int) -> list[tuple[int, int]]:
    """The key words of ``split(key, n)``: words 0, 1 of the blocks at (j, 0, 0, 2)."""
    if n == 0:
        return []
    b = philox.block(key, np.array([(j, 0, 0, SPLIT_TAG) for j in range(n)], dtype=np.uint64))
    return [(int(b[j, 0]), int(b[j, 1])) for j in range(n)]


def stream_words(key: tuple[int, int], n: int) -> tuple[int, int]:
    """The key words of the n-th key of the stream of ``key``: words 0, 1 of the block at
    counter (n, 0, 0, 3) (a seeded tape's default keys, ``gtape.Tape.next_key``)."""
    b = philox.block(key, np.array([[n, 0, 0, STREAM_TAG]], dtype=np.uint64))
    return int(b[0, 0]), int(b[0, 1])


def threshold(p: float) -> int:
    """dropout's keep threshold on ``w >> 11``: ``ceil(p * 2**53)`` (exact)."""
    return int(math.ceil(p * 2.0**53))


def scale(p: float, dtype) -> np.floating:
    """dropout's scale ``1 / (1 - p)``: rounded to float64, then once to ``dtype``."""
    return np.dtype(dtype).type(1.0 / (1.0 - p))


# --------------------------------------------------------------------------- references
def _key(key: np.ndarray) -> tuple[int, int]:
    w = np.ascontiguousarray(key, dtype=np.int64).view(np.uint64)
    return int(w[0]), int(w[1])


def _words(key: np.ndarray, n: int) -> np.ndarray:
    return philox.words(_key(key), n)


def _bits_ref(key, *, shape):
    return _words(key, prod(shape)).view(np.int64).reshape(shape)


def _uniform_ref(key, *, shape, dtype):
    ft = dtypes.float_type(dtype)
    w = _words(key, prod(shape)) >> np.uint64(UNIFORM_SHIFT[ft])
    return RNG_UNIFORM[ft].eval(w.astype(np.int64)).reshape(shape)


def _normal_ref(key, *, shape, dtype):
    ft = dtypes.float_type(dtype)
    n = prod(shape)
    w = (_words(key, 2 * n) >> np.uint64(11)).astype(np.int64).reshape(n, 2)
    return RNG_NORMAL[ft].eval(w[:, 0], w[:, 1]).reshape(shape)


def _fold_ref(key, *, i):
    return np.array(fold_words(_key(key), i), dtype=np.uint64).view(np.int64)


def _dropout_ref(x, key, *, p):
    keep = (_words(key, x.size) >> np.uint64(11)).astype(np.int64) >= threshold(p)
    kept = MUL[dtypes.float_type(x)].eval(x, scale(p, x.dtype))
    return np.where(keep.reshape(x.shape), kept, x.dtype.type(0.0))


# --------------------------------------------------------------------------- launches
def _draw_launch(name: str):
    def launch(rt, ks, ins, out, **attrs):
        if out.size:
            rt.launch(ks.only, grid_for(out.size), BLOCK, (ins[0], out, out.size))

    return launch


def _fold_launch(rt, ks, ins, out, *, i):
    # i's bit pattern as a signed long long (the kernel reads it back as uint64)
    rt.launch(ks.only, grid_for(out.size), BLOCK,
              (ins[0], out, out.size, i - (1 << 64) if i >= 1 << 63 else i))


def _dropout_launch(rt, ks, ins, out, *, p):
    x, key = ins
    if out.size:
        rt.launch(ks.only, grid_for(out.size), BLOCK,
                  (x, key, out, out.size, threshold(p), scale(p, out.dtype)))


def _dropout_vjp(be, g, ins, out, needs, p):
    # the same mask, regenerated from the key: kept gradients times the same scale, +0 else
    return (be.dropout(g, ins[1], p) if needs[0] else None, None)


register(Op("rng_bits", ("key",), ("shape",), _draw_infer("rng_bits", False), _bits_ref,
            _kernels("bits", False), _draw_launch("rng_bits"), None,
            "Philox4x64-10 words (int64 bit patterns of numpy's Philox(key).random_raw())",
            cpu=_kernels("bits", True), types=(IDS,), out_type=IDS))
register(Op("rng_uniform", ("key",), ("shape", "dtype"), _draw_infer("rng_uniform", True),
            _uniform_ref, _kernels("uniform", False), _draw_launch("rng_uniform"), None,
            "uniforms in [0, 1): (w >> 11) * 2**-53 (f64), (w >> 40) * 2**-24 (f32)",
            cpu=_kernels("uniform", True), types=(IDS,)))
register(Op("rng_normal", ("key",), ("shape", "dtype"), _draw_infer("rng_normal", True),
            _normal_ref, _kernels("normal", False), _draw_launch("rng_normal"), None,
            "standard normals: Box-Muller on word pairs with gtensor's own log and cos",
            cpu=_kernels("normal", True), types=(IDS,)))
register(Op("rng_fold", ("key",), ("i",), _fold_infer, _fold_ref, _kernels("fold", False),
            _fold_launch, None,
            "a new key from a key and an int i: words 0, 1 of Philox(key) at counter (i,0,0,1)",
            cpu=_kernels("fold", True), types=(IDS,), out_type=IDS))
register(Op("dropout", ("x", "key"), ("p",), _dropout_infer, _dropout_ref,
            _kernels("dropout", False), _dropout_launch, _dropout_vjp,
            "x * 1/(1-p) where the element's uniform >= p, else +0.0 (mask from the key)",
            cpu=_kernels("dropout", True), types=(F, IDS)))
