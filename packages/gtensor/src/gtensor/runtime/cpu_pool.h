// cpu_pool.h - the thread pool behind cpu_runtime.h's parallel_for, and the state of the
// library that owns it (the cpu runtime library, one per process): included by cpu_runtime.h
// unless GTCPU_SHARD (a kernel library or a ggpu-fuse step, bound to the runtime library's
// state instead).
//
// A kernel never sees the pool: gtcpu::parallel_for calls SHARED->run with a plain function
// pointer and its context, so kernel libraries compile without <thread> / <mutex> / <functional>.
#ifndef GTENSOR_CPU_POOL_H
#define GTENSOR_CPU_POOL_H

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gtcpu {

// A pool of persistent workers. run(parts, threads, fn, ctx) calls fn(ctx, p) once for every p
// in [0, parts), on the caller and the workers, and returns when all calls returned. One run at
// a time.
// After each job a worker spins (a pause loop) for up to SPIN_NS before it sleeps, and the
// caller spins as long for the workers to finish before it sleeps: a tape step's launches
// come tens of microseconds apart, and waking a sleeping thread costs about that again on a
// VM (measured ~50 us per launch on 2 KVM vCPUs: a 4 M multiply-add matmul took as long on 2
// threads as on 1). Spinning only waits; it decides nothing about who computes what.
class Pool {
  public:
    void run(long long parts, int threads, PartFn fn, void* ctx);
    ~Pool();

  private:
    static constexpr long long SPIN_NS = 100000;
    void loop();
    template <class Done>
    static void spin(Done done);
    std::mutex mu_, run_mu_;
    std::condition_variable wake_, finished_;
    std::vector<std::thread> workers_;
    PartFn job_ = nullptr;
    void* ctx_ = nullptr;
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
        const PartFn fn = job_;
        void* const ctx = ctx_;
        const long long parts = parts_;
        ++active_;
        lk.unlock();
        long long mine = 0;
        for (long long p; (p = next_.fetch_add(1)) < parts; ++mine) fn(ctx, p);
        lk.lock();
        done_ += mine;
        --active_;
        finished_.notify_all();
    }
}

inline void Pool::run(long long parts, int threads, PartFn fn, void* ctx) {
    std::lock_guard<std::mutex> one(run_mu_);
    std::unique_lock<std::mutex> lk(mu_);
    while ((int)workers_.size() < threads - 1) workers_.emplace_back([this] { loop(); });
    job_ = fn;
    ctx_ = ctx;
    parts_ = parts;
    done_ = 0;
    next_.store(0);
    ++gen_;
    lk.unlock();
    wake_.notify_all();
    long long mine = 0;
    for (long long p; (p = next_.fetch_add(1)) < parts; ++mine) fn(ctx, p);
    done_ += mine;
    const auto finished = [&] { return done_.load() == parts && active_.load() == 0; };
    spin(finished);
    lk.lock();
    // NOTE: wait for active_ == 0 too, so no worker still holds ctx when it goes out of scope
    finished_.wait(lk, finished);
    job_ = nullptr;
    ctx_ = nullptr;
}

static Pool& pool() {
    static Pool* p = new Pool();  // never destroyed: workers may outlive static destructors
    return *p;
}

static void pool_run(long long parts, int threads, PartFn fn, void* ctx) {
    pool().run(parts, threads, fn, ctx);
}

// the machine's CPUs, asked once, when the library is loaded
static const bool LOCAL_SHARED_READY = [] {
    LOCAL_SHARED.machine_threads = (int)std::thread::hardware_concurrency();
    return true;
}();

}  // namespace gtcpu

#endif  // GTENSOR_CPU_POOL_H
