"""The fused attention kernels (ops.attention) against the numpy definition, where the cpu
kernels take exp's first stage over a tile: flagged lanes (exp inputs the stage gets wrong)
in every row, causal and not, split across 1-3 threads by (b, h) block."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest
from gtensor import testing
from gtensor.ops.forms import FIRST_STAGE_LOOP
from gtensor.ops.registry import get
from gtensor.runtime import cpu as cpurt
from test_crmath import DTYPES, IDS
from test_first_stage import _hard_exp_rows


def _hard_qkv(dtype, b, t, h):
    """qkv (b, t, 3, h, 1) whose scores (q = 1, scale 1: score = k exactly) are exp inputs
    <= 0 the stage flags and gets wrong, each row's max 0 (at key 0: a causal prefix's too)."""
    rng = np.random.default_rng(t)
    qkv = np.empty((b, t, 3, h, 1), dtype)
    qkv[:, :, 0] = 1.0
    hard = np.roll(_hard_exp_rows(dtype, b * h, t), -(t // 2), axis=1)  # the 0 at key 0
    qkv[:, :, 1, :, 0] = hard.reshape(b, h, t).transpose(0, 2, 1)
    qkv[:, :, 2] = rng.standard_normal((b, t, h, 1))
    return qkv, rng.standard_normal((b, t, h, 1)).astype(dtype)


@pytest.mark.skipif(testing.backend_name() == "numpy",
                    reason="parity of the numpy reference with itself is vacuous; run with "
                           "GRAD_TEST_BACKEND=cpu, sim or cuda")
@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
def test_flagged_exp_lanes_equal_numpy(be, monkeypatch, dtype, threads):
    monkeypatch.setenv("GTENSOR_CPU_THREADS", threads)
    ref = gtensor.backend("numpy")
    key = np.array([3, -5], np.int64)
    for t in (37, 9):
        qkv, gy = _hard_qkv(dtype, 2, t, 3)
        for causal in (False, True):
            for p in (0.0, 0.4):
                attrs = {"scale": 1.0, "causal": causal, "p": p}
                for op, ins in (("qkv_attention", (qkv, key)),
                                ("qkv_attention_grad", (gy, qkv, key))):
                    want = ref.to_numpy(ref.apply(op, [ref.asarray(a, a.dtype) for a in ins],
                                                  **attrs))
                    got = be.to_numpy(be.apply(op, [be.asarray(a, a.dtype) for a in ins],
                                               **attrs))
                    assert testing.bits_equal(got, want), (op, t, causal, p,
                                                           testing.first_difference(got, want))


@pytest.mark.skipif(testing.backend_name() in ("numpy", "cpu"),
                    reason="the CUDA kernels' shared-memory rows: run with GRAD_TEST_BACKEND=sim "
                           "or cuda (the cpu kernels hold no such cache)")
def test_rows_past_the_cuda_backwards_cache_equal_numpy(be):
    """The CUDA backward holds each row's softmax values in shared memory for the first
    ROWS_CACHED rows and computes them again past it: T = ROWS_CACHED + 6 equals numpy."""
    from gtensor.ops.attention import ROWS_CACHED

    ref = gtensor.backend("numpy")
    t = ROWS_CACHED + 6
    rng = np.random.default_rng(1)
    ins = (rng.standard_normal((1, t, 1, 1)), rng.standard_normal((1, t, 3, 1, 1)),
           np.array([5, 7], np.int64))
    attrs = {"scale": 0.7, "causal": True, "p": 0.1}
    want = ref.to_numpy(ref.apply("qkv_attention_grad", [ref.asarray(a, a.dtype) for a in ins],
                                  **attrs))
    got = be.to_numpy(be.apply("qkv_attention_grad", [be.asarray(a, a.dtype) for a in ins],
                               **attrs))
    assert testing.bits_equal(got, want), testing.first_difference(got, want)


def test_the_cpu_kernels_stage_exp_and_the_cuda_kernels_do_not():
    for ft in gtensor.dtypes.FLOATS:
        for name in ("qkv_attention", "qkv_attention_grad"):
            op = get(name)
            for k in op.kernel_set(ft, cpu=True).kernels:
                src = cpurt.kernel_source(k)
                assert FIRST_STAGE_LOOP in k.body and cpurt.kernel_flags(src) == (
                    *cpurt.CXX_FLAGS, *cpurt.FIRST_STAGE_FLAGS, *cpurt.gather_flags())
            for k in op.kernel_set(ft).kernels:
                assert FIRST_STAGE_LOOP not in k.body and "_first(" not in k.body
