"""Trajectories bit-exact against a hand computation in plain Python floats (>= 5 steps).

Six steps or more with a gradient that changes every step: a step count that does not advance
(the "frozen t" bug class), a moment that is not stored, an L2 or clip term applied in another
order, all change bits by the second step.
"""

from __future__ import annotations

import pytest
from gopt import SGD, Adam
from gopt_testutil import ALPHAS, Hand, run_hand, run_tape
from gtensor.testing import bits_equal, first_difference

STEPS = 6
DTYPES = ["float64", "float32"]


def _check(got: dict, want_traj: list, want_grads: list) -> None:
    for step, (gs, ws) in enumerate(zip(got["grads"], want_grads)):
        for k, (a, b) in enumerate(zip(gs, ws)):
            assert bits_equal(a, b), f"premise: gradient {k} at step {step + 1}: " \
                                     f"{first_difference(a, b)}"
    for step, (ps, ws) in enumerate(zip(got["traj"], want_traj)):
        for k, (a, b) in enumerate(zip(ps, ws)):
            assert bits_equal(a, b), f"param {k} after step {step + 1}: {first_difference(a, b)}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_trajectory_bit_exact(bname, dtype):
    got = run_tape(bname, dtype, lambda tp: SGD(tp, lr=0.05), STEPS)
    _check(got, *run_hand(Hand("sgd", 0.05, dtype=dtype), STEPS, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_l2_clip_trajectory_bit_exact(bname, dtype):
    got = run_tape(bname, dtype, lambda tp: SGD(tp, lr=0.05), STEPS, alphas=ALPHAS, clip=2.0)
    hand = Hand("sgd", 0.05, alphas=ALPHAS, clip=2.0, dtype=dtype)
    _check(got, *run_hand(hand, STEPS, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_trajectory_bit_exact(bname, dtype):
    got = run_tape(bname, dtype, lambda tp: Adam(tp, lr=0.1), STEPS)
    _check(got, *run_hand(Hand("adam", 0.1, dtype=dtype), STEPS, dtype=dtype))
    assert got["opt"].t == STEPS


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_l2_trajectory_bit_exact(bname, dtype):
    mk = lambda tp: Adam(tp, lr=0.1, betas=(0.8, 0.99), eps=1e-6)  # noqa: E731
    got = run_tape(bname, dtype, mk, STEPS, alphas=ALPHAS)
    hand = Hand("adam", 0.1, betas=(0.8, 0.99), eps=1e-6, alphas=ALPHAS, dtype=dtype)
    _check(got, *run_hand(hand, STEPS, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_clip_trajectory_bit_exact(bname, dtype):
    # the norm starts near 6 and falls: max_norm 3.0 clips the early steps and not the late ones
    got = run_tape(bname, dtype, lambda tp: Adam(tp, lr=0.3), 10, clip=3.0)
    hand = Hand("adam", 0.3, clip=3.0, dtype=dtype)
    want_traj, want_grads = run_hand(hand, 10, dtype=dtype)
    _check(got, want_traj, want_grads)
    assert got["norms"][0] > 3.0 > got["norms"][-1], got["norms"]  # both branches taken
    assert got["norms"][-1] == hand.norm


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_l2_clip_trajectory_bit_exact(bname, dtype):
    got = run_tape(bname, dtype, lambda tp: Adam(tp, lr=0.3), 10, alphas=ALPHAS, clip=3.0)
    hand = Hand("adam", 0.3, alphas=ALPHAS, clip=3.0, dtype=dtype)
    _check(got, *run_hand(hand, 10, dtype=dtype))


def test_step_count_advances_and_lr_t_changes(bname):
    got = run_tape(bname, "float64", lambda tp: Adam(tp, lr=0.1), 3)
    opt = got["opt"]
    assert opt.t == 3
    b1p, b2p = 0.9 * 0.9 * 0.9, 0.999 * 0.999 * 0.999
    assert opt.lr_t == 0.1 * (1.0 - b2p) ** 0.5 / (1.0 - b1p)
