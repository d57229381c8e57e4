"""Rung 5 on a GPU: the same per-example rows from ``emit_cuda``, one CUDA thread per example."""

from __future__ import annotations

import gtape as g
import numpy as np
from gemit import emit_cuda

from .swarm import History, Progress, SwarmConfig, loss_of, make_data, train


def emit_cuda_source(cfg: SwarmConfig) -> str:
    """The emitted ``__device__ grad`` of ``loss_of`` for one example."""
    with g.Tape("numpy", cfg.dtype) as tp:
        w, b = tp.param(np.zeros((cfg.d, 1))), tp.param(np.zeros(1))
        x, y = tp.const(np.zeros((1, cfg.d))), tp.const(np.zeros((1, 1)))
        return emit_cuda(tp, loss_of(w, b, x, y), params=[w, b], inputs=[x, y], name="grad")


def train_gpu(cfg: SwarmConfig, progress: Progress | None = None) -> History:
    """The training with every iteration's rows from the GPU (cupy; the data stays there)."""
    import cupy as cp
    from gemit.cuda import CudaBatchGrad

    fn = CudaBatchGrad(emit_cuda_source(cfg), "grad", cfg.dtype, cfg.d + 1, cfg.d + 1)
    ex = cp.asarray(make_data(cfg)[0])

    def rows(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        losses, grads = fn(params, ex)
        return cp.asnumpy(losses), cp.asnumpy(grads)

    return train(cfg, rows, "cuda", progress)
