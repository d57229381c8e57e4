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
//
// Schedules (a race detector; set per process with gtsim_set_schedule, which gtensor calls
// from $GTENSOR_SIM_SCHEDULE before launches, so changing it needs no recompile):
//   0 forward  - blocks and threads in index order; fibers round robin from thread 0;
//   1 reverse  - blocks and threads in descending order; fibers in descending order;
//   2 shuffle  - blocks in a seeded pseudo-random order, threads of barrier-free kernels in a
//                seeded permutation per block, and fibers in a fresh seeded permutation at
//                every barrier (every live fiber still runs once per barrier phase).
// A correct kernel (no race, every needed barrier present) gives the same bits under all three.
#ifndef GTENSOR_SIM_RUNTIME_H
#define GTENSOR_SIM_RUNTIME_H

#undef _FORTIFY_SOURCE  // glibc's fortified longjmp aborts when jumping between fiber stacks

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "common_runtime.h"  // __global__ & co, the intrinsics, gtrt::FpEnv

// ---- the CUDA words only kernels run by the simulator use ---------------------------------
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

enum Schedule : int { kForward = 0, kReverse = 1, kShuffle = 2 };

// The process-wide schedule (read once per launch).
static std::atomic<int> g_schedule{kForward};
static std::atomic<unsigned long long> g_schedule_seed{0};

// splitmix64: the seeded generator behind the shuffle schedule.
static __forceinline__ unsigned long long splitmix64(unsigned long long& x) {
    unsigned long long z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

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
    int schedule = kForward;  // this launch's schedule
    unsigned long long rng = 0;  // shuffle generator state
    int pos = 0;            // position of cur in order[]
    int order[kMaxThreads] = {};  // the fibers' order within one barrier phase
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

// order[0..n) = 0..n-1 (forward), n-1..0 (reverse) or a seeded permutation (shuffle).
static void make_order(State& s, int* order, int n) {
    for (int i = 0; i < n; ++i) order[i] = s.schedule == kReverse ? n - 1 - i : i;
    if (s.schedule != kShuffle) return;
    for (int i = n - 1; i > 0; --i) {  // Fisher-Yates
        const int j = static_cast<int>(splitmix64(s.rng) % static_cast<unsigned>(i + 1));
        const int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

// Index of the next live fiber after cur in the phase order, wrapping around (cur itself when
// it is the only one). Under shuffle a wrap starts a new phase with a new permutation.
static int next_live(State& s) {
    if (s.schedule == kForward) {
        int j = s.cur;
        do {
            j = (j + 1 == s.nthreads) ? 0 : j + 1;
        } while (s.done[j]);
        return j;
    }
    do {
        if (++s.pos == s.nthreads) {
            s.pos = 0;
            if (s.schedule == kShuffle) make_order(s, s.order, s.nthreads);
        }
    } while (s.done[s.order[s.pos]]);
    return s.order[s.pos];
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

static void set_dims(const unsigned* dims) {
    gridDim = dim3(dims[0], dims[1], dims[2]);
    blockDim = dim3(dims[3], dims[4], dims[5]);
}

// Read the process-wide schedule for this launch and seed the shuffle generator.
static void begin_launch(State& s) {
    s.schedule = g_schedule.load(std::memory_order_relaxed);
    s.rng = g_schedule_seed.load(std::memory_order_relaxed);
}

// Linear block b of the launch in the schedule's block order (a bijection on [0, nb)).
static __forceinline__ unsigned long long block_at(const State& s, unsigned long long b,
                                                   unsigned long long nb, unsigned long long mul,
                                                   unsigned long long add) {
    if (s.schedule == kReverse) return nb - 1 - b;
    if (s.schedule == kShuffle) return (b * mul + add) % nb;  // mul coprime to nb
    return b;
}

static unsigned long long gcd(unsigned long long a, unsigned long long b) {
    while (b) {
        const unsigned long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// The block-order multiplier and offset of a shuffled launch over nb blocks.
static void block_affine(State& s, unsigned long long nb, unsigned long long& mul,
                         unsigned long long& add) {
    mul = 1;
    add = 0;
    if (s.schedule != kShuffle || nb < 2) return;
    mul = splitmix64(s.rng) % nb;
    while (gcd(mul, nb) != 1) mul = (mul + 1) % nb;
    add = splitmix64(s.rng) % nb;
}

static void set_block_index(unsigned long long linear) {
    blockIdx.x = static_cast<unsigned>(linear % gridDim.x);
    blockIdx.y = static_cast<unsigned>((linear / gridDim.x) % gridDim.y);
    blockIdx.z = static_cast<unsigned>(linear / (static_cast<unsigned long long>(gridDim.x) *
                                                 gridDim.y));
}

// Run a barrier-free kernel under a non-forward schedule: blocks and threads permuted.
template <class F>
void run_plain_permuted(State& s, F& body) {
    const unsigned long long nb =
        static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z;
    const int nt = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
    unsigned long long mul, add;
    block_affine(s, nb, mul, add);
    for (unsigned long long b = 0; b < nb; ++b) {
        set_block_index(block_at(s, b, nb, mul, add));
        make_order(s, s.order, nt);
        for (int t = 0; t < nt; ++t) {
            set_thread_index(s.order[t]);
            body();
        }
    }
}

// Run a barrier-free kernel: a plain loop over blocks and threads.
template <class F>
int run_plain(const unsigned* dims, F&& body) {
    gtrt::FpEnv fp;
    State& s = install_state();
    set_dims(dims);
    begin_launch(s);
    s.fiber_mode = false;
    if (GTSIM_SETJMP(s.escape)) return kBarrierWithoutFibers;
    if (s.schedule != kForward) {
        run_plain_permuted(s, body);
        return kOk;
    }
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
    s.pos = 0;
    if (s.schedule != kForward) make_order(s, s.order, s.nthreads);
    const int first = s.schedule == kForward ? 0 : s.order[0];
    if (!GTSIM_SETJMP(s.sched)) enter(s, first);  // the last fiber to finish jumps back here
}

template <class F>
void call_task(void* f) {
    (*static_cast<F*>(f))();
}

// Run a kernel with barriers: each block's threads run as fibers.
template <class F>
int run_fibers(const unsigned* dims, F&& body) {
    gtrt::FpEnv fp;
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
    begin_launch(s);
    const unsigned long long nb =
        static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z;
    unsigned long long mul, add;
    block_affine(s, nb, mul, add);
    for (unsigned long long b = 0; b < nb; ++b) {
        set_block_index(block_at(s, b, nb, mul, add));
        run_block(s);
    }
    s.fiber_mode = false;
    return kOk;
}

}  // namespace gtsim

// Set the schedule of every later launch in this process: 0 forward, 1 reverse, 2 shuffle
// (seeded by `seed`). Returns the previous schedule.
extern "C" int gtsim_set_schedule(int mode, unsigned long long seed) {
    gtsim::g_schedule_seed.store(seed, std::memory_order_relaxed);
    return gtsim::g_schedule.exchange(mode, std::memory_order_relaxed);
}

static inline void __syncthreads() { gtsim::syncthreads_impl(); }

#endif  // GTENSOR_SIM_RUNTIME_H
