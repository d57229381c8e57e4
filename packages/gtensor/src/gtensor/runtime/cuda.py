"""The ``cuda`` backend: the same kernel source compiled by NVRTC, launched through cupy.

NOTE: not ``cupy.RawModule(code=...)``: cupy appends ``-ftz=true`` after the caller's options
(cupy/cupy#9576), which flushes float32 subnormals and breaks bit-equality with numpy. We call
NVRTC through cupy's own binding with our options, load the CUBIN as a module, and check at
load time that float32 subnormals survive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np

from gtensor.kernels import Kernel
from gtensor.runtime.args import KernelTable

# No fused multiply-add, denormals kept, IEEE-rounded division and square root.
NVRTC_OPTIONS = (
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "-std=c++17",
)
_INSTALL_HINT = ("pip install 'packages/gtensor[cuda]' (cupy-cuda13x; from the repository "
                 "root) on a machine with an NVIDIA GPU")


def import_cupy() -> ModuleType:
    """Import cupy and make sure a CUDA device is present; RuntimeError otherwise."""
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"the cuda backend needs cupy: {_INSTALL_HINT} ({exc})") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver
        raise RuntimeError(f"no usable CUDA device: {exc}; {_INSTALL_HINT}") from exc
    if count < 1:
        raise RuntimeError(f"no CUDA device found; {_INSTALL_HINT}")
    return cupy


def _nvrtc_binding():
    """cupy's own NVRTC binding (its location moved between cupy versions)."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:  # older cupy
        from cupy.cuda import nvrtc
    return nvrtc


def compile_module(cp: ModuleType, source: str, options: Sequence[str]):
    """Compile ``source`` with NVRTC for the current device and load it (a cupy Module)."""
    nvrtc = _nvrtc_binding()
    cc = str(cp.cuda.Device().compute_capability)
    prog = nvrtc.createProgram(source, "gtensor_module.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(prog, (*options, f"--gpu-architecture=sm_{cc}"))
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise RuntimeError(f"NVRTC failed to compile the gtensor module: {exc}\n{log}") from exc
        binary = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    module = cp.cuda.function.Module()
    module.load(binary)
    return module


class CudaModule(KernelTable):
    """A module of CUDA kernels compiled with NVRTC and launched with cupy."""

    array_kind = "cupy.ndarray"

    def __init__(self, source: str, kernels: Sequence[Kernel]) -> None:
        """Compile ``source`` with NVRTC (no fast math) and look up each kernel."""
        super().__init__(kernels)
        self._cp = import_cupy()
        self._module = compile_module(self._cp, source, NVRTC_OPTIONS)
        self._functions = {name: self._module.get_function(name) for name in self._kernels}
        self._check_subnormals()

    def _check_subnormals(self) -> None:
        """Fail loudly if float32 subnormals are flushed (an FTZ build would change bits)."""
        from gtensor.dtypes import F32
        from gtensor.ops import get

        kernel = get("mul").kernel_set(F32).only
        if self._kernels.get(kernel.name) is not kernel:
            return
        cp = self._cp
        host = np.array([1e-45, -3e-39], dtype=np.float32)
        one = cp.asarray(np.ones(1, dtype=np.float32))
        out = cp.empty(2, dtype=cp.float32)
        geom = cp.asarray(np.array([1, 2, 1, 0], dtype=np.int64))  # rank 1, strides 1 and 0
        self.launch(kernel, 1, 2, (cp.asarray(host), one, out, 2, geom))
        # NOTE: compared as bits on the host: a cupy comparison kernel would itself flush
        if not np.array_equal(cp.asnumpy(out).view(np.uint32), host.view(np.uint32)):
            raise RuntimeError("cuda backend: float32 subnormals are flushed to zero by this "
                               "build (FTZ); results would differ from numpy")

    def _is_array(self, value: object) -> bool:
        """Pointer arguments are cupy arrays."""
        return isinstance(value, self._cp.ndarray)

    def _bind(self, kernel: Kernel, values: list, g: tuple, b: tuple) -> Callable[[], None]:
        """Enqueue the checked launch on cupy's current stream (asynchronous)."""
        fn, argv = self._functions[kernel.name], tuple(values)

        def run() -> None:
            fn(g, b, argv)

        return run
