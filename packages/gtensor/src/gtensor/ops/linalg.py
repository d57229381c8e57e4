"""Inner products: matmul (2-D) and bmm (3-D, batch first).

Two contracts, chosen by the ``inner`` attr (a tape sets it from ``Tape.inner``):

* ``"plain"`` (the default): ``c[i,j] = a[i,0]*b[0,j]``, then ``c[i,j] = c[i,j] + a[i,k]*b[k,j]``
  for k ascending, each product and each sum rounded separately (no FMA);
* ``"fma"``: ``c[i,j] = +0.0``, then ``c[i,j] = fma(a[i,k], b[k,j], c[i,j])`` for k ascending:
  one IEEE fused multiply-add (a single rounding) per term (``gtensor.fma`` in numpy).

An empty inner dimension gives +0.0 under both.

The ``ta`` / ``tb`` attrs (bool, default False) make the op compute ``op(a) @ op(b)``, op(x) being
x with its last two axes swapped when its flag is set: exactly transpose-then-matmul (a
transpose is an exact copy, so the same products in the same order), but the kernels read the
operand in place. The backward uses them instead of transpose copies.
"""

from __future__ import annotations

from string import Template

import numpy as np

from ..dtypes import F32, F64, FLOATS, FloatType
from ..fma import fma_chain
from ..kernels import DeviceFn, Kernel, Kind, params
from .elementwise import ADD, BLOCK, MUL, grid_for
from .registry import Op, register

_MATMUL = Template("""\
    const long long mn = m * n;
    const long long total = batch * mn;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += step) {
        const long long bi = idx / mn, rem = idx % mn, i = rem / n, j = rem % n;
        // row i of op(a), column j of op(b): a flagged operand is read transposed in place
        c[idx] = $DOT(a + bi * m * k + (ta ? i : i * k), ta ? m : 1,
                      b + bi * k * n + (tb ? j * k : j), tb ? 1 : n, k);
    }""")

# One output of an inner product: the definition's serial chain over k, reading a and b with
# strides (the per-node matmul kernel: a row of a, a column of b; a fused kernel may read a
# transposed operand in place). Both call this one function.
_DOT = Template("""\
__device__ __forceinline__ $T $NAME(const $T* a, long long as, const $T* b, long long bs,
                                     long long k)
{
    $T acc = ($T)0;
    if (k > 0) {
        acc = $MUL(a[0], b[0]);
        for (long long kk = 1; kk < k; ++kk)
            acc = $ADD(acc, $MUL(a[kk * as], b[kk * bs]));
    }
    return acc;
}
""")
DOT = {ft: DeviceFn(ft.fn("dot"), _DOT.substitute(T=ft.ctype, NAME=ft.fn("dot"),
                                                      MUL=MUL[ft].cname, ADD=ADD[ft].cname),
                     (MUL[ft], ADD[ft]))
       for ft in FLOATS}

# The fma contract's chain: acc = +0.0, then one fused multiply-add per k (CUDA's __fma_rn /
# __fmaf_rn; the host runtimes map them to std::fma, a single rounding on every target).
_DOT_FMA = Template("""\
__device__ __forceinline__ $T $NAME(const $T* a, long long as, const $T* b, long long bs,
                                     long long k)
{
    $T acc = ($T)0;
    for (long long kk = 0; kk < k; ++kk)
        acc = $FMA(a[kk * as], b[kk * bs], acc);
    return acc;
}
""")
_FMA_INTRINSIC = {F64: "__fma_rn", F32: "__fmaf_rn"}
DOT_FMA = {ft: DeviceFn(ft.fn("dot_fma"),
                        _DOT_FMA.substitute(T=ft.ctype, NAME=ft.fn("dot_fma"),
                                            FMA=_FMA_INTRINSIC[ft]))
           for ft in FLOATS}
INNER = ("plain", "fma")  # the inner-product contracts (the ``inner`` attr's values)


# CPU body: rows of c split across threads. Outputs are computed in register tiles (8, 6, 4, 2
# or 1 rows x up to 2 SIMD vectors of L lanes of columns, gtcpu::Vec; a vector is the build's
# native width, gtcpu::VEC_BYTES: 64 bytes with AVX-512, 32 with AVX2 -- 64-byte vectors on an
# AVX2 build went through the stack at 0.46 G multiply-adds/s, 32-byte ones run 5.0 on the
# same AMD EPYC, float64, one thread); every output keeps its own
# k-ascending chain: acc = a[i,0]*b[0,j], then acc = acc + a[i,k]*b[k,j], each lane's product and
# sum rounded (the vector form of MUL and ADD; no FMA) -- or, under the fma contract, acc =
# fma(a[i,k], b[k,j], acc) from acc = +0.0 (gtcpu::vfma: one fused multiply-add per lane, vfmadd
# on x86). Tiles only decide which independent outputs are computed side by side, never the
# order within one. (Wider tiles -- 8 x 3, 12 x 2, 6 x 4 vectors, 16 x 1 for narrow columns --
# measured no faster on an AVX-512 Xeon: the 8 x 2 loop runs near the FMA rate from L1; on AMD
# Zen 3 / 4 the plain contract's tiles are 14 rows x 1 vector, see ``tall`` below.)
# Each k x 2L column panel of op(b) is first copied (exactly) into a contiguous, 64-byte aligned
# buffer, so the tiles stream it at unit stride whatever n is (with tb: gathered from b's rows);
# a last panel narrower than 2L is zero-padded to 2L. When b is large (> 256 KB) a thread's
# panels are all copied in one pass over b's rows before its first row block (b read in
# order; copied a panel at a time, each k-step would start a row n values on, a new page
# every few k-steps: measured 2-12% slower on large shapes). (With few rows -- m <= 16, or
# m <= 32 and b in L2 -- a panel of whole vectors is read in place instead: the copy would
# cost what it saves.) The leftover columns (n % L) are computed in one more vector over the
# padded panel (a half vector, L/2 lanes, when they fit one: measured faster than a mostly
# idle full one):
# every lane's chain is its own, so the padded lanes' values (never loaded from c, never
# stored) change no stored bit, and only the w real lanes are read from / written to c.
# With ta, op(a)'s row r at k-step kk is a[kk, r]: a tile's 8 rows are 8 contiguous values
# per k-step, m apart. They are read in place (each k-step one cache line) when a is small
# (<= 128 KB: it stays in cache) or there is one panel (a is read once) and m is at most 2 KB
# of values (the k-steps' lines stay a stride the prefetchers follow, pages a few k-steps
# long); otherwise each row block of op(a) (columns of a) is first copied (exactly) into
# groups of 8 rows whose k-steps are contiguous: read in place from a large a, every k-step of
# a tile would touch a new page (and each panel would read a again).
# The product's text after its ``typedef``: the body of the matmul kernel, and of the
# ``product`` lambda other cpu kernels call (``cpu_product``: the conv ops' per-image
# products); ``$SPLIT`` is how it splits across threads (``gtcpu::parallel_for``, or
# ``split``: serial when the caller already runs on one of the threads).
_CPU_PRODUCT = Template("""\
    using gtcpu::Int;
    constexpr int L = gtcpu::VEC_BYTES / sizeof(T);  // lanes of one native vector
    constexpr long long PW = 2 * L;    // width of a packed panel of b
    // On AMD Zen 3 / 4 the adds have pipes of their own beside the two 256-bit FMA pipes, and
    // plain's separate multiply + add tiles run fastest tall: 14 rows x one vector per tile
    // (gtcpu::tall_tiles; the fused contract's tiles are 8 x 2 on every core). Tiles only
    // group independent outputs: no bit depends on this.
    const bool tall = $TALL && gtcpu::tall_tiles();
    // k runs in blocks of KC (a 32 KB slice of the panel stays in L1 across row tiles; 16 KB
    // with tall tiles, whose 14 rows of a take as much again); an output's accumulator goes to
    // c between blocks and comes back exactly, so its chain over k is the same one (k
    // ascending, one accumulator)
    const long long KC = (tall ? 16384 : 32768) / (PW * (long long)sizeof(T));
    // b's copied panels made in one pass over b's rows when b is large (read in order, not
    // a panel's k-steps n values apart: a new page every few k-steps)
    const bool rowpack = !tb && k * n * (long long)sizeof(T) > 262144;
    // rows in blocks of MC (a multiple of 8): a block's rows of a (512 KB) stay in L2 while
    // every panel of b passes (each panel is packed once per block)
    const long long MC = 8 * (((524288 / (k * (long long)sizeof(T) + 1)) + 7) / 8);
    // under ta: op(a)'s row blocks copied into groups of 8 rows (pa) or read in place
    const bool packa = ta && m * k * (long long)sizeof(T) > 131072 &&
                       (n > PW || m * (long long)sizeof(T) > 2048);
    // tall tiles of 14 rows, except from packed groups (8 rows each) and from rows of a whose
    // stride is a multiple of 4 KB (14 rows in one set of the 8-way L1: 8 rows, then)
    const bool tall14 = tall && !packa && (ta || (k * (long long)sizeof(T)) % 4096 != 0);
    // R rows of c from ar (op(a)[r, kk] at ar[r * rs + kk * ks]: rows of a, rs = k, ks = 1
    // (KS = 1); under ta, a packed group of 8 rows, rs = 1, ks = 8 (KS = 8), or a itself,
    // rs = 1, ks = m (KS = 0)), NV vectors of N lanes of panel columns from bp (row stride bs:
    // PW, or n for a panel read in place), the last one holding w real lanes when P (else all
    // N) (steps k0..k1 of the chain: k0 == 0 starts it, else it resumes from c)
    auto tile = [=](auto rows_, auto lanes_, auto nv_, auto part_, auto ks_,
                    const T* __restrict__ ar, const T* __restrict__ bp, T* __restrict__ cr,
                    long long k0, long long k1, int w, long long bs) {
        constexpr int R = decltype(rows_)::value, N = decltype(lanes_)::value,
                      NV = decltype(nv_)::value;
        constexpr bool P = decltype(part_)::value;
        constexpr long long KS = decltype(ks_)::value;
        const long long rs = KS == 1 ? k : 1, ks = KS == 0 ? m : KS;
        typedef typename gtcpu::Vec<T, N>::type V;
        V acc[R][NV];
        long long kk = k0;
        if (k0 == 0) {
            for (int v = 0; v < NV; ++v) {
                const V bv = gtcpu::vload<V>(bp + v * N);
                for (int r = 0; r < R; ++r) acc[r][v] = $FIRST;
            }
            kk = 1;
        } else {
            for (int r = 0; r < R; ++r)
                for (int v = 0; v < NV; ++v) {
                    if (P && v == NV - 1) {  // the real lanes only (the rest: never stored)
                        acc[r][v] = V{};
                        for (int l = 0; l < w; ++l) acc[r][v][l] = cr[r * n + v * N + l];
                    } else {
                        acc[r][v] = gtcpu::vload<V>(cr + r * n + v * N);
                    }
                }
        }
        for (; kk < k1; ++kk) {
            V bv[NV];
            for (int v = 0; v < NV; ++v) bv[v] = gtcpu::vload<V>(bp + kk * bs + v * N);
            for (int r = 0; r < R; ++r) {
                const T av = ar[r * rs + kk * ks];
                for (int v = 0; v < NV; ++v) acc[r][v] = $NEXT;
            }
        }
        for (int r = 0; r < R; ++r)
            for (int v = 0; v < NV; ++v) {
                if (P && v == NV - 1) {
                    for (int l = 0; l < w; ++l) cr[r * n + v * N + l] = acc[r][v][l];
                } else {
                    gtcpu::vstore(cr + r * n + v * N, acc[r][v]);
                }
            }
    };
    // rows r0.. (R of them), the columns j0..j1 (<= 2L) of the panel at pk (row stride bs);
    // under ta, op(a)'s rows from pa (the row block starting at rb packed in groups of 8 rows)
    // or a
    auto cols = [=](auto rows_, auto ks_, long long r0, const T* pk, long long bs, long long j0,
                    long long j1, long long k0, long long k1, const T* pa, long long rb) {
        constexpr long long KS = decltype(ks_)::value;
        const T* ar = KS == 0   ? a + r0 / m * m * k + r0 % m
                      : KS == 8 ? pa + (r0 - rb) / 8 * k * 8 + (r0 - rb) % 8
                                : a + r0 * k;
        T* cr = c + r0 * n + j0;
        const long long full = (j1 - j0) / L;
        const int w = (int)((j1 - j0) % L);  // lanes of a last, partial vector
        const std::false_type whole;
        const std::true_type part;
        if (full == 2 && tall) {  // the panel's two vectors, one tile each
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk + L, cr + L, k0, k1, L, bs);
        } else if (full == 2)
            tile(rows_, Int<L>{}, Int<2>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
        else if (full == 1 && w == 0)
            tile(rows_, Int<L>{}, Int<1>{}, whole, ks_, ar, pk, cr, k0, k1, L, bs);
        else if (full == 1)
            tile(rows_, Int<L>{}, Int<2>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
        else if (2 * w <= L)  // a half vector holds them
            tile(rows_, Int<L / 2>{}, Int<1>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
        else
            tile(rows_, Int<L>{}, Int<1>{}, part, ks_, ar, pk, cr, k0, k1, w, bs);
    };
    // op(a) read as rows of a, or (ta) from the packed groups or in place: the a-strides
    // constants where they can be
    auto run = [=](auto rows_, long long r0, const T* pk, long long bs, long long j0,
                   long long j1, long long k0, long long k1, const T* pa, long long rb) {
        if (packa)
            cols(rows_, Int<8>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
        else if (ta)
            cols(rows_, Int<0>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
        else
            cols(rows_, Int<1>{}, r0, pk, bs, j0, j1, k0, k1, pa, rb);
    };
    const long long rows = batch * m;
    if (k == 0) {
        for (long long i = 0; i < rows * n; ++i) c[i] = (T)0;
        return;
    }
    // Per batch: row blocks (a's rows stay in L2), column panels (each packed once, in the
    // first row block), k blocks (the packed panel's KC x 2L slice stays in L1 across rows),
    // rows inside. Rows [lo, hi) of c against panels [p0, p1) of b.
    auto block = [=](long long lo, long long hi, long long p0, long long p1) {
        // every panel [p0, p1) of one batch's b, packed once, at its first use (panel p at
        // (p - p0) * k * PW), in a buffer each thread keeps between launches (no page faults),
        // aligned to 64 bytes (whole-vector loads never straddle a cache line)
        auto aligned = [](std::vector<T>& buf, size_t need) {
            constexpr size_t slack = 64 / sizeof(T);  // room to align to 64 bytes
            if (buf.size() < need + slack) buf.resize(need + slack);
            return (T*)(((uintptr_t)buf.data() + 63) & ~(uintptr_t)63);
        };
        auto direct = [=](long long w) {
            return !tb && w % L == 0 &&
                   (m <= 16 || (m <= 32 && k * n * (long long)sizeof(T) <= 262144));
        };
        static thread_local std::vector<T> packed;
        T* pks = aligned(packed, (size_t)((p1 - p0) * k * PW));
        static thread_local std::vector<T> apacked;  // under ta: one row block of op(a)
        T* pa = packa ? aligned(apacked, (size_t)(MC * k)) : nullptr;
        for (long long s0 = lo; s0 < hi;) {  // the rows of one batch at a time
            const long long bi = s0 / m, send = hi < (bi + 1) * m ? hi : (bi + 1) * m;
            if (rowpack) {  // every copied panel [p0, p1) of b[bi] (not those read in
                // place), k-step by k-step: b[bi] read row by row, zero-padded to PW columns
                const T* bb = b + bi * k * n;
                for (long long kk = 0; kk < k; ++kk)
                    for (long long p = p0; p < p1 && p * PW < n; ++p) {
                        const long long j0 = p * PW, w = j0 + PW < n ? PW : n - j0;
                        if (direct(w)) continue;
                        T* pw = pks + (p - p0) * k * PW + kk * PW;
                        if (w == PW) {
                            std::memcpy(pw, bb + kk * n + j0, PW * sizeof(T));
                        } else {
                            std::memcpy(pw, bb + kk * n + j0, (size_t)w * sizeof(T));
                            std::memset(pw + w, 0, (size_t)(PW - w) * sizeof(T));
                        }
                    }
            }
            for (long long rb = s0; rb < send; rb += MC) {  // row blocks: a's rows stay in L2
                const long long rbe = rb + MC < send ? rb + MC : send;
                if (packa) {  // op(a)'s rows rb..rbe: columns of a[bi], copied (exactly) in
                    // groups of 8 rows, k-steps contiguous (pa[(g * k + kk) * 8 + r % 8]),
                    // reading each row of a[bi] contiguously
                    const T* ab = a + bi * m * k + (rb - bi * m);
                    const long long w = rbe - rb;
                    for (long long g0 = 0; g0 < w; g0 += 8) {
                        const long long gw = w - g0 < 8 ? w - g0 : 8;
                        T* pg = pa + g0 * k;
                        for (long long kk = 0; kk < k; ++kk)
                            for (long long r = 0; r < gw; ++r) pg[kk * 8 + r] = ab[kk * m + g0 + r];
                    }
                }
                for (long long p = p0; p < p1 && p * PW < n; ++p) {
                    const long long j0 = p * PW, j1 = j0 + PW < n ? j0 + PW : n, w = j1 - j0;
                    T* pw = pks + (p - p0) * k * PW;
                    // few rows (m <= 16, or m <= 32 with b[bi] in L2: at most 4 row tiles use
                    // a panel): a panel of whole vectors is read in place (row stride n), its
                    // copy would cost as much as the loads it saves
                    const bool dir = direct(w);
                    const T* pk = dir ? b + bi * k * n + j0 : pw;
                    const long long bs = dir ? n : PW;  // the panel's row stride
                    if (rb == s0 && !tb && !dir && !rowpack) {  // first use: an exact copy of
                        // b[bi][:, j0:j1], zero-padded to PW columns
                        const T* bb = b + bi * k * n + j0;
                        if (w == PW)  // a constant size: inlined vector moves
                            for (long long kk = 0; kk < k; ++kk)
                                std::memcpy(pw + kk * PW, bb + kk * n, PW * sizeof(T));
                        else
                            for (long long kk = 0; kk < k; ++kk) {
                                std::memcpy(pw + kk * PW, bb + kk * n, (size_t)w * sizeof(T));
                                std::memset(pw + kk * PW + w, 0, (size_t)(PW - w) * sizeof(T));
                            }
                    } else if (rb == s0 && tb) {  // op(b) = b[bi]^T: rows j0..j1 of b[bi], gathered
                        // a cache line of k-steps at a time (KB), each row of b read a line
                        // at a time; zero-padded to PW columns
                        constexpr long long KB = 64 / sizeof(T);
                        const T* bb = b + bi * k * n + j0 * k;
                        for (long long kb = 0; kb < k; kb += KB) {
                            const long long ke = kb + KB < k ? kb + KB : k;
                            for (long long j = 0; j < w; ++j)
                                for (long long kk = kb; kk < ke; ++kk)
                                    pw[kk * PW + j] = bb[j * k + kk];
                            for (long long j = w; j < PW; ++j)
                                for (long long kk = kb; kk < ke; ++kk) pw[kk * PW + j] = (T)0;
                        }
                    }
                    for (long long k0 = 0; k0 < k; k0 += KC) {
                        const long long k1 = k0 + KC < k ? k0 + KC : k;
                        long long r = rb;
                        while (r < rbe) {
                            const long long left = rbe - r;
                            if (tall14 && left >= 14) {
                                run(Int<14>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 14;
                            } else if (left >= 8) {
                                run(Int<8>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 8;
                            } else if (left >= 6) {
                                run(Int<6>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 6;
                            } else if (left >= 4) {
                                run(Int<4>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 4;
                            } else if (left >= 2) {
                                run(Int<2>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 2;
                            } else {
                                run(Int<1>{}, r, pk, bs, j0, j1, k0, k1, pa, rb);
                                r += 1;
                            }
                        }
                    }
                }
            }
            s0 = send;
        }
    };
    // Threads split the panels of one (batch-free) product when it has at least as many panels
    // as 8-row tiles, or at least 4 per thread unless op(a) is packed and larger than b: each
    // panel is then packed (copied, or under tb gathered) by one thread, where split rows
    // would have every thread pack all of b (200x1024x512 f32 on 2 threads: 69 -> 77 G
    // multiply-adds/s under tb, 161 -> 190 without it; 512^3: +3-8%); a packed op(a) (ta)
    // would be packed whole by every thread instead, which costs more where a is the larger
    // (1024x200x512 ta: rows stay split). Otherwise they split the rows. Either way each
    // output is computed whole by one thread.
    // A multiply-add counts as 64 / L units of the split threshold (gtcpu::PARALLEL_WORK, set
    // for maps: about a unit per element): 8 in f64, 4 in f32, so a product is split from
    // 512 K f64 / 1 M f32 multiply-adds on (2 threads: 200x6x1024, 200x1024x6 and
    // 1024x200x6 ta 1.2-2.0x as fast, 100^3 f64 1.3-1.5x; at 16 / 8 units, 64^3 and
    // 200x64x32 f64 ran 0.8-1.2x: too close to call).
    const long long panels = (n + PW - 1) / PW, unit = 64 / L;
    if (batch == 1 && (panels >= (rows + 7) / 8 ||
                       (panels >= 4 * gtcpu::thread_count() && (tb || !packa || n >= m))))
        $SPLIT(panels, unit * k * PW * rows,
               [=](long long lo, long long hi) { block(0, rows, lo, hi); });
    else
        $SPLIT(rows, unit * k * n,
               [=](long long lo, long long hi) { block(lo, hi, 0, panels); });""")


# the register tiles' chain steps per contract: the first term (k = 0) and every next one
_CPU_STEPS = {"plain": ("ar[r * rs] * bv", "acc[r][v] + av * bv[v]"),
              "fma": ("gtcpu::vfma(ar[r * rs], bv, V{})", "gtcpu::vfma(av, bv[v], acc[r][v])")}


def _cpu_body(inner: str, split: str) -> str:
    first, nxt = _CPU_STEPS[inner]
    return _CPU_PRODUCT.substitute(FIRST=first, NEXT=nxt, SPLIT=split,
                                   TALL="true" if inner == "plain" else "false")


def _cpu_kernels(ft: FloatType) -> list[Kernel]:
    out = []
    for inner, k in zip(INNER, _kernels(ft)):
        body = f"    typedef {ft.ctype} T;\n" + _cpu_body(inner, "gtcpu::parallel_for")
        out.append(Kernel(k.name, k.params, body))
    return out


def cpu_product(inner: str) -> str:
    """C++ text defining ``product(a, b, c, batch, m, k, n, ta, tb, serial)`` inside a cpu
    kernel (of element type ``T``): the cpu matmul kernel's own body (its tiles, packing,
    blocking and thread split: each output's chain over k ascending under contract
    ``inner``), so a kernel built on products of slices (the conv ops' per-image im2col
    products) runs at the matmul's speed with the matmul's bits. ``serial`` keeps it on the
    calling thread (a caller already splitting work across threads)."""
    body = _cpu_body(inner, "split")
    inner_text = "".join(("    " + line if line.strip() else line) + "\n"
                         for line in body.splitlines())
    return ("    auto product = [=](const T* a, const T* b, T* c, long long batch, long long m,\n"
            "                       long long k, long long n, long long ta, long long tb,\n"
            "                       bool serial) {\n"
            "        auto split = [serial](long long count, long long cost, auto f) {\n"
            "            if (serial)\n"
            "                f(0LL, count);\n"
            "            else\n"
            "                gtcpu::parallel_for(count, cost, f);\n"
            "        };\n"
            + inner_text + "    };\n")


def kernel_base(inner: str) -> str:
    """The base name of the matmul kernel of contract ``inner`` (its KernelSet key)."""
    return "matmul" if inner == "plain" else f"matmul_{inner}"


def fma_contract_text(kernels: tuple[Kernel, ...]) -> list[str]:
    """The texts of the fma contract among ``kernels`` (its kernels' sources: matmul's and the
    conv ops'; its ``gt_dot_fma`` helpers): the only text of a module that may name a fused
    multiply-add."""
    from .conv import fma_kernel_names  # conv builds on this module

    names = {ft.kernel(kernel_base("fma")) for ft in DOT_FMA} | fma_kernel_names()
    return ([k.source() for k in kernels if k.name in names]
            + [fn.text for fn in DOT_FMA.values()])


def _kernels(ft: FloatType) -> list[Kernel]:
    t = ft.ctype
    sig = params(f"const {t}* a, const {t}* b, {t}* c, long long batch, long long m, "
                 "long long k, long long n, long long ta, long long tb")
    return [Kernel(ft.kernel(kernel_base(inner)), sig, _MATMUL.substitute(DOT=dot[ft].name),
                   Kind.MATMUL, (dot[ft],))
            for inner, dot in zip(INNER, (DOT, DOT_FMA))]


def serial_matmul(a: np.ndarray, b: np.ndarray, inner: str = "plain") -> np.ndarray:
    """(..., m, k) @ (..., k, n) with the serial inner-product order; the numpy definition.

    Vectorized over every output element, serial over k: under ``inner="plain"`` step k is
    one IEEE multiply of column k of ``a`` by row k of ``b`` (MUL's ``a * b``) and one IEEE
    add into the accumulator (ADD's ``acc + p``), written in place to keep the loop cheap;
    under ``inner="fma"`` it is one exact fused multiply-add into an accumulator that
    starts at +0.0 (``gtensor.fma.fma``).
    """
    k = a.shape[-1]
    out_shape = a.shape[:-1] + b.shape[-1:]
    if k == 0:
        return np.zeros(out_shape, a.dtype)
    cols = np.moveaxis(a, -1, 0)[..., None]  # cols[k]: (..., m, 1)
    rows = np.moveaxis(b, -2, 0)[..., None, :]  # rows[k]: (..., 1, n)
    if inner == "fma":
        return fma_chain(cols, rows, np.broadcast_shapes(out_shape, cols[0].shape))
    with np.errstate(all="ignore"):
        acc = np.multiply(cols[0], rows[0])
        prod = np.empty_like(acc)
        for kk in range(1, k):
            np.multiply(cols[kk], rows[kk], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def _check_inner(op: str, attrs: dict) -> None:
    inner = attrs.get("inner", "plain")
    if not isinstance(inner, str) or inner not in INNER:
        raise ValueError(f"{op}: inner is {inner!r}; expected one of {INNER} (the "
                         "inner-product contract)")
    for flag, arg in (("ta", "a"), ("tb", "b")):
        v = attrs.get(flag, False)
        if type(v) is not bool and not isinstance(v, np.bool_):
            raise TypeError(f"{op}: {flag} is {v!r}; expected a bool (True: read {arg} "
                            "transposed, its last two axes swapped)")


def _flags(op: str, attrs: dict) -> dict:
    """The attrs with ``ta`` / ``tb`` checked and made plain bools (False when absent)."""
    _check_inner(op, attrs)
    out = dict(attrs)
    out["ta"], out["tb"] = bool(attrs.get("ta", False)), bool(attrs.get("tb", False))
    return out


def _swap(shape: tuple, flag: bool) -> tuple:
    """``shape`` with its last two axes swapped when ``flag`` (the shape op(x) has)."""
    return (*shape[:-2], shape[-1], shape[-2]) if flag and len(shape) >= 2 else tuple(shape)


def _named(name: str, shape: tuple, flag: bool) -> str:
    """How an error names an operand: ``a (3, 4)``, or ``a^T (4, 3) (a (3, 4), ta=True)``."""
    if not flag:
        return f"{name} {shape}"
    return f"{name}^T {_swap(shape, True)} ({name} {shape}, t{name}=True)"


def _infer_matmul(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    attrs = _flags("matmul", attrs)
    ta, tb = attrs["ta"], attrs["tb"]
    a0, b0 = shapes_
    if len(a0) != 2 or len(b0) != 2:
        raise ValueError(f"matmul: expected 2-D operands, got a {a0} and b {b0} "
                         "(use bmm for batches)")
    a, b = _swap(a0, ta), _swap(b0, tb)
    if a[1] != b[0]:
        raise ValueError(f"matmul: inner dimensions differ: {_named('a', a0, ta)} @ "
                         f"{_named('b', b0, tb)} (expected op(a).shape[1] == op(b).shape[0], "
                         "op(x) = x transposed when its flag is set)" if ta or tb else
                         f"matmul: inner dimensions differ: a {a} @ b {b} "
                         f"(expected a.shape[1] == b.shape[0])")
    return (a[0], b[1]), attrs


def _infer_bmm(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    attrs = _flags("bmm", attrs)
    ta, tb = attrs["ta"], attrs["tb"]
    a0, b0 = shapes_
    if len(a0) != 3 or len(b0) != 3:
        raise ValueError(f"bmm: expected 3-D operands (batch, rows, cols), got a {a0} and b {b0}")
    if a0[0] != b0[0]:
        raise ValueError(f"bmm: batch sizes differ: a {a0} and b {b0} "
                         "(expected a.shape[0] == b.shape[0])")
    a, b = _swap(a0, ta), _swap(b0, tb)
    if a[2] != b[1]:
        raise ValueError(f"bmm: inner dimensions differ: {_named('a', a0, ta)} @ "
                         f"{_named('b', b0, tb)} (expected op(a).shape[2] == op(b).shape[1], "
                         "op(x) = x with its last two axes swapped when its flag is set)"
                         if ta or tb else
                         f"bmm: inner dimensions differ: a {a} @ b {b} "
                         "(expected a.shape[2] == b.shape[1])")
    return (a[0], a[1], b[2]), attrs


def reference(a: np.ndarray, b: np.ndarray, inner: str = "plain", ta: bool = False,
              tb: bool = False) -> np.ndarray:
    """The numpy definition of matmul / bmm: ``serial_matmul`` on op(a), op(b) (views)."""
    return serial_matmul(np.swapaxes(a, -1, -2) if ta else a,
                         np.swapaxes(b, -1, -2) if tb else b, inner)


def _launch(rt, ks, ins, out, inner="plain", ta=False, tb=False) -> None:
    a, b = ins
    if not out.size:
        return
    batch = a.shape[0] if a.ndim == 3 else 1
    m, n = out.shape[-2:]
    k = a.shape[-2] if ta else a.shape[-1]
    rt.launch(ks[kernel_base(inner)], grid_for(out.size), BLOCK,
              (a, b, out, batch, m, k, n, int(ta), int(tb)))


# Each backward inner product under the forward's contract, with flags in place of transpose
# copies. For c = op(a) @ op(b) with upstream g:
#   d op(a) = g @ op(b)^T, d op(b) = op(a)^T @ g, and da = d op(a) (transposed back if ta):
#   da = matmul(g, b, tb=not tb)         (ta False)    da = matmul(b, g, ta=tb, tb=True)  (ta)
#   db = matmul(a, g, ta=not ta)         (tb False)    db = matmul(g, a, ta=True, tb=ta)  (tb)
# Each output is the same chain of the same products as transpose-then-matmul's (a product's
# operands commute exactly), so the bits are those of the explicit-transpose composition.
def _grads(mm, g, a, b, needs, inner, ta, tb):
    ga = gb = None
    if needs[0]:
        ga = (mm(b, g, inner=inner, ta=tb, tb=True) if ta
              else mm(g, b, inner=inner, tb=not tb))
    if needs[1]:
        gb = (mm(g, a, inner=inner, ta=True, tb=ta) if tb
              else mm(a, g, inner=inner, ta=not ta))
    return ga, gb


def _matmul_vjp(be, g, ins, out, needs, inner="plain", ta=False, tb=False):
    return _grads(be.matmul, g, *ins, needs, inner, ta, tb)


def _bmm_vjp(be, g, ins, out, needs, inner="plain", ta=False, tb=False):
    return _grads(be.bmm, g, *ins, needs, inner, ta, tb)


_DEFAULTS = {"inner": "plain", "ta": False, "tb": False}
register(Op("matmul", ("a", "b"), ("inner", "ta", "tb"), _infer_matmul, reference, _kernels,
            _launch, _matmul_vjp, "op(a) (m, k) @ op(b) (k, n), serial inner products "
            "(op: transposed when ta / tb)", dict(_DEFAULTS), cpu=_cpu_kernels))
register(Op("bmm", ("a", "b"), ("inner", "ta", "tb"), _infer_bmm, reference, _kernels, _launch,
            _bmm_vjp, "op(a) (b, m, k) @ op(b) (b, k, n), serial inner products per batch "
            "(op: last two axes swapped when ta / tb)", dict(_DEFAULTS), cpu=_cpu_kernels))
