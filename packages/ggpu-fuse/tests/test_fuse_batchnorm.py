"""A fused captured step with BatchNorm updates the running statistics (tape states) as the
eager step: parameters, states and losses bitwise the eager numpy tape over several steps (the
per-node program: ggpu-replay's test_replay_batchnorm.py, whose model this reads)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from ggpu_fuse import fuse

BN = runpy.run_path(str(Path(__file__).resolve().parents[2] / "ggpu-replay" / "tests"
                        / "bn_case.py"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_steps_update_running_statistics_as_the_eager_steps(device, dtype):
    BN["check_captured_steps"](device, dtype, fuse)
