// common_runtime.h - what gtensor's two host runtimes (sim_runtime.h, cpu_runtime.h) share: the
// CUDA words and intrinsics the scalar language and kernel text use, as plain IEEE C++, and
// the floating-point environment every launch runs under.
//
// The scalar language emits every float operation as a __d*_rn / __f*_rn intrinsic; here they
// are the plain IEEE C++ operators (SSE2/AVX arithmetic rounds to nearest under MXCSR 0x1F80,
// which every entry point installs for its duration with gtrt::FpEnv), so the functions are
// the ones the CUDA kernels call, and the compiler may only vectorize them, never contract or
// reorder them (both runtimes compile with -ffp-contract=off, no fast-math).
//
// Not compiled on its own: gtensor.runtime.sim.header_text expands the
// `#include "common_runtime.h"` of each runtime header in place, so the text (and the kernel
// cache key, a hash of it) holds this file.
#ifndef GTENSOR_COMMON_RUNTIME_H
#define GTENSOR_COMMON_RUNTIME_H

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

// ---- the CUDA words the scalar language and kernel text use --------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))

// ---- intrinsics: one IEEE operation each ------------------------------------------------------
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
// the fused multiply-add (one rounding; matmul's fma contract): std::fma is IEEE's fma on every
// target (vfmadd where the CPU has it, else a correctly rounded libm routine)
static __forceinline__ double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static __forceinline__ float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

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

namespace gtrt {

// ---- the IEEE default floating-point environment for the length of a launch ----------------
// Saves the floating-point control state and installs IEEE defaults; restores it on exit.
class FpEnv {
  public:
    FpEnv() {
#if defined(__x86_64__) || defined(__i386__)
        saved_ = _mm_getcsr();
        _mm_setcsr(0x1F80);  // round to nearest, no FTZ/DAZ, all exceptions masked
#elif defined(__aarch64__)
        asm volatile("mrs %0, fpcr" : "=r"(saved_));
        asm volatile("msr fpcr, %0" ::"r"(uint64_t{0}));
#endif
    }
    ~FpEnv() {
#if defined(__x86_64__) || defined(__i386__)
        _mm_setcsr(saved_);
#elif defined(__aarch64__)
        asm volatile("msr fpcr, %0" ::"r"(saved_));
#endif
    }
    FpEnv(const FpEnv&) = delete;
    FpEnv& operator=(const FpEnv&) = delete;

  private:
#if defined(__aarch64__)
    uint64_t saved_ = 0;
#else
    unsigned int saved_ = 0;
#endif
};

}  // namespace gtrt

#endif  // GTENSOR_COMMON_RUNTIME_H
