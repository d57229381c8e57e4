"""Run an emitted ``__device__ grad`` on a GPU: one thread per example (cupy), or compile-check it.

The wrapper kernel is the only code added around the emitted text: thread ``i`` calls ``grad``
on example row ``i`` and writes that example's loss and gradient row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor.dtypes import float_type

NVRTC_OPTIONS = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true",
                 "-std=c++17")


def batch_source(cuda_src: str, name: str, dtype: Any, n_ids: int = 0) -> str:
    """``cuda_src`` (from ``emit_cuda``) plus ``extern "C" __global__ {name}_batch``.

    ``{name}_batch(params, X, L, G, n, n_params, n_example)``: for each example ``i < n``,
    ``L[i], G[i*n_params:]`` = ``name(params, X + i*n_example, ...)``. With ``n_ids`` > 0 (a
    function with ``example_ids``) the kernel takes ``I`` (int64, n rows of n_ids) after ``X``.
    """
    t = float_type(dtype).ctype
    ids_param = "const long long* I, " if n_ids else ""
    ids_arg = f"I + i * {int(n_ids)}LL, " if n_ids else ""
    return f"""{cuda_src}
extern "C" __global__ void {name}_batch(const {t}* params, const {t}* X, {ids_param}{t}* L,
                                      {t}* G, long long n, long long n_params,
                                      long long n_example)
{{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) L[i] = {name}(params, X + i * n_example, {ids_arg}G + i * n_params);
}}
"""


def compile_check(cuda_src: str, name: str, dtype: Any, arch: str = "sm_90",
                  n_ids: int = 0) -> None:
    """Compile the batch wrapper of ``cuda_src`` for ``arch`` (nvcc or NVRTC; no GPU needed)."""
    from gtensor.runtime.compile_check import compile_for_device

    compile_for_device(batch_source(cuda_src, name, dtype, n_ids), arch)


class CudaBatchGrad:
    """``fn(params, X) -> (losses, grads)``: every row of X through the emitted grad on the GPU."""

    def __init__(self, cuda_src: str, name: str, dtype: Any, n_params: int,
                 n_example: int, n_ids: int = 0) -> None:
        import cupy as cp

        self.cp, self.dtype = cp, np.dtype(dtype)
        self.n_params, self.n_example, self.n_ids = n_params, n_example, n_ids
        mod = cp.RawModule(code=batch_source(cuda_src, name, dtype, n_ids),
                           options=NVRTC_OPTIONS)
        self._kernel = mod.get_function(f"{name}_batch")

    def __call__(self, params: Any, X: Any, ids: Any = None) -> tuple[Any, Any]:
        """Per-example losses (n,) and gradients (n, n_params), as cupy arrays (``ids``: the
        (n, n_ids) int64 example_ids rows, where the function takes them)."""
        cp = self.cp
        p = cp.ascontiguousarray(cp.asarray(params, self.dtype)).ravel()
        x = cp.ascontiguousarray(cp.asarray(X, self.dtype)).reshape(-1, self.n_example)
        n = x.shape[0]
        if (ids is None) != (not self.n_ids):
            raise ValueError(f"CudaBatchGrad: ids is {'None' if ids is None else 'given'}; "
                             f"the function takes {self.n_ids} example_ids per example")
        idv = () if ids is None else (
            cp.ascontiguousarray(cp.asarray(ids, np.int64)).reshape(n, self.n_ids),)
        losses = cp.empty(n, self.dtype)
        grads = cp.empty((n, self.n_params), self.dtype)
        threads = 128
        blocks = max(1, -(-n // threads))
        self._kernel((blocks,), (threads,), (p, x, *idv, losses, grads, np.int64(n),
                                             np.int64(self.n_params), np.int64(self.n_example)))
        return losses, grads
