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


def _nonfinite_cases(dtype, t):
    """(name, qkv, g) for a causal tile whose masked words some result could read: a NaN query
    (its row max NaN: every weight NaN), a key at -inf in a row's only key (max -inf: NaN
    weights), values at +-inf (g @ v^T infinite above the diagonal: the backward's row sums
    read the masked words), g at inf, g @ v^T finite but infinite once dropout scales it, a
    score at +inf (its row's sum NaN: every weight NaN); and finite inputs scaled to overflow
    the scores (max +inf, the masked weights still +0.0 where the sum is not NaN)."""
    rng = np.random.default_rng(t)
    base = rng.standard_normal((2, t, 3, 2, 3)).astype(dtype)
    g = rng.standard_normal((2, t, 2, 3)).astype(dtype)
    out = []
    x = base.copy()
    x[0, t // 2, 0, 1, 0] = np.nan
    out.append(("nan query", x, g))
    x = base.copy()
    x[1, 0, 1, 0, :] = [-np.inf, 1.0, 1.0]
    x[1, 0, 0, 0, :] = [1.0, 0.0, 0.0]
    out.append(("-inf key", x, g))
    x = base.copy()
    x[:, 1::3, 2, :, 1] = np.inf
    x[:, 2::5, 2, :, 2] = -np.inf
    out.append(("inf values", x, g))
    gi = g.copy()
    gi[:, ::2, :, 0] = np.inf
    out.append(("inf g", base, gi))
    # (the next two: one entry, or one row, whose words lie in a block above the diagonal
    # (element (0, 5) or (3, 5..): a wrong word changes the result half the time)
    x, gi = base.copy(), np.zeros_like(g)  # g @ v^T's (0, 5) finite, scaled (x2) not
    x[:, :, 2] = 0.0
    x[:, 5, 2, :, 0] = np.finfo(dtype).max / 1.5
    gi[:, 0, :, 0] = 1.0
    out.append(("g @ v^T overflowing once scaled", x, gi))
    x = base.copy()  # query 3 at inf: its row's scores +-inf, its max +inf, its sum NaN
    x[:, 3, 0, :, :] = [np.inf, 0.0, 0.0]
    x[:, :, 1, :, 0] = np.where(x[:, :, 1, :, 0] == 0.0, 1.0, x[:, :, 1, :, 0])
    out.append(("a row's sum NaN", x, g))
    big = np.finfo(dtype).max / 4
    out.append(("overflowing scores", (base * big).astype(dtype), g))
    return out


@pytest.mark.skipif(testing.backend_name() == "numpy",
                    reason="parity of the numpy reference with itself is vacuous; run with "
                           "GRAD_TEST_BACKEND=cpu, sim or cuda")
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
def test_causal_dropout_with_nonfinite_inputs_equals_numpy(be, dtype):
    """The cpu kernels draw a causal tile's dropout words only on and below the diagonal
    unless a result could read one above it (a NaN or -inf row max; an infinite entry of
    g @ v^T above it): non-finite queries, keys, values, gradients and overflowing scores
    equal the numpy definition bitwise (p = 0.5: a word read wrongly flips its weight half
    the time), odd and even T."""
    ref = gtensor.backend("numpy")
    for t in (9, 12):
        for what, qkv, g in _nonfinite_cases(dtype, t):
            for key in (np.array([3, -5], np.int64), np.array([11, 2], np.int64)):
                attrs = {"scale": 0.5, "causal": True, "p": 0.5}
                for op, ins in (("qkv_attention", (qkv, key)),
                                ("qkv_attention_grad", (g, qkv, key))):
                    with np.errstate(all="ignore"):
                        want = ref.to_numpy(ref.apply(
                            op, [ref.asarray(a, a.dtype) for a in ins], **attrs))
                    got = be.to_numpy(be.apply(op, [be.asarray(a, a.dtype) for a in ins],
                                               **attrs))
                    assert testing.bits_equal(got, want), (what, op, t, key,
                                                           testing.first_difference(got, want))
