"""The cuda backend: the CUDA kernels through NVRTC (cupy RawModule), on cupy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from .kernel_backend import KernelBackend


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError("the cuda backend needs cupy: pip install 'packages/gtensor[cuda]' "
                           "(cupy-cuda13x) on a machine with an NVIDIA GPU") from e
    return cupy


class CudaBackend(KernelBackend):
    """Runs every op's CUDA kernel on the GPU."""

    name = "cuda"

    def __init__(self) -> None:
        super().__init__()
        self.cp = _cupy()
        try:
            count = self.cp.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001 - cupy raises driver-specific errors
            raise RuntimeError(f"the cuda backend found no usable GPU: {e}") from e
        if count < 1:
            raise RuntimeError("the cuda backend found no GPU")

    def _build_module(self, source: str, kernels: tuple) -> Any:
        from ..runtime.cuda import CudaModule

        return CudaModule(source, kernels)

    def geom_array(self, values: tuple) -> Any:
        """A device int64 array holding ``values`` (launch geometry)."""
        return self.cp.asarray(np.array(values, dtype=np.int64))

    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """A new C-contiguous cupy array holding ``x`` (bits copied exactly)."""
        if isinstance(x, self.cp.ndarray):
            x = self.to_numpy(x)  # NOTE: cupy's own astype kernels flush float32 subnormals
        elif type(x).__name__ == "SimArray":
            x = np.asarray(x).view(np.ndarray)
        dt = dtypes.infer(x, dtype)
        host = np.array(x, dtype=dt, order="C", copy=True)
        # NOTE: a 1-D host array goes over as a plain memcpy; cupy turns 0-d inputs into a
        # scalar fill, which loses the sign of a float32 -0.0 (seen on an H200).
        return self.cp.asarray(host.reshape(-1)).reshape(host.shape)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A numpy copy of ``a`` (synchronizes)."""
        self.check_array("to_numpy", "a", a)
        return self.cp.asnumpy(a.reshape(-1)).reshape(a.shape)

    def _upload(self, dst: Any, host: np.ndarray) -> None:
        # NOTE: as a 1-D memcpy (see asarray: cupy's 0-d path loses the sign of -0.0)
        dst.reshape(-1).set(host.reshape(-1))

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> Any:
        """A new array of +0.0 (0 / False for int64 / bool)."""
        return self.cp.zeros(tuple(shape), dtypes.normalize(dtype, "zeros", typed=True))

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        return self.cp.empty(tuple(shape), dtypes.normalize(dtype, "empty", typed=True))

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether two device arrays may share memory."""
        return bool(self.cp.may_share_memory(a, b))

    def is_array(self, x: Any) -> bool:
        """cupy arrays."""
        return isinstance(x, self.cp.ndarray)

    def _prepare(self, x: Any) -> Any:
        return x if x.flags.c_contiguous else self.cp.array(x, order="C", copy=True)
