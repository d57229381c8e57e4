// sim_runtime.h - run gtensor's CUDA-dialect kernels on the CPU, bit-identically.
//
// Compile with: g++ -O2 -ffp-contract=off -fno-fast-math -fPIC -shared -std=c++17 -U_FORTIFY_SOURCE
//
// Execution model: one block at a time per OS thread. Kernels without __syncthreads run as a
// plain loop over blocks and threads. Kernels with barriers run each thread of a block as a
// fiber; __syncthreads switches to the next live fiber (round robin), so all threads of the
// block reach a barrier before any passes it. Fibers are switched with _setjmp/_longjmp and
// bootstrapped once with makecontext/setcontext; they live in a thread_local pool with mmap'ed
// stacks (lazily committed, guard page below) and are reused across launches.
// __shared__ storage is static thread_local: per OS thread, therefore per running block.
#ifndef GTENSOR_SIM_RUNTIME_H
#define GTENSOR_SIM_RUNTIME_H

#undef _FORTIFY_SOURCE  // glibc's fortified longjmp aborts when jumping between fiber stacks

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

// ---- CUDA keywords --------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __shared__ static thread_local

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
};

static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

// ---- intrinsics (exact IEEE semantics; SSE2 arithmetic rounds to nearest under MXCSR 0x1F80) -
static __forceinline__ double __dadd_rn(double a, double b) { return a + b; }
static __forceinline__ double __dsub_rn(double a, double b) { return a - b; }
static __forceinline__ double __dmul_rn(double a, double b) { return a * b; }
static __forceinline__ double __ddiv_rn(double a, double b) { return a / b; }
static __forceinline__ double __dsqrt_rn(double a) { return std::sqrt(a); }
static __forceinline__ float __fadd_rn(float a, float b) { return a + b; }
static __forceinline__ float __fsub_rn(float a, float b) { return a - b; }
static __forceinline__ float __fmul_rn(float a, float b) { return a * b; }
static __forceinline__ float __fdiv_rn(float a, float b) { return a / b; }
static __forceinline__ float __fsqrt_rn(float a) { return std::sqrt(a); }

static __forceinline__ long long __double_as_longlong(double d) {
    long long r;
    std::memcpy(&r, &d, sizeof r);
    return r;
}
static __forceinline__ double __longlong_as_double(long long i) {
    double r;
    std::memcpy(&r, &i, sizeof r);
    return r;
}
static __forceinline__ int __float_as_int(float f) {
    int r;
    std::memcpy(&r, &f, sizeof r);
    return r;
}
static __forceinline__ float __int_as_float(int i) {
    float r;
    std::memcpy(&r, &i, sizeof r);
    return r;
}

static __forceinline__ float __double2float_rn(double d) { return static_cast<float>(d); }
static __forceinline__ double __float2double(float f) { return static_cast<double>(f); }
static __forceinline__ double __ll2double_rn(long long i) { return static_cast<double>(i); }

// Truncating conversion with the GPU's cvt.rzi.s64.f64 semantics: saturating, NaN -> 0.
static __forceinline__ long long __double2ll_rz(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d < -9223372036854775808.0) return INT64_MIN;
    return static_cast<long long>(d);
}

// rint/floor/fabs with float and double overloads, as in CUDA; rintf/floorf/fabsf come from libm.
using std::fabs;
using std::floor;
using std::rint;

// ---- runtime ----------------------------------------------------------------------------------
namespace gtsim {

// glibc's _setjmp/_longjmp (no signal mask). GCC's __builtin_setjmp is not usable here: the
// optimizer deletes receivers it cannot see a non-local goto reaching.
using JmpBuf = jmp_buf;
#define GTSIM_SETJMP(buf) _setjmp(buf)
#define GTSIM_LONGJMP(buf) _longjmp(buf, 1)

enum Status : int { kOk = 0, kNoStack = 1, kBarrierWithoutFibers = 2 };

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kMaxThreads = 1024;

struct Fiber {
    JmpBuf entry;   // top of the fiber's trampoline: jumping here starts the current task
    JmpBuf resume;  // where the fiber waits inside __syncthreads
    void* mem = nullptr;
    size_t bytes = 0;
};

// All scheduler state is per OS thread, so launches from several threads never interact.
struct State {
    Fiber* fibers[kMaxThreads] = {};
    int pool = 0;           // fibers created so far
    int nthreads = 0;       // threads in the running block
    int cur = 0;            // fiber now running
    int live = 0;           // fibers of the block that have not returned
    bool fiber_mode = false;
    bool started[kMaxThreads] = {};
    bool done[kMaxThreads] = {};
    void (*task)(void*) = nullptr;
    void* task_arg = nullptr;
    JmpBuf sched;          // the launching (OS thread) context
    JmpBuf escape;         // plain-mode error exit
    ucontext_t boot;        // only used while bootstrapping a fiber

    ~State() {
        for (int i = 0; i < pool; ++i) {
            munmap(fibers[i]->mem, fibers[i]->bytes);
            delete fibers[i];
        }
    }
};

// One State per OS thread, created on first launch and destroyed (stacks unmapped) at thread
// exit. The raw pointer is trivially initialized, so reading it on the barrier path is one TLS
// lookup with no guard; launch() installs it before any fiber runs.
static thread_local State* tl_state = nullptr;

static __forceinline__ State& state() { return *tl_state; }

static State& install_state() {
    static thread_local State owned;
    tl_state = &owned;
    return owned;
}

static __forceinline__ void set_thread_index(int linear) {
    const unsigned bx = blockDim.x, by = blockDim.y;
    threadIdx.x = static_cast<unsigned>(linear) % bx;
    threadIdx.y = (static_cast<unsigned>(linear) / bx) % by;
    threadIdx.z = static_cast<unsigned>(linear) / (bx * by);
}

// Jump to fiber i: start it at its entry or resume it at its barrier. Never returns.
[[noreturn]] __attribute__((noinline)) static void enter(State& s, int i) {
    s.cur = i;
    set_thread_index(i);
    if (s.started[i]) GTSIM_LONGJMP(s.fibers[i]->resume);
    s.started[i] = true;
    GTSIM_LONGJMP(s.fibers[i]->entry);
}

// Index of the next live fiber after cur, wrapping around (cur itself when it is the only one).
static int next_live(const State& s) {
    int j = s.cur;
    do {
        j = (j + 1 == s.nthreads) ? 0 : j + 1;
    } while (s.done[j]);
    return j;
}

// Run this fiber's kernel body for the current block, then hand over. Never returns.
[[noreturn]] __attribute__((noinline)) static void run_task() {
    State& s = state();
    s.task(s.task_arg);
    s.done[s.cur] = true;
    if (--s.live == 0) GTSIM_LONGJMP(s.sched);
    enter(s, next_live(s));
}

// Entry point of every fiber's stack: park at `entry`; each jump there runs one task.
static void trampoline() {
    State& s = state();
    if (GTSIM_SETJMP(s.fibers[s.pool]->entry) != 0) run_task();
    GTSIM_LONGJMP(s.sched);
}

// Create one more pooled fiber (mmap'ed stack with a guard page). False when out of memory.
static bool grow_pool(State& s) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = kStackBytes + page;
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED) return false;
    mprotect(mem, page, PROT_NONE);  // stack grows down into the guard page
    Fiber* f = new Fiber;
    f->mem = mem;
    f->bytes = bytes;
    s.fibers[s.pool] = f;
    getcontext(&s.boot);
    s.boot.uc_stack.ss_sp = static_cast<char*>(mem) + page;
    s.boot.uc_stack.ss_size = kStackBytes;
    s.boot.uc_link = nullptr;
    makecontext(&s.boot, trampoline, 0);
    if (!GTSIM_SETJMP(s.sched)) setcontext(&s.boot);  // trampoline jumps back once parked
    ++s.pool;
    return true;
}

// Called by the kernel: out of line so the compiler reloads memory (globals) after it.
__attribute__((noinline)) static void syncthreads_impl() {
    asm volatile("" ::: "memory");
    State& s = state();
    if (!s.fiber_mode) {
        if (blockDim.x * blockDim.y * blockDim.z == 1) return;
        GTSIM_LONGJMP(s.escape);
    }
    if (s.live > 1 && !GTSIM_SETJMP(s.fibers[s.cur]->resume)) enter(s, next_live(s));
    asm volatile("" ::: "memory");
}

// Saves the floating-point control state and installs IEEE defaults for a launch.
class FpEnvGuard {
  public:
    FpEnvGuard() {
#if defined(__x86_64__) || defined(__i386__)
        saved_ = _mm_getcsr();
        _mm_setcsr(0x1F80);  // round to nearest, no FTZ/DAZ, all exceptions masked
#elif defined(__aarch64__)
        asm volatile("mrs %0, fpcr" : "=r"(saved_));
        asm volatile("msr fpcr, %0" ::"r"(uint64_t{0}));
#endif
    }
    ~FpEnvGuard() {
#if defined(__x86_64__) || defined(__i386__)
        _mm_setcsr(saved_);
#elif defined(__aarch64__)
        asm volatile("msr fpcr, %0" ::"r"(saved_));
#endif
    }
    FpEnvGuard(const FpEnvGuard&) = delete;
    FpEnvGuard& operator=(const FpEnvGuard&) = delete;

  private:
#if defined(__aarch64__)
    uint64_t saved_ = 0;
#else
    unsigned int saved_ = 0;
#endif
};

static void set_dims(const unsigned* dims) {
    gridDim = dim3(dims[0], dims[1], dims[2]);
    blockDim = dim3(dims[3], dims[4], dims[5]);
}

// Run a barrier-free kernel: a plain loop over blocks and threads.
template <class F>
int run_plain(const unsigned* dims, F&& body) {
    FpEnvGuard fp;
    State& s = install_state();
    set_dims(dims);
    s.fiber_mode = false;
    if (GTSIM_SETJMP(s.escape)) return kBarrierWithoutFibers;
    for (unsigned bz = 0; bz < gridDim.z; ++bz)
        for (unsigned by = 0; by < gridDim.y; ++by)
            for (unsigned bx = 0; bx < gridDim.x; ++bx) {
                blockIdx = uint3{bx, by, bz};
                for (unsigned tz = 0; tz < blockDim.z; ++tz)
                    for (unsigned ty = 0; ty < blockDim.y; ++ty)
                        for (unsigned tx = 0; tx < blockDim.x; ++tx) {
                            threadIdx = uint3{tx, ty, tz};
                            body();
                        }
            }
    return kOk;
}

// Run all fibers of the current block until every one has returned.
__attribute__((noinline)) static void run_block(State& s) {
    std::memset(s.started, 0, sizeof s.started);
    std::memset(s.done, 0, sizeof s.done);
    s.live = s.nthreads;
    if (!GTSIM_SETJMP(s.sched)) enter(s, 0);  // the last fiber to finish jumps back here
}

template <class F>
void call_task(void* f) {
    (*static_cast<F*>(f))();
}

// Run a kernel with barriers: each block's threads run as fibers.
template <class F>
int run_fibers(const unsigned* dims, F&& body) {
    FpEnvGuard fp;
    State& s = install_state();
    set_dims(dims);
    const int n = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
    while (s.pool < n)
        if (!grow_pool(s)) return kNoStack;
    using Body = std::remove_reference_t<F>;
    s.task = &call_task<Body>;
    s.task_arg = const_cast<void*>(static_cast<const void*>(&body));
    s.nthreads = n;
    s.fiber_mode = true;
    for (unsigned bz = 0; bz < gridDim.z; ++bz)
        for (unsigned by = 0; by < gridDim.y; ++by)
            for (unsigned bx = 0; bx < gridDim.x; ++bx) {
                blockIdx = uint3{bx, by, bz};
                run_block(s);
            }
    s.fiber_mode = false;
    return kOk;
}

}  // namespace gtsim

static inline void __syncthreads() { gtsim::syncthreads_impl(); }

#endif  // GTENSOR_SIM_RUNTIME_H
