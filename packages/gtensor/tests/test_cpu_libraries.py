"""The cpu module's libraries: one runtime library per process (the pool, the settings, the
plan interpreter) and a library per kernel, compiled on the kernel's first use, bound to the
runtime's state; a module from a given source is one library. Each test uses its own cache."""

from __future__ import annotations

import ctypes
import os
import re
import shutil

import numpy as np
import pytest
from gtensor.kernels import Kernel, params
from gtensor.runtime import cpu
from gtensor.runtime.cpu_source import cpu_kernels

PROBE = Kernel("k_cpu_probe", params("double* y, long long n, double v"),
               "    for (long long i = 0; i < n; ++i) y[i] = v + (double)i;")
PROBE_SOURCE = PROBE.source()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty kernel cache (the process's loaded libraries stay loaded: a library found
    under its key again is the one already loaded)."""
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler: the cpu runtime needs g++ or $CXX")
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cpu"


def _kernel_libraries(folder) -> set[str]:
    """The kernels whose libraries were compiled into ``folder``. A library the process has
    loaded already (an earlier test's, the same key) is not compiled again, so a fresh cache
    holds a subset of what a module loads."""
    names = []
    for src in folder.glob("*.cpp"):
        names += re.findall(r'extern "C" int gtcpu_call_(\w+)\(', src.read_text())
    return set(names)


def _not_loaded(n: int) -> list[Kernel]:
    """``n`` small kernels this process has not loaded yet (so loading them compiles)."""
    out = [k for k in cpu_kernels() if len(k.source()) < 400 and cpu.unit_key(
        cpu.kernel_unit(cpu.kernel_source(k), [k]), cpu.CXX_FLAGS) not in cpu._LOADED]
    assert len(out) >= n, "every small kernel is loaded already"
    return out[:n]


def _by_name(*names: str) -> list[Kernel]:
    kernels = {k.name: k for k in cpu_kernels()}
    return [kernels[n] for n in names]


def test_a_module_compiles_a_kernel_on_its_first_use_only(fresh_cache):
    module = cpu.CpuModule(cpu_kernels())
    assert module.loaded() == []
    x = np.arange(4.0)
    y = np.empty(4)
    (neg,) = _by_name("k_neg_f64")
    module.launch(neg, 1, 1, [x, y, np.int64(4)])
    assert module.loaded() == ["k_neg_f64"]
    assert y.tolist() == [-0.0, -1.0, -2.0, -3.0] and np.signbit(y[0])
    assert _kernel_libraries(fresh_cache) <= {"k_neg_f64"}
    module.load(_by_name("k_exp_f64", "k_sqrt_f64"))
    assert module.loaded() == ["k_exp_f64", "k_neg_f64", "k_sqrt_f64"]
    assert _kernel_libraries(fresh_cache) <= {"k_exp_f64", "k_neg_f64", "k_sqrt_f64"}


def test_first_compiles_print_one_line_and_warm_loads_nothing(fresh_cache, capfd):
    module = cpu.CpuModule(cpu_kernels())
    cpu._ANNOUNCED.clear()
    first, second = _not_loaded(2)
    module.load([first, second])
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"gtensor: compiling the cpu kernels as ops first use them \(a second "
                        r"or so each, once per machine\), cached in " + re.escape(str(
                            fresh_cache)), err[0]), err[0]
    cpu.CpuModule(cpu_kernels()).load([first])
    assert capfd.readouterr().err == ""


def test_every_kernel_library_shares_the_runtime_state(fresh_cache):
    """One pool and one set of settings per process: each kernel library is bound to the
    runtime library's state, which every module of the process sets and reads."""
    module = cpu.CpuModule(cpu_kernels())
    module.load(_by_name("k_add_f64", "k_matmul_f64"))
    runtime, _ = cpu._runtime()
    runtime.gtcpu_shared.restype = ctypes.c_void_p
    shared = runtime.gtcpu_shared()
    assert shared
    for name in ("k_add_f64", "k_matmul_f64"):
        lib = module.library(_by_name(name)[0]).lib
        lib.gtcpu_bound.restype = ctypes.c_void_p
        assert lib.gtcpu_bound() == shared
    other = cpu.CpuModule([PROBE], PROBE_SOURCE)
    old = module.set_parallel_work(12345)
    try:
        assert other.set_parallel_work(old) == 12345
        assert other.set_matmul_tiles("wide") == "host"
        assert module.set_matmul_tiles("host") == "wide"
    finally:
        module.set_parallel_work(old)
        module.set_matmul_tiles("host")


def test_a_plan_of_a_kernel_not_loaded_is_refused_not_run(fresh_cache):
    """The interpreter's call table starts empty: an entry no library filled is status 3."""
    runtime, _ = cpu._runtime()
    runtime.gtcpu_exec.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)
    runtime.gtcpu_exec.restype = ctypes.c_int
    y = np.zeros(3)
    # 1 slot (8 * 3 bytes), 1 launch: entry MAX - 1, 2 args (the slot, n = 3)
    words = np.array([1, y.nbytes, 1, cpu.MAX_KERNELS - 1, 2, 0, 0, 1, 3], np.int64)
    objs = (ctypes.c_void_p * 1)(id(y))
    assert runtime.gtcpu_exec(words.ctypes.data, objs, 1) == 3
    assert y.tolist() == [0.0, 0.0, 0.0]
    words[3] = cpu.MAX_KERNELS  # outside the table: a bad plan
    assert runtime.gtcpu_exec(words.ctypes.data, objs, 1) == 1


def test_a_module_from_source_is_one_library(fresh_cache):
    module = cpu.CpuModule([PROBE], PROBE_SOURCE)
    assert module.loaded() == ["k_cpu_probe"]
    y = np.empty(3)
    module.launch(PROBE, 1, 1, [y, np.int64(3), np.float64(0.5)])
    assert y.tolist() == [0.5, 1.5, 2.5]
    plan = module.plan([(PROBE, 1, 1, [y, np.int64(2), np.float64(-1.0)])], [y])
    assert module.run(plan.addr, y) == 0
    assert y.tolist() == [-1.0, 0.0, 2.5]


def test_a_kernel_outside_the_module_is_refused(fresh_cache):
    module = cpu.CpuModule([PROBE], PROBE_SOURCE)
    (neg,) = _by_name("k_neg_f64")
    with pytest.raises(KeyError, match="no kernel 'k_neg_f64' in module"):
        module.library(neg)


def test_each_kernel_library_defines_what_its_kernel_calls():
    """A kernel library holds only the device functions its text names (and theirs): every
    ``gt_*`` function a kernel calls is defined in its library's source (a text check of all
    the kernels; a missing one would fail that kernel's compile on first use)."""
    for k in cpu_kernels():
        src = cpu.kernel_source(k)
        called = set(re.findall(r"\b(gt_\w+)\s*\(", src))
        defined = set(re.findall(r"\b(gt_\w+)\s*\([^;{]*\)\s*\{", src))
        assert called <= defined, (k.name, sorted(called - defined))
    assert "gt_erf_f64" in cpu.kernel_source(_by_name("k_erf_f64")[0])
    assert "gt_exp_f64" not in cpu.kernel_source(_by_name("k_add_f64")[0])


def test_only_kernels_calling_vfma_get_the_intrinsics():
    """The intrinsics header (a third of a small library's compile) comes with GTCPU_VFMA, set
    for the fma contract's kernels and no others."""
    fma, plain = _by_name("k_matmul_fma_f64", "k_matmul_f64")
    assert "#define GTCPU_VFMA" in cpu.kernel_unit(cpu.kernel_source(fma), [fma])
    assert "#define GTCPU_VFMA" not in cpu.kernel_unit(cpu.kernel_source(plain), [plain])
    assert "#define GTCPU_VFMA" not in cpu.runtime_unit()


def test_load_builds_several_kernels_side_by_side(fresh_cache):
    module = cpu.CpuModule(cpu_kernels())
    kernels = _by_name("k_tanh_f64", "k_tanh_f32", "k_sigmoid_f64")
    module.load(kernels, jobs=2)
    assert module.loaded() == ["k_sigmoid_f64", "k_tanh_f32", "k_tanh_f64"]
    assert _kernel_libraries(fresh_cache) <= {"k_sigmoid_f64", "k_tanh_f32", "k_tanh_f64"}
    for jobs in (0, 1.5, True):
        with pytest.raises(ValueError, match="CpuModule.load: jobs is"):
            module.load(kernels, jobs=jobs)


def test_warm_builds_one_dtypes_kernels(fresh_cache, monkeypatch, capfd):
    from gtensor.runtime import warm

    monkeypatch.setattr(warm, "cpu_kernels",
                        lambda: tuple(_by_name("k_neg_f64", "k_neg_f32", "k_exp_f32")))
    assert warm.main(["--jobs", "2", "--dtype", "float32"]) == 0
    assert re.search(r"gtensor: 2 cpu kernels ready in [0-9.]+ s \(2 at a time\)",
                     capfd.readouterr().err)
    assert _kernel_libraries(fresh_cache) <= {"k_exp_f32", "k_neg_f32"}
    for k in _by_name("k_neg_f32", "k_exp_f32"):  # built and loaded
        source = cpu.kernel_source(k)
        assert cpu.unit_key(cpu.kernel_unit(source, [k]), cpu.kernel_flags(source)) in cpu._LOADED
    with pytest.raises(SystemExit):
        warm.main(["--jobs", "0"])


def test_entry_is_the_kernels_own_function_in_its_library(fresh_cache):
    """``entry``: the address of the kernel's C function in its loaded library (what a fused
    cpu step calls); called with the kernel's parameters it computes what a launch does, and a
    kernel the module does not hold is refused."""
    module = cpu.CpuModule(cpu_kernels())
    (neg,) = _by_name("k_neg_f64")
    addr = module.entry(neg)
    assert module.loaded() == ["k_neg_f64"]  # compiled and loaded on first use
    lib = module.library(neg).lib
    assert addr == ctypes.cast(lib.k_neg_f64, ctypes.c_void_p).value
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)(addr)
    x = np.array([1.5, -0.0, np.inf, -2.25])
    y, want = np.full(4, np.nan), np.full(4, np.nan)
    fn(x.ctypes.data, y.ctypes.data, 4)
    module.launch(neg, 1, 1, [x, want, np.int64(4)])
    assert y.tobytes() == want.tobytes() == np.negative(x).tobytes()
    with pytest.raises(KeyError, match="k_cpu_probe"):
        module.entry(PROBE)
