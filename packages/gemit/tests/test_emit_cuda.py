"""emit_cuda: compiles for sm_90 without a GPU (nvcc or NVRTC); bitwise on a GPU (cupy)."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gemit import emit_cuda
from gemit.cuda import compile_check
from gemit_testutil import emit, flat, flat_ids, tape_run
from gtensor import testing
from gtensor.runtime.compile_check import available_compiler
from test_emit_models import MODELS


def _needs_compiler() -> None:
    if available_compiler() is None:
        pytest.skip("no CUDA device compiler here: neither nvcc nor the NVRTC wheel "
                    "(pip install nvidia-cuda-nvrtc) is installed")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_compiles_for_sm90(dtype: str) -> None:
    """Every model's emitted __device__ grad, in a per-example batch kernel, compiles for sm_90."""
    _needs_compiler()
    for build, make in MODELS.values():
        p, x = make(np.random.default_rng(0))
        compile_check(emit(build, p, x, dtype, emit_cuda), "grad", dtype,
                      n_ids=flat_ids(x).size)  # the classifier: int64 example_ids


def test_softmax_kernel_loses_block_sharing() -> None:
    """A thread per example: the copied kernel text keeps no __shared__ and no barrier."""
    with g.Tape() as tp:
        w, x = tp.param(np.ones((1, 4))), tp.const(np.ones((1, 4)))
        src = emit_cuda(tp, g.sum(g.softmax(w * x) * x), params=[w], inputs=[x])
    assert "__shared__" not in src
    body = src.split("#define __syncthreads() ((void)0)")[1].split("#undef __syncthreads")[0]
    assert "__syncthreads()" in body  # the copied text calls it; the macro makes it a no-op


def _gpu():
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as e:  # noqa: BLE001 - any failure means: no usable GPU here
        pytest.skip(f"no usable GPU (cupy): {e}")
    return cp


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_gpu_bitwise(model: str, dtype: str) -> None:
    """One GPU thread per example runs the emitted grad: bitwise equal to the tape."""
    cp = _gpu()
    from gemit.cuda import CudaBatchGrad

    build, make = MODELS[model]
    r = np.random.default_rng(11)
    examples = [make(r) for _ in range(64)]
    p0 = [np.asarray(a, dtype) for a in examples[0][0]]
    xs = [[a if a.dtype == np.int64 else np.asarray(a, dtype) for a in map(np.asarray, x)]
          for _, x in examples]
    src = emit(build, p0, xs[0], dtype, emit_cuda)
    n_ids = flat_ids(xs[0]).size
    fn = CudaBatchGrad(src, "grad", dtype, flat(p0, dtype).size, flat(xs[0], dtype).size,
                       n_ids)
    ids = np.stack([flat_ids(x) for x in xs]) if n_ids else None
    losses, grads = fn(flat(p0, dtype), np.stack([flat(x, dtype) for x in xs]), ids)
    losses, grads = cp.asnumpy(losses), cp.asnumpy(grads)
    for k, x in enumerate(xs):
        want_l, want_g = tape_run(build, p0, x, dtype, backend="numpy")
        assert testing.bits_equal(losses[k], want_l), f"{model}/{dtype} example {k}: loss"
        assert testing.bits_equal(grads[k], want_g), (
            f"{model}/{dtype} example {k}: {testing.first_difference(grads[k], want_g)}")
