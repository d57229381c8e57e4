"""Tests for the sim runtime (fibers, barriers, args, cache, FP env) and device compile checks."""

from __future__ import annotations

import ctypes
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gtensor.kernels import Kernel, params
from gtensor.runtime import args as rt_args
from gtensor.runtime import compile_check, sim
from gtensor.runtime.sim import SimModule

TREE_SUM = Kernel(
    "tree_sum",
    params("const double* x, double* out, long long n"),
    """
    __shared__ double buf[1024];
    unsigned t = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? x[i] : 0.0;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s *= 2) {
        double v = (t % (2 * s) == 0 && t + s < blockDim.x) ? buf[t + s] : 0.0;
        __syncthreads();
        buf[t] = __dadd_rn(buf[t], v);
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
    """,
)

# 3-D block, 3-D grid; threads past `n` return before the barriers and must count as arrived.
REVERSE3D = Kernel(
    "reverse3d",
    params("const long long* x, double* out, int active"),
    """
    __shared__ double buf[1024];
    int nt = blockDim.x * blockDim.y * blockDim.z;
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (t >= active) return;
    buf[t] = __ll2double_rn(x[(long long)b * nt + t]);
    __syncthreads();
    double v = buf[active - 1 - t];
    __syncthreads();
    buf[t] = v;
    __syncthreads();
    out[(long long)b * nt + t] = buf[t];
    """,
)

INDEX = Kernel(
    "index3d",
    params("double* out"),
    """
    long long t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * (long long)threadIdx.z);
    long long b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * (long long)blockIdx.z);
    long long nt = (long long)blockDim.x * blockDim.y * blockDim.z;
    out[b * nt + t] = (double)(threadIdx.x + 10LL * threadIdx.y + 100LL * threadIdx.z
        + 1000LL * blockIdx.x + 10000LL * blockIdx.y + 100000LL * blockIdx.z);
    """,
)

AXPY32 = Kernel(
    "axpy32",
    params("const float* x, float* y, float a, int n"),
    """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
    """,
)

INTRINSICS = Kernel(
    "intrinsics",
    params("const double* x, double* out, double* ll, float* f, long long n"),
    """
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    out[5 * i + 0] = __dsqrt_rn(fabs(v));
    out[5 * i + 1] = rint(v);
    out[5 * i + 2] = floor(v);
    out[5 * i + 3] = __ddiv_rn(__dsub_rn(v, 1.0), 3.0);
    out[5 * i + 4] = __longlong_as_double(__double_as_longlong(v) ^ 1LL);
    ll[i] = __longlong_as_double(__double2ll_rz(v));
    float g = __double2float_rn(v);
    f[2 * i] = rintf(__fdiv_rn(g, 3.0f));
    f[2 * i + 1] = __int_as_float(__float_as_int(floorf(g)) + 1);
    """,
)

MUL = Kernel(
    "mul",
    params("const double* x, const double* y, double* out"),
    "out[threadIdx.x] = __dmul_rn(x[threadIdx.x], y[threadIdx.x]);",
)

HELPER_BARRIER = Kernel(
    "helper_barrier",
    params("const double* x, double* out"),
    """
    __shared__ double buf[256];
    buf[threadIdx.x] = x[threadIdx.x];
    block_sync();
    out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
    """,
)

KERNELS = [TREE_SUM, REVERSE3D, INDEX, AXPY32, INTRINSICS, MUL, HELPER_BARRIER]
HELPERS = "__device__ __forceinline__ void block_sync() { __syncthreads(); }\n"
SOURCE = HELPERS + "".join(k.source() for k in KERNELS)


@pytest.fixture(scope="module")
def mod() -> SimModule:
    """One compiled module with every test kernel."""
    return SimModule(SOURCE, KERNELS)


def tree_sum_ref(x: np.ndarray, nthreads: int) -> np.ndarray:
    """numpy replica of TREE_SUM's summation order, one value per block."""
    nblocks = -(-len(x) // nthreads)
    buf = np.zeros((nblocks, nthreads))
    buf.reshape(-1)[: len(x)] = x
    s = 1
    while s < nthreads:
        idx = np.arange(0, nthreads, 2 * s)
        idx = idx[idx + s < nthreads]
        buf[:, idx] = buf[:, idx] + buf[:, idx + s]
        s *= 2
    return buf[:, 0]


@pytest.mark.parametrize("nthreads", [1024, 1, 7, 100, 333, 1000])
def test_tree_sum_matches_numpy_bitwise(mod: SimModule, nthreads: int) -> None:
    rng = np.random.default_rng(nthreads)
    n = 3 * nthreads + nthreads // 2 + 1
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
    nblocks = -(-n // nthreads)
    out = np.full(nblocks, np.nan)
    mod.launch(mod.kernel("tree_sum"), nblocks, nthreads, [x, out, n])
    np.testing.assert_array_equal(out, tree_sum_ref(x, nthreads))


@pytest.mark.parametrize(
    ("grid", "block", "active"),
    [((2, 3, 2), (4, 3, 2), 24), ((3, 2), (8, 4, 2), 50), (2, (32, 32), 1024), (1, 5, 3)],
)
def test_barriers_with_3d_blocks_and_early_return(mod, grid, block, active) -> None:
    g = np.ones(3, int)
    b = np.ones(3, int)
    g[: np.size(grid)] = grid
    b[: np.size(block)] = block
    nb, nt = int(g.prod()), int(b.prod())
    x = np.arange(nb * nt, dtype=np.int64) * 7 + 3
    out = np.full(nb * nt, -1.0)
    mod.launch(mod.kernel("reverse3d"), grid, block, [x, out, active])
    want = np.full((nb, nt), -1.0)
    want[:, :active] = x.reshape(nb, nt)[:, active - 1 :: -1]
    np.testing.assert_array_equal(out.reshape(nb, nt), want)


@pytest.mark.parametrize(("grid", "block"), [((3, 2, 2), (4, 2, 3)), ((5, 4), (2, 3)), (3, 4)])
def test_grid_and_block_indices(mod: SimModule, grid, block) -> None:
    g = (tuple(grid) if isinstance(grid, tuple) else (grid,)) + (1,) * 3
    b = (tuple(block) if isinstance(block, tuple) else (block,)) + (1,) * 3
    g, b = g[:3], b[:3]
    out = np.full(int(np.prod(g) * np.prod(b)), -1.0)
    mod.launch(mod.kernel("index3d"), grid, block, [out])
    bz, by, bx, tz, ty, tx = np.meshgrid(
        *(np.arange(n) for n in (g[2], g[1], g[0], b[2], b[1], b[0])), indexing="ij"
    )
    want = tx + 10 * ty + 100 * tz + 1000 * bx + 10000 * by + 100000 * bz
    np.testing.assert_array_equal(out, want.reshape(-1))


def test_plain_kernel_float32(mod: SimModule) -> None:
    rng = np.random.default_rng(1)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = np.float32(1.7)
    want = a * x + y
    mod.launch(mod.kernel("axpy32"), -(-n // 128), 128, [x, y, a, n])
    np.testing.assert_array_equal(y, want)


def test_intrinsics_match_numpy(mod: SimModule) -> None:
    x = np.array([2.5, -2.5, 3.5, -0.0, 1e300, -7.9, 1e-310, 9.3e18, -9.3e18, np.nan, np.inf])
    n = len(x)
    out = np.zeros(5 * n)
    ll = np.zeros(n)
    f = np.zeros(2 * n, dtype=np.float32)
    with np.errstate(all="ignore"):
        mod.launch(mod.kernel("intrinsics"), 2, 8, [x, out, ll, f, n])
        o = out.reshape(n, 5)
        np.testing.assert_array_equal(o[:, 0], np.sqrt(np.abs(x)))
        np.testing.assert_array_equal(o[:, 1], np.rint(x))
        np.testing.assert_array_equal(o[:, 2], np.floor(x))
        np.testing.assert_array_equal(o[:, 3], (x - 1.0) / 3.0)
        np.testing.assert_array_equal(o[:, 4].view(np.int64), x.view(np.int64) ^ 1)
        big = np.iinfo(np.int64)
        want_ll = np.where(
            np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), -(2.0**63), 2.0**63 - 1024)
        ).astype(np.int64)
        want_ll[x >= 2.0**63] = big.max
        np.testing.assert_array_equal(ll.view(np.int64), want_ll)
        g = x.astype(np.float32)
        np.testing.assert_array_equal(f[0::2], np.rint(g / np.float32(3.0)))
        np.testing.assert_array_equal(f[1::2].view(np.int32), np.floor(g).view(np.int32) + 1)


def test_barrier_in_helper_function_runs_on_fibers(mod: SimModule) -> None:
    x = np.arange(200, dtype=np.float64)
    out = np.zeros(200)
    mod.launch(mod.kernel("helper_barrier"), 1, 200, [x, out])
    np.testing.assert_array_equal(out, x[::-1])


def test_concurrent_launches_from_threads(mod: SimModule) -> None:
    start = threading.Barrier(4)

    def work(seed: int) -> bool:
        """Launch reductions repeatedly and compare each with numpy."""
        rng = np.random.default_rng(seed)
        start.wait()
        for _ in range(10):
            nthreads = int(rng.integers(1, 1025))
            x = rng.standard_normal(int(rng.integers(1, 5000)))
            nblocks = -(-len(x) // nthreads)
            out = np.zeros(nblocks)
            mod.launch(mod.kernel("tree_sum"), nblocks, nthreads, [x, out, len(x)])
            if not np.array_equal(out, tree_sum_ref(x, nthreads)):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(4))) == [True] * 4


def test_zero_grid_is_noop(mod: SimModule) -> None:
    out = np.full(4, -1.0)
    mod.launch(mod.kernel("index3d"), (0, 2), 4, [out])
    mod.launch(mod.kernel("index3d"), 0, 4, [out])
    assert (out == -1).all()


X = np.zeros(4)
BAD_ARGS = [
    ("tree_sum", [X, X], TypeError, "takes 3 arguments"),
    ("tree_sum", [[0.0], X, 1], TypeError, "'x' (const double*)"),
    ("tree_sum", [X.astype(np.float32), X, 1], TypeError, "'x' (const double*)"),
    ("tree_sum", [np.zeros((4, 4))[:, 0], X, 1], ValueError, "'x' (const double*)"),
    ("tree_sum", [X, np.zeros(4)[::2], 1], ValueError, "'out' (double*)"),
    ("tree_sum", [X, np.broadcast_to(0.0, (4,)), 1], ValueError, "'out' (double*)"),
    ("tree_sum", [X, X, 2**63], OverflowError, "'n' (long long)"),
    ("tree_sum", [X, X, np.uint64(2**63)], OverflowError, "'n' (long long)"),
    ("tree_sum", [X, X, True], TypeError, "'n' (long long)"),
    ("tree_sum", [X, X, 1.0], TypeError, "'n' (long long)"),
    ("reverse3d", [X.astype(np.int64), X, 2**31], OverflowError, "'active'"),
    ("reverse3d", [X.astype(np.int64), X, np.int64(-(2**31) - 1)],
     OverflowError, "'active' (int)"),
    ("axpy32", [X.astype(np.float32), X.astype(np.float32), 1.5, 4], TypeError, "np.float32"),
    ("axpy32", [X.astype(np.float32), X.astype(np.float32), np.float64(1.5), 4], TypeError,
     "'a' (float)"),
    ("axpy32", [X.astype(np.float32), X.astype(np.float32), np.float32(1), 4.0], TypeError,
     "'n' (int)"),
]


@pytest.mark.parametrize(("name", "args", "exc", "text"), BAD_ARGS)
def test_bad_arguments_raise(mod: SimModule, name, args, exc, text) -> None:
    with pytest.raises(exc) as info:
        mod.launch(mod.kernel(name), 1, 4, args)
    assert name in str(info.value)
    assert text in str(info.value)


def test_double_param_rejects_float32_and_int() -> None:
    k = Kernel("scale", params("double* y, double a"), "y[0] = a;")
    for bad in (np.float32(1.0), 1):
        with pytest.raises(TypeError, match=r"scale.*'a' \(double\)"):
            rt_args.check_args(k, [np.zeros(1), bad], lambda v: isinstance(v, np.ndarray), "arr")
    vals = rt_args.check_args(k, [np.zeros(1), 2.5], lambda v: isinstance(v, np.ndarray), "arr")
    assert type(vals[1]) is np.float64 and vals[1] == 2.5


@pytest.mark.parametrize(
    ("grid", "block", "exc"),
    [(1, 1025, ValueError), (1, (32, 33), ValueError), (1, (1, 1, 65), ValueError),
     (1, 0, ValueError), (-1, 4, ValueError), (1, (1, 1, 1, 1), TypeError),
     (1.0, 4, TypeError), (1, (4, True), TypeError), (2**31, 4, ValueError)],
)
def test_bad_launch_dims(mod: SimModule, grid, block, exc) -> None:
    out = np.zeros(4096)
    with pytest.raises(exc, match="index3d"):
        mod.launch(mod.kernel("index3d"), grid, block, [out])


def test_unknown_kernel(mod: SimModule) -> None:
    """A launch names a Kernel the module holds: a name, or a kernel of another module, is
    refused."""
    with pytest.raises(KeyError, match="nope"):
        mod.kernel("nope")
    with pytest.raises(TypeError, match="takes a Kernel object"):
        mod.launch("index3d", 1, 1, [np.zeros(4096)])
    other = Kernel("nope", params("double* y"), "    y[0] = 1.0;")
    with pytest.raises(KeyError, match="no kernel 'nope'"):
        mod.launch(other, 1, 1, [np.zeros(1)])
    twin = Kernel("index3d", mod.kernel("index3d").params, "    /* other text */")
    with pytest.raises(KeyError, match="a different kernel of that name"):
        mod.launch(twin, 1, 1, [np.zeros(4096)])


def test_disk_cache_is_reused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(tmp_path))
    k = Kernel("fill7", params("double* out"), "out[threadIdx.x] = 7 + threadIdx.x;")
    SimModule(k.source(), [k])
    libs = list((tmp_path / "sim").glob("*.so"))
    assert len(libs) == 1
    mtime = libs[0].stat().st_mtime_ns
    monkeypatch.setattr(sim, "_LOADED", {})

    def no_compile(*a: object) -> None:
        raise AssertionError("compiler called despite the disk cache")

    monkeypatch.setattr(sim, "_run_compiler", no_compile)
    out = np.zeros(3)
    SimModule(k.source(), [k]).launch(k, 1, 3, [out])
    np.testing.assert_array_equal(out, [7, 8, 9])
    assert libs[0].stat().st_mtime_ns == mtime
    assert not list((tmp_path / "sim").glob("*.tmp"))


def test_compile_error_reports_stderr_and_source(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(tmp_path))
    k = Kernel("broken", params("double* y"), "y[0] = undefined_thing;")
    with pytest.raises(RuntimeError) as info:
        SimModule(k.source(), [k])
    msg = str(info.value)
    assert "undefined_thing" in msg and str(tmp_path) in msg and ".cpp" in msg


def test_missing_compiler(monkeypatch) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/g++-none")
    with pytest.raises(RuntimeError, match="apt-get install g\\+\\+"):
        SimModule(MUL.source(), [MUL])


FTZ_HELPER = """
#include <xmmintrin.h>
extern "C" void set_ftz_daz() { _mm_setcsr(_mm_getcsr() | 0x8040); }
extern "C" unsigned get_csr() { return _mm_getcsr(); }
extern "C" void set_csr(unsigned v) { _mm_setcsr(v); }
"""


def test_mxcsr_ftz_does_not_change_results(mod: SimModule, tmp_path) -> None:
    src = tmp_path / "ftz.cpp"
    src.write_text(FTZ_HELPER)
    lib = tmp_path / "ftz.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    ftz = ctypes.CDLL(str(lib))
    ftz.get_csr.restype = ctypes.c_uint
    x = np.array([2.0**-1000, 2.0**-1070])
    y = np.array([2.0**-60, 2.0**10])
    out = np.zeros(2)
    saved = ftz.get_csr()
    try:
        ftz.set_ftz_daz()
        flushed = ftz.get_csr()
        assert flushed & 0x8040 == 0x8040
        mod.launch(mod.kernel("mul"), 1, 2, [x, y, out])
        assert ftz.get_csr() == flushed  # restored after the launch
    finally:
        ftz.set_csr(saved)
    np.testing.assert_array_equal(out, [2.0**-1060, 2.0**-1060])
    assert out[0] != 0.0


DEVICE_SOURCE = HELPERS + TREE_SUM.source() + AXPY32.source() + INTRINSICS.source()
needs_device_compiler = pytest.mark.skipif(
    compile_check.available_compiler() is None, reason="no nvcc or NVRTC"
)


@needs_device_compiler
def test_compile_for_device() -> None:
    compile_check.compile_for_device(DEVICE_SOURCE)
    bad = 'extern "C" __global__ void k(double* y) { y[0] = not_declared; }'
    with pytest.raises(RuntimeError, match="not_declared"):
        compile_check.compile_for_device(bad)


@pytest.mark.skipif(compile_check.find_nvrtc() is None, reason="no libnvrtc")
def test_compile_for_device_with_nvrtc(monkeypatch) -> None:
    monkeypatch.setattr(compile_check, "find_nvcc", lambda: None)
    compile_check.compile_for_device(DEVICE_SOURCE)
    with pytest.raises(RuntimeError, match="not_declared"):
        compile_check.compile_for_device("__global__ void k(double* y) { y[0] = not_declared; }")


def test_compile_for_device_without_compilers(monkeypatch) -> None:
    monkeypatch.setattr(compile_check, "find_nvcc", lambda: None)
    monkeypatch.setattr(compile_check, "find_nvrtc", lambda: None)
    with pytest.raises(RuntimeError, match="nvidia-cuda-nvrtc"):
        compile_check.compile_for_device(DEVICE_SOURCE)


def test_cuda_module_without_cupy_or_gpu() -> None:
    from gtensor.runtime.cuda import CudaModule

    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="cupy-cuda13x"):
            CudaModule(MUL.source(), [MUL])
    else:
        pytest.skip("cupy installed; covered by GPU tests")
