"""The CUDA dialect for one sequential thread: what lets gtensor's kernel text compile as C.

Only the C standard library is used (``math.h`` for rint/floor/fabs, ``string.h`` for bit
casts, ``stdbool.h`` for ``bool``). Every intrinsic is the plain correctly rounded IEEE
operation, exactly as the ``sim`` and ``cpu`` runtimes define it
(``gtensor/runtime/common_runtime.h``), so the emitted C computes what ``sim`` computes,
which is what numpy computes (gtensor's parity tests).
The launch geometry is not here: each emitted kernel function declares ``threadIdx``/``blockIdx``
= 0 and ``blockDim``/``gridDim`` = 1 as locals, so every grid-stride loop runs all its
iterations on the one thread.
"""

from __future__ import annotations

C_PRELUDE = r"""
#include <math.h>
#include <stdbool.h>
#include <string.h>

#pragma STDC FP_CONTRACT OFF  /* and compile with -ffp-contract=off: no FMA but fma()'s */

#define __device__ static
#define __forceinline__ inline
#define __shared__
#define __syncthreads() ((void)0)

typedef struct { unsigned int x, y, z; } gemit_dim3;

static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
/* the fma inner-product contract's one fused multiply-add (C99 fma: a single rounding) */
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

static inline long long __double_as_longlong(double d) {
    long long r;
    memcpy(&r, &d, sizeof r);
    return r;
}
static inline double __longlong_as_double(long long i) {
    double r;
    memcpy(&r, &i, sizeof r);
    return r;
}
static inline int __float_as_int(float f) {
    int r;
    memcpy(&r, &f, sizeof r);
    return r;
}
static inline float __int_as_float(int i) {
    float r;
    memcpy(&r, &i, sizeof r);
    return r;
}

static inline float __double2float_rn(double d) { return (float)d; }
static inline double __float2double(float f) { return (double)f; }
static inline double __ll2double_rn(long long i) { return (double)i; }

/* Truncating conversion with the GPU's cvt.rzi.s64.f64 semantics: saturating, NaN -> 0. */
static inline long long __double2ll_rz(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0) return 9223372036854775807LL;
    if (d < -9223372036854775808.0) return -9223372036854775807LL - 1;
    return (long long)d;
}
"""

# CUDA has the intrinsics; only the one-thread launch model is ours. One thread runs one
# example, so a barrier would wait for threads running other examples and block-shared storage
# would be shared with them: __syncthreads is a no-op inside the emitted snippet only (#undef
# after it), and the renderer drops the __shared__ qualifier from the kernel text it copies
# (NVRTC and nvcc differ in whether __shared__ is a macro, so it is not redefined).
CUDA_OPEN = r"""
#define __syncthreads() ((void)0)

typedef struct { unsigned int x, y, z; } gemit_dim3;
"""

CUDA_CLOSE = r"""
#undef __syncthreads
"""

# The one-thread launch geometry, declared inside every emitted kernel function.
GEOMETRY = """\
    const gemit_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
    const gemit_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
    (void)threadIdx; (void)blockIdx; (void)blockDim; (void)gridDim;
"""
