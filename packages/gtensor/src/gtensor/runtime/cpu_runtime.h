// cpu_runtime.h - the host half of gtensor's cpu backend: ops compiled as CPU loops.
//
// Compile with: g++ -O3 -march=native -ffp-contract=off -fno-fast-math -fno-math-errno -fPIC
//
// The intrinsics the scalar language emits are common_runtime.h's plain IEEE operators (shared
// with sim_runtime.h); every entry point runs under its gtrt::FpEnv (MXCSR 0x1F80), and the
// compiler may only vectorize them, never contract or reorder them (-ffp-contract=off, no
// fast-math). -fno-math-errno only lets sqrt/rint/floor inline.
//
// Parallelism never changes a bit: gtcpu::parallel_for splits *independent outputs* (rows of
// a matmul, elements of a map) into contiguous chunks; every output is computed by one thread
// in its defined order. The thread count is $GTENSOR_CPU_THREADS (default: the CPUs of the
// machine), read at every launch large enough to be split.
//
// What a kernel needs, and nothing heavier, so that one kernel compiles in well under a second
// (the cpu module builds each kernel as a library of its own, on first use). The thread pool
// and the settings every kernel reads live in one place per process: a kernel library is
// compiled with GTCPU_SHARD and bound (gtcpu_bind) to the runtime library's `Shared` state; any
// other library (the runtime itself, a ggpu-fuse step) includes cpu_pool.h and owns its state.
#ifndef GTENSOR_CPU_RUNTIME_H
#define GTENSOR_CPU_RUNTIME_H

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

// vfma (below) is the one user of the intrinsics header, a third of a kernel library's compile:
// a kernel library has both only when its kernels call gtcpu::vfma (gtensor.runtime.cpu
// defines GTCPU_VFMA for them; any other that called it would not compile)
#if !defined(GTCPU_SHARD) || defined(GTCPU_VFMA)
#define GTCPU_HAS_VFMA 1
#endif
#if defined(GTCPU_HAS_VFMA) && (defined(__FMA__) || defined(__AVX512F__))
#include <immintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common_runtime.h"  // the CUDA words, the intrinsics, gtrt::FpEnv

namespace gtcpu {

// The IEEE default floating-point environment for the length of a launch (common_runtime.h).
using FpEnv = gtrt::FpEnv;

// ---- SIMD lanes (GCC/Clang vector extensions) ------------------------------------------------
// For kernels that compute independent outputs side by side: each lane of a vector + or * is
// one IEEE operation, rounded exactly as the scalar __dadd_rn / __dmul_rn (no contraction under
// -ffp-contract=off); a scalar operand is broadcast to every lane.
template <class S, int N>
struct Vec {
    typedef S type __attribute__((vector_size(N * sizeof(S))));
};
// The widest vector the build's target has registers for (64 bytes with AVX-512, 32 with AVX,
// else 16): kernels size their lanes by it. A wider GCC vector than the target's registers is
// lowered through the stack (an AVX2 build of 64-byte tiles ran the matmul at 0.46 G
// multiply-adds/s, every broadcast a store-forwarding stall). Lanes only decide which
// independent outputs run side by side: no bit depends on this.
#if defined(__AVX512F__)
constexpr int VEC_BYTES = 64;
#elif defined(__AVX__)
constexpr int VEC_BYTES = 32;
#else
constexpr int VEC_BYTES = 16;
#endif
template <class V, class S>
static __forceinline__ V vload(const S* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class V, class S>
static __forceinline__ void vstore(S* p, V v) {
    std::memcpy(p, &v, sizeof v);
}
template <int N>
using Int = std::integral_constant<int, N>;
// the values a flag can take: a run-time one either, a std::integral_constant its own (so a
// branch on it need not be instantiated for the other)
template <class F>
struct Flag {
    static constexpr bool can_be_true = true, can_be_false = true;
};
template <class I, I v>
struct Flag<std::integral_constant<I, v>> {
    static constexpr bool can_be_true = v != 0, can_be_false = v == 0;
};
// the cpu product's default panel source (cpu_product_template.h's `pack`): b's own columns
struct NoPack {
    template <class... A>
    void operator()(A...) const {}
};

// ---- first stages (gtensor.scalar.dsl: <f>_first) ------------------------------------------
// A correctly rounded function's first stage runs its fast path for a block of elements as
// one vectorized loop; a lane it cannot decide sets `bad` and takes the whole function after
// (gtensor.ops.forms.Map). The stage spells f2i and table reads without branches, so that the
// compiler keeps every lane's loads unconditional (gathers): a conversion outside +-2^31 (or
// of NaN) marks the lane bad (its value is not used) and converts 0 instead -- within that
// range it is __double2ll_rz exactly, and a 32-bit conversion, which AVX2 has as a vector
// instruction (the 64-bit one needs AVX-512DQ; the stages' f2i are reduction indices, far
// inside it); a table index is clamped to the table (an index the whole function reads is in
// range; a bad lane's may not be). The device functions emit their first stages only where
// this header defines GTCPU_FIRST_STAGES (not for sim or CUDA).
#define GTCPU_FIRST_STAGES 1
static __forceinline__ long long f2i_first(double d, bool& bad) {
    const bool in = std::fabs(d) < 0x1p31;
    bad = bad | !in;
    long long b;
    std::memcpy(&b, &d, sizeof b);
    b &= -(long long)in;  // the bits of d, or of +0.0
    double c;
    std::memcpy(&c, &b, sizeof c);
    return static_cast<long long>(static_cast<int>(c));
}
static __forceinline__ long long index_first(long long i, long long last) {
    return i < 0 ? 0 : (i > last ? last : i);
}
// a * b + c with one rounding in every lane (a broadcast): the x86 FMA instructions where the
// build has them (vfmadd; the one fused operation the kernels ask for -- -ffp-contract=off
// still keeps every other a * b + c unfused), else std::fma per lane (IEEE's fma on every
// target). Intrinsics, not a per-lane loop left to the vectorizer: GCC scalarizes some widths.
#ifdef GTCPU_HAS_VFMA
template <class V, class S>
static __forceinline__ V vfma(S a, V b, V c) {
    constexpr int N = sizeof(V) / sizeof(S);
#if defined(__AVX512F__)
    if constexpr (std::is_same<S, double>::value && N == 8)
        return (V)_mm512_fmadd_pd(_mm512_set1_pd(a), (__m512d)b, (__m512d)c);
    if constexpr (std::is_same<S, float>::value && N == 16)
        return (V)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)c);
#endif
#if defined(__FMA__)
    if constexpr (std::is_same<S, double>::value && N == 4)
        return (V)_mm256_fmadd_pd(_mm256_set1_pd(a), (__m256d)b, (__m256d)c);
    if constexpr (std::is_same<S, double>::value && N == 2)
        return (V)_mm_fmadd_pd(_mm_set1_pd(a), (__m128d)b, (__m128d)c);
    if constexpr (std::is_same<S, float>::value && N == 8)
        return (V)_mm256_fmadd_ps(_mm256_set1_ps(a), (__m256)b, (__m256)c);
    if constexpr (std::is_same<S, float>::value && N == 4)
        return (V)_mm_fmadd_ps(_mm_set1_ps(a), (__m128)b, (__m128)c);
#endif
    V r;
    for (int i = 0; i < N; ++i) r[i] = std::fma(a, (S)b[i], (S)c[i]);
    return r;
}
#endif  // GTCPU_HAS_VFMA

// ---- the plain contract's matmul register tiles -----------------------------------------------
// Which outputs a tile groups never changes a bit (each keeps its own chain); the form is a
// speed choice per core. AMD Zen 3 / Zen 4 (CPUID family 0x19: 256-bit FP pipes, the adds on
// pipes of their own) run plain's separate multiply + add fastest in tall tiles, 14 rows x one
// vector (Zen 4, 512-bit f64 from L1: 28.8 G multiply-adds/s against 19.8 for 8 x 2); every
// other core in 8 rows x 2 vectors (Zen 5, family 0x1A, 512-bit pipes: 12-23% faster than
// tall on the AE and 512^3 shapes; Intel). GCC 12 names Zen 4 and Zen 5 alike (znver3), so
// the core is read from CPUID at run time, once.
enum TileForm { TILES_BY_HOST = 0, TILES_TALL = 1, TILES_WIDE = 2 };

static bool host_prefers_tall_tiles() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool tall = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
        const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
        if (!amd || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
        const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);  // AuthenticAMD
        return family == 0x19;
    }();
    return tall;
#else
    return false;
#endif
}


// ---- the state a process shares: settings and the thread pool ------------------------------
// parts(ctx, p) for every p in [0, parts), on `threads` threads (the caller's included); returns
// when all calls returned (cpu_pool.h's Pool)
typedef void (*PartFn)(void* ctx, long long p);
struct Shared {
    // Work (in multiply-adds or element operations) below which a launch stays on one thread:
    // a split costs a few microseconds while the pool's workers still spin from the last
    // launch (a step's launches come microseconds apart), tens when they sleep. Tests lower it
    // (gtcpu_set_parallel_work) so that every kernel's split is exercised on small arrays.
    // 1 << 17 (a map split from 32 K elements, a float64 product from 16 K multiply-adds),
    // measured A/B against 1 << 22 on 2 threads: rung 8b's ResNet step -8 / -20% (f64, two
    // runs) and -19 / -20% (f32),
    // rung 9's GPT step replayed -12% / -14%, its tape -8%; 64^3 / 200x64x32 f64 products
    // 14 / 20 -> 12 / 14 us, 32x64x64 9 -> 9.3 us. Then 1 << 14 (a map splits from 4 K
    // elements), with each thread given at least half of it (parallel_for), measured A/B
    // against 1 << 17 in one process on 2 threads of the Emerald Rapids Xeon (medians of 5
    // round robins, f64 / f32): the GPT's replayed step -9 / -5%, its tape -8.5 / -5%, the
    // CNN bench's replayed step -7 / -7%, its tape -8.5 / -14%, the AE's tape -4 / -4%.
    long long parallel_work;
    // TILES_BY_HOST, or a form forced for tests (gtcpu_set_matmul_tiles) so that both forms'
    // branches run on any host
    int matmul_tiles;
    // the machine's CPUs, asked once (std::thread::hardware_concurrency reads /sys on glibc,
    // ~6 us a call here, paid by every launch that splits)
    int machine_threads;
    void (*run)(long long parts, int threads, PartFn fn, void* ctx);
};
constexpr long long DEFAULT_PARALLEL_WORK = 1LL << 14;
#ifdef GTCPU_SHARD
// the runtime library's state, set by gtcpu_bind (the shard's launchers) before any launch
static Shared* SHARED = nullptr;
#else
static void pool_run(long long parts, int threads, PartFn fn, void* ctx);  // cpu_pool.h
static Shared LOCAL_SHARED = {DEFAULT_PARALLEL_WORK, TILES_BY_HOST, 0, pool_run};
static Shared* const SHARED = &LOCAL_SHARED;
#endif

// the plain contract's tiles are tall (14 x 1) in this launch
static bool tall_tiles() {
    const int form = SHARED->matmul_tiles;
    return form == TILES_TALL || (form == TILES_BY_HOST && host_prefers_tall_tiles());
}

static int thread_count() {
    const char* text = std::getenv("GTENSOR_CPU_THREADS");
    int n = text && *text ? std::atoi(text) : 0;
    if (n <= 0) n = SHARED->machine_threads;
    if (n <= 0) n = 1;
    return n > 64 ? 64 : n;
}

// f(lo, hi) over [0, n) in contiguous chunks; one chunk (the caller's thread) when the work
// (n * cost) is small or one thread is asked for; otherwise a chunk a thread, each with at
// least half the split threshold's work (a launch just past it runs on two threads, a bigger
// one on more). Chunks never share an output.
template <class F>
static __forceinline__ void parallel_for(long long n, long long cost, F f) {
    if (n <= 0) return;
    const long long work = n * cost;
    if (n < 2 || work < SHARED->parallel_work) {
        f(0LL, n);
        return;
    }
    int threads = thread_count();
    const long long least = SHARED->parallel_work > 1 ? SHARED->parallel_work / 2 : 1;
    if (threads > work / least) threads = (int)(work / least);
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        f(0LL, n);
        return;
    }
    const long long chunk = (n + threads - 1) / threads;
    auto part = [&](long long p) {
        const long long lo = p * chunk, hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi) f(lo, hi);
    };
    SHARED->run(threads, threads,
                [](void* ctx, long long p) { (*static_cast<decltype(part)*>(ctx))(p); }, &part);
}

// Add to o1 and o2 the element offsets, in two strided views, of position `index` of the
// row-major shape[0..dims).
static __forceinline__ void offsets2(int dims, const long long* shape, const long long* s1,
                                     const long long* s2, long long index, long long& o1,
                                     long long& o2) {
    for (int d = dims - 1; d >= 0; --d) {
        const long long c = index % shape[d];
        index /= shape[d];
        o1 += c * s1[d];
        o2 += c * s2[d];
    }
}

// Visit the row-major positions of `shape` (rank >= 1) one innermost row at a time:
// f(at, off1, off2, len, step1, step2) with `at` the row-major index of the first position,
// the element offsets of that position in two strided views and their strides along the row.
// Rows are split across threads; when there are fewer rows than threads (a contiguous array
// collapses to one row), each row is cut into pieces, visited as rows of their own.
// rows2 steps the coordinates of up to this many outer axes (more: each row decoded)
constexpr int ROW_WALK_DIMS = 15;

template <class F>
static __forceinline__ void rows2(int rank, const long long* shape, const long long* s1,
                                  long long base1, const long long* s2, long long base2,
                                  long long cost, F f) {
    const long long len = shape[rank - 1];
    long long nrows = 1;
    for (int d = 0; d < rank - 1; ++d) nrows *= shape[d];
    long long pieces = 1;
    if (len > 1 && nrows * len * cost >= SHARED->parallel_work) {
        const long long threads = thread_count();
        if (nrows < threads) pieces = (threads + nrows - 1) / nrows;
        if (pieces > len) pieces = len;
    }
    const long long plen = (len + pieces - 1) / pieces;
    const long long step1 = s1[rank - 1], step2 = s2[rank - 1];
    parallel_for(nrows * pieces, plen * cost, [=](long long lo, long long hi) {
        if (pieces == 1 && rank - 1 <= ROW_WALK_DIMS) {
            // whole rows lo..hi: the first one's coordinates decoded, the next ones stepped
            // (an odometer over shape[0..rank-1), no division a row)
            const int dims = rank - 1;
            long long c[ROW_WALK_DIMS + 1];
            long long o1 = base1, o2 = base2, rest = lo;
            for (int d = dims - 1; d >= 0; --d) {
                c[d] = rest % shape[d];
                rest /= shape[d];
                o1 += c[d] * s1[d];
                o2 += c[d] * s2[d];
            }
            for (long long r = lo; r < hi; ++r) {
                f(r * len, o1, o2, len, step1, step2);
                for (int d = dims - 1; d >= 0; --d) {
                    o1 += s1[d];
                    o2 += s2[d];
                    if (++c[d] < shape[d]) break;
                    o1 -= c[d] * s1[d];
                    o2 -= c[d] * s2[d];
                    c[d] = 0;
                }
            }
            return;
        }
        for (long long i = lo; i < hi; ++i) {
            const long long r = i / pieces, start = (i % pieces) * plen;
            if (start >= len) continue;
            long long o1 = base1, o2 = base2;
            offsets2(rank - 1, shape, s1, s2, r, o1, o2);
            const long long count = len - start < plen ? len - start : plen;
            f(r * len + start, o1 + start * step1, o2 + start * step2, count, step1, step2);
        }
    });
}

}  // namespace gtcpu

#ifndef GTCPU_SHARD
#include "cpu_pool.h"  // the pool behind LOCAL_SHARED
#endif

#endif  // GTENSOR_CPU_RUNTIME_H
