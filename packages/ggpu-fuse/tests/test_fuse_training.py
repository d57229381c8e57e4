"""The fused training step: a few launches, and bitwise the per-node replay and the CPU tape."""

from __future__ import annotations

import numpy as np
import pytest
from fuse_testutil import train
from gtensor.testing import bits_equal, first_difference

EPISODES = 40


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_run_is_bitwise_the_per_node_replay_and_the_tape(device, dtype, inner):
    """40 AE episodes under each inner-product contract: the fused rows call the contract's
    dot (gt_dot_fma under fma), so fused, per-node replay and tape agree bitwise."""
    want_l, want_p, _ = train("tape", device, EPISODES, dtype, inner)
    node_l, node_p, _ = train("replay", device, EPISODES, dtype, inner)
    got_l, got_p, prog = train("fused", device, EPISODES, dtype, inner)
    units = prog.fused("step").units
    src = "\n".join(u.kernel.source() for u in units)
    plain_dot = "gt_dot_f64(" in src or "gt_dot_f32(" in src or any(
        u.kernel.name in ("k_matmul_f64", "k_matmul_f32") for u in units)
    fma_dot = "gt_dot_fma_" in src or any("k_matmul_fma_" in u.kernel.name for u in units)
    assert (plain_dot, fma_dot) == ((False, True) if inner == "fma" else (True, False))
    for name, (trace, p) in {"per-node replay": (node_l, node_p),
                             "fused": (got_l, got_p)}.items():
        assert bits_equal(np.array(trace), np.array(want_l)), (
            f"{name} loss trace: {first_difference(np.array(want_l), np.array(trace))}")
        for k, (a, b) in enumerate(zip(want_p, p)):
            assert bits_equal(a, b), f"{name} param {k}: {first_difference(a, b)}"
    assert want_l[-1] < 0.5 * want_l[0]


@pytest.mark.default_plan
def test_the_ae_step_is_at_most_six_launches(device):
    _, _, prog = train("fused", device, 3)
    step = prog.fused("step")
    # forward + backward (each parameter's gradient written into its own buffer by the launch
    # that computes it: no copies) + one Adam update per parameter
    assert step.launches_before > 70
    assert len(step.units) <= 6, "\n".join(prog.plan)
    assert [s.cls for s in step.segments] == ["tail", "row", "flat", "tail", "flat"], \
        "\n".join(prog.plan)
    assert len(prog.plan) == len(step.units)
