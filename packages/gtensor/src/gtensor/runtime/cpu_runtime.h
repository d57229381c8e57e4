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
#ifndef GTENSOR_CPU_RUNTIME_H
#define GTENSOR_CPU_RUNTIME_H

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__FMA__) || defined(__AVX512F__)
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
// a * b + c with one rounding in every lane (a broadcast): the x86 FMA instructions where the
// build has them (vfmadd; the one fused operation the kernels ask for -- -ffp-contract=off
// still keeps every other a * b + c unfused), else std::fma per lane (IEEE's fma on every
// target). Intrinsics, not a per-lane loop left to the vectorizer: GCC scalarizes some widths.
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

// ---- the plain contract's matmul register tiles -----------------------------------------------
// Which outputs a tile groups never changes a bit (each keeps its own chain); the form is a
// speed choice per core. AMD Zen 3 / Zen 4 (CPUID family 0x19: 256-bit FP pipes, the adds on
// pipes of their own) run plain's separate multiply + add fastest in tall tiles, 14 rows x one
// vector (Zen 4, 512-bit f64 from L1: 28.8 G multiply-adds/s against 19.8 for 8 x 2); every
// other core in 8 rows x 2 vectors (Zen 5, family 0x1A, 512-bit pipes: 12-23% faster than
// tall on the AE and 512^3 shapes; Intel). GCC 12 names Zen 4 and Zen 5 alike (znver3), so
// the core is read from CPUID at run time, once.
enum TileForm { TILES_BY_HOST = 0, TILES_TALL = 1, TILES_WIDE = 2 };
// TILES_BY_HOST, or a form forced for tests (gtcpu_set_matmul_tiles) so that both forms'
// branches run on any host
static int MATMUL_TILES = TILES_BY_HOST;

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

// the plain contract's tiles are tall (14 x 1) in this launch
static bool tall_tiles() {
    return MATMUL_TILES == TILES_TALL ||
           (MATMUL_TILES == TILES_BY_HOST && host_prefers_tall_tiles());
}

// ---- threads ---------------------------------------------------------------------------------
// Work (in multiply-adds or element operations) below which a launch stays on one thread:
// waking a worker costs microseconds, far more on a loaded machine. Tests lower it
// (gtcpu_set_parallel_work) so that every kernel's split is exercised on small arrays.
static long long PARALLEL_WORK = 1LL << 22;

// The machine's CPUs, asked once: std::thread::hardware_concurrency reads /sys on glibc
// (~6 us a call here, paid by every launch that splits, and by every matmul's split choice).
static int machine_threads() {
    static const int n = (int)std::thread::hardware_concurrency();
    return n;
}

static int thread_count() {
    const char* text = std::getenv("GTENSOR_CPU_THREADS");
    int n = text && *text ? std::atoi(text) : 0;
    if (n <= 0) n = machine_threads();
    if (n <= 0) n = 1;
    return n > 64 ? 64 : n;
}

// A pool of persistent workers. run(parts, fn) calls fn(p) once for every p in [0, parts),
// on the caller and the workers, and returns when all calls returned. One run at a time.
// After each job a worker spins (a pause loop) for up to SPIN_NS before it sleeps, and the
// caller spins as long for the workers to finish before it sleeps: a tape step's launches
// come tens of microseconds apart, and waking a sleeping thread costs about that again on a
// VM (measured ~50 us per launch on 2 KVM vCPUs: a 4 M multiply-add matmul took as long on 2
// threads as on 1). Spinning only waits; it decides nothing about who computes what.
class Pool {
  public:
    void run(long long parts, int threads, const std::function<void(long long)>& fn);
    ~Pool();

  private:
    static constexpr long long SPIN_NS = 100000;
    void loop();
    template <class Done>
    static void spin(Done done);
    std::mutex mu_, run_mu_;
    std::condition_variable wake_, finished_;
    std::vector<std::thread> workers_;
    const std::function<void(long long)>* job_ = nullptr;
    long long parts_ = 0;
    std::atomic<long long> done_{0};
    std::atomic<int> active_{0};
    std::atomic<unsigned long long> gen_{0};
    bool stop_ = false;
    std::atomic<long long> next_{0};
};

inline Pool::~Pool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
        ++gen_;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

// until done() or SPIN_NS have passed (the caller then sleeps on its condition variable)
template <class Done>
inline void Pool::spin(Done done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(SPIN_NS);
    while (!done()) {
        for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (std::chrono::steady_clock::now() > end) return;
    }
}

inline void Pool::loop() {
    FpEnv env;  // workers keep the IEEE default environment
    unsigned long long seen = 0;
    for (;;) {
        spin([&] { return gen_.load(std::memory_order_acquire) != seen; });
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return stop_ || gen_.load() != seen; });
        if (stop_) return;
        seen = gen_.load();
        if (job_ == nullptr) continue;  // a run that finished before this worker woke
        const std::function<void(long long)>* fn = job_;
        const long long parts = parts_;
        ++active_;
        lk.unlock();
        long long mine = 0;
        for (long long p; (p = next_.fetch_add(1)) < parts; ++mine) (*fn)(p);
        lk.lock();
        done_ += mine;
        --active_;
        finished_.notify_all();
    }
}

inline void Pool::run(long long parts, int threads, const std::function<void(long long)>& fn) {
    std::lock_guard<std::mutex> one(run_mu_);
    std::unique_lock<std::mutex> lk(mu_);
    while ((int)workers_.size() < threads - 1) workers_.emplace_back([this] { loop(); });
    job_ = &fn;
    parts_ = parts;
    done_ = 0;
    next_.store(0);
    ++gen_;
    lk.unlock();
    wake_.notify_all();
    long long mine = 0;
    for (long long p; (p = next_.fetch_add(1)) < parts; ++mine) fn(p);
    done_ += mine;
    const auto finished = [&] { return done_.load() == parts && active_.load() == 0; };
    spin(finished);
    lk.lock();
    // NOTE: wait for active_ == 0 too, so no worker still holds fn when it goes out of scope
    finished_.wait(lk, finished);
    job_ = nullptr;
}

static Pool& pool() {
    static Pool* p = new Pool();  // never destroyed: workers may outlive static destructors
    return *p;
}

// f(lo, hi) over [0, n) in contiguous chunks; one chunk (the caller's thread) when the work
// (n * cost) is small or one thread is asked for. Chunks never share an output.
template <class F>
static __forceinline__ void parallel_for(long long n, long long cost, F f) {
    if (n <= 0) return;
    if (n < 2 || n * cost < PARALLEL_WORK) {
        f(0LL, n);
        return;
    }
    int threads = thread_count();
    if (threads > n) threads = (int)n;
    if (threads <= 1) {
        f(0LL, n);
        return;
    }
    const long long chunk = (n + threads - 1) / threads;
    const std::function<void(long long)> part = [&](long long p) {
        const long long lo = p * chunk, hi = lo + chunk < n ? lo + chunk : n;
        if (lo < hi) f(lo, hi);
    };
    pool().run(threads, threads, part);
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
template <class F>
static __forceinline__ void rows2(int rank, const long long* shape, const long long* s1,
                                  long long base1, const long long* s2, long long base2,
                                  long long cost, F f) {
    const long long len = shape[rank - 1];
    long long nrows = 1;
    for (int d = 0; d < rank - 1; ++d) nrows *= shape[d];
    long long pieces = 1;
    if (len > 1 && nrows * len * cost >= PARALLEL_WORK) {
        const long long threads = thread_count();
        if (nrows < threads) pieces = (threads + nrows - 1) / nrows;
        if (pieces > len) pieces = len;
    }
    const long long plen = (len + pieces - 1) / pieces;
    const long long step1 = s1[rank - 1], step2 = s2[rank - 1];
    parallel_for(nrows * pieces, plen * cost, [=](long long lo, long long hi) {
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

#endif  // GTENSOR_CPU_RUNTIME_H
