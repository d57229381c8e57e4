"""The machine's measured multiply-add peak per thread: a probe of the FMA rate and of the
separate multiply + add rate (what the plain contract's inner loop is made of).

16, 24 or 30 independent 64-byte vector accumulators (the best rate counts), each
step the matmul tiles' own: ``acc = gtcpu::vfma(y, x, acc)`` (one vfmadd per vector) or
``acc = acc + y * x`` (a vmul and a vadd: compiled with -ffp-contract=off, like the kernels,
so they are not fused). The probe includes the cpu runtime header and is compiled with the cpu
backend's compiler and flags, run on one thread; the result is multiply-adds (MACs) per second
per thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import tempfile
import time
from pathlib import Path

from gtensor.runtime import cpu, toolchain

_SOURCE = r"""
template <class T, bool FUSED, int CH>
static double run(long long iters) {
    typedef T V __attribute__((vector_size(64)));
    constexpr int N = 64 / sizeof(T);
    V acc[CH], x;
    const T y = (T)1e-7;
    for (int i = 0; i < N; ++i) x[i] = (T)0.9999999;
    for (int j = 0; j < CH; ++j)
        for (int i = 0; i < N; ++i) acc[j][i] = (T)(j + i) * (T)0.01;
    for (long long it = 0; it < iters; ++it) {
#pragma GCC unroll 32
        for (int j = 0; j < CH; ++j) {
            // the empty asm says x may have changed: y * x is computed again for every chain
            // (without it the loop-invariant product is hoisted and the mul+add probe times
            // adds alone)
            asm volatile("" : "+v"(x));
            acc[j] = FUSED ? gtcpu::vfma(y, x, acc[j]) : acc[j] + y * x;  // the kernels' steps
        }
    }
    T s = 0;
    for (int j = 0; j < CH; ++j)
        for (int i = 0; i < N; ++i) s += acc[j][i];
    return (double)s;
}
#define GT_PROBE(CH)                                                                      \
    extern "C" double probe_fma_f64_##CH(long long n) { return run<double, true, CH>(n); }   \
    extern "C" double probe_muladd_f64_##CH(long long n) { return run<double, false, CH>(n); } \
    extern "C" double probe_fma_f32_##CH(long long n) { return run<float, true, CH>(n); }    \
    extern "C" double probe_muladd_f32_##CH(long long n) { return run<float, false, CH>(n); }
GT_PROBE(16)
GT_PROBE(24)
GT_PROBE(30)
"""


def _library() -> ctypes.CDLL:
    command = toolchain.compiler_command()
    # the cpu runtime's own header: gtcpu::vfma is the instruction the fma kernels use
    text = toolchain.header_text(Path(cpu.__file__).with_name("cpu_runtime.h")) + _SOURCE
    key = hashlib.sha256((text + " ".join(cpu.CXX_FLAGS)).encode()).hexdigest()[:16]
    d = Path(tempfile.gettempdir()) / "grad-peak-probe"
    d.mkdir(exist_ok=True)
    out = d / f"peak_{key}.so"
    if not out.exists():
        src = d / f"peak_{key}.cc"
        src.write_text(text)
        toolchain.compile_shared("peak probe", command, cpu.CXX_FLAGS, src, out)
    return ctypes.CDLL(str(out))


CHAINS = (16, 24, 30)  # independent accumulators tried (the best rate counts: the latency of
# the FMA pipes times their count decides how many chains it takes to keep them busy)


def peak(dtype: str, seconds: float = 0.002, repeats: int = 80) -> dict[str, float]:
    """{"fma": MAC/s, "muladd": MAC/s} per thread for ``dtype``: the best over ``CHAINS``
    and ``repeats`` short runs (the host is shared: the best run is the least disturbed, and
    a short one is likelier to run undisturbed -- as likely as one timed matmul call)."""
    lib = _library()
    sfx = "f64" if dtype == "float64" else "f32"
    lanes = 8 if sfx == "f64" else 16
    out = {}
    for kind in ("fma", "muladd"):
        best = 0.0
        for chains in CHAINS:
            fn = getattr(lib, f"probe_{kind}_{sfx}_{chains}")
            fn.argtypes, fn.restype = [ctypes.c_longlong], ctypes.c_double
            iters = 1 << 8
            while True:  # calibrate to about ``seconds``
                t0 = time.perf_counter()
                fn(iters)
                dt = time.perf_counter() - t0
                if dt > seconds / 4:
                    break
                iters *= 4
            iters = int(iters * seconds / dt)
            for _ in range(repeats):  # thread CPU time, as bench_cpu_kernels --peak times
                t0 = time.thread_time()
                fn(iters)
                dt = time.thread_time() - t0
                best = max(best, iters * chains * lanes / dt) if dt > 0 else best
        out[kind] = best
    return out


if __name__ == "__main__":
    for dt in ("float64", "float32"):
        print(dt, {k: f"{v / 1e9:.1f} GMAC/s" for k, v in peak(dt).items()})
