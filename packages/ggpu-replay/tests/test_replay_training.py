"""Whole training runs: the replayed step lands on the CPU tape's bits, step after step."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import bits_equal, first_difference
from replay_testutil import train_replay, train_tape

EPISODES = 40


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_training_run_is_bit_equal_to_the_cpu_tape(bname, device, kind, dtype):
    """40 episodes of Adam (or SGD) with L2 and clipping: loss trace and final params."""
    want_losses, want = train_tape("numpy", dtype, kind, EPISODES)
    got_losses, got = train_replay(bname, device, None, kind, EPISODES, tape_dtype=dtype)
    assert bits_equal(np.array(got_losses), np.array(want_losses)), (
        f"loss trace: {first_difference(np.array(want_losses), np.array(got_losses))}")
    for k, (a, b) in enumerate(zip(want, got)):
        assert bits_equal(a, b), f"param {k}: {first_difference(a, b)}"
    assert want_losses[-1] < 0.9 * want_losses[0]  # it trained


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fma_contract_run_is_bit_equal_to_the_numpy_tape(bname, device, dtype):
    """40 Adam episodes under the fma contract: captured from a tape of that contract, the
    program's every matmul (forward and backward) is the fma kernel, and the run lands on the
    numpy tape's bits (the exact fma emulation) -- and not on the plain contract's."""
    want_losses, want = train_tape("numpy", dtype, "adam", EPISODES, inner="fma")
    got_losses, got = train_replay(bname, device, None, "adam", EPISODES, tape_dtype=dtype,
                                   inner="fma")
    assert bits_equal(np.array(got_losses), np.array(want_losses)), (
        f"loss trace: {first_difference(np.array(want_losses), np.array(got_losses))}")
    for k, (a, b) in enumerate(zip(want, got)):
        assert bits_equal(a, b), f"param {k}: {first_difference(a, b)}"
    _, plain = train_tape("numpy", dtype, "adam", EPISODES)
    assert not all(bits_equal(a, b) for a, b in zip(plain, got))
    assert want_losses[-1] < 0.9 * want_losses[0]


def test_split_calls_equal_the_whole_step(bname, device):
    """forward(); backward(); dopt.step() lands where prog.step(dopt) (one graph) lands."""
    a_losses, a = train_replay(bname, device, None, "adam", 12, whole_step=False)
    b_losses, b = train_replay(bname, device, None, "adam", 12, whole_step=True)
    assert bits_equal(np.array(a_losses), np.array(b_losses))
    assert all(bits_equal(x, y) for x, y in zip(a, b))


def test_without_clipping(bname, device):
    want_losses, want = train_tape("numpy", "float64", "adam", 10, clip=None)
    got_losses, got = train_replay(bname, device, None, "adam", 10, clip=None)
    assert bits_equal(np.array(got_losses), np.array(want_losses))
    assert all(bits_equal(x, y) for x, y in zip(want, got))


def test_float32_device_mode_tolerance(bname, device):
    """dtype="float32" on a float64 tape: not bits, a measured tolerance (docs/replay.md)."""
    want_losses, want = train_tape("numpy", "float64", "adam", EPISODES)
    got_losses, got = train_replay(bname, device, "float32", "adam", EPISODES)
    loss_dev = max(abs(a - b) / abs(a) for a, b in zip(want_losses, got_losses))
    param_dev = max(float(np.max(np.abs(a - b)) / np.max(np.abs(a))) for a, b in zip(want, got))
    print(f"float32 device mode: loss {loss_dev:.2e}, params {param_dev:.2e} relative")
    assert all(p.dtype == np.float64 for p in got)  # synced back into the float64 tape
    assert 0 < loss_dev < 1e-5, f"loss deviation {loss_dev:.3e}"
    assert 0 < param_dev < 1e-4, f"parameter deviation {param_dev:.3e}"


def test_the_captured_cpu_step_is_one_native_call(monkeypatch):
    """On the cpu backend the whole step (forward, backward, Adam) is one call into C."""
    import gtape as g
    from ggpu_replay import capture
    from gtensor import testing
    from replay_testutil import ae_loss, ae_problem, make_opt, register

    testing.require_backend("cpu")
    init, data = ae_problem()
    tp = g.Tape()
    ps = [tp.param(a) for a in init]
    x = tp.const(data[0])
    prog = capture(tp, ae_loss(x, ps), backend="cpu")
    opt = make_opt("adam", prog, None)
    register(opt, ps, None)
    prog.step(opt)  # records the optimizer's half
    calls = []
    module = prog.device.module
    real = module.run
    monkeypatch.setattr(module, "run", lambda *a: calls.append(a) or real(*a))
    prog.set_input(x, data[1])
    prog.step(opt)
    assert len(calls) == 1, f"{len(calls)} native calls for one step"
    want_l, want_p = train_tape("numpy", "float64", "adam", 2, clip=None)
    assert prog.loss() == want_l[1]
