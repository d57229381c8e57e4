"""The ``cuda`` backend: the same kernel source compiled by NVRTC through cupy.RawModule."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from gtensor.kernels import Kernel
from gtensor.runtime.args import check_args, check_launch_dims

# No fused multiply-add, denormals kept, IEEE-rounded division and square root.
NVRTC_OPTIONS = (
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "-std=c++17",
)
_INSTALL_HINT = "install gtensor[cuda] (cupy-cuda13x) on a machine with an NVIDIA GPU"


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


class CudaModule:
    """A module of CUDA kernels compiled with NVRTC and launched with cupy."""

    def __init__(self, source: str, kernels: Sequence[Kernel]) -> None:
        """Compile ``source`` with NVRTC (no fast math) and look up each kernel."""
        self._cp = import_cupy()
        self._kernels = {k.name: k for k in kernels}
        if len(self._kernels) != len(kernels):
            raise ValueError("CudaModule: duplicate kernel names")
        self._module = self._cp.RawModule(code=source, options=NVRTC_OPTIONS)
        self._functions = {name: self._module.get_function(name) for name in self._kernels}

    def kernel(self, name: str) -> Kernel:
        """The Kernel description for ``name``."""
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(f"no kernel {name!r} in module; have {sorted(self._kernels)}") from None

    def _is_device_array(self, value: object) -> bool:
        """Pointer-argument predicate: a cupy.ndarray."""
        return isinstance(value, self._cp.ndarray)

    def launch(
        self,
        name: str,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: Sequence,
    ) -> None:
        """Enqueue kernel ``name`` on cupy's current stream (asynchronous)."""
        kernel = self.kernel(name)
        values = check_args(kernel, args, self._is_device_array, "cupy.ndarray")
        g, b = check_launch_dims(kernel, grid, block)
        if min(g) == 0:
            return
        self._functions[name](g, b, tuple(values))
