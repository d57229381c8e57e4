"""A captured training step with BatchNorm: the running statistics (tape states) are updated
by the program's step exactly as by the eager step -- values, gradients, parameters and states
bitwise the eager numpy tape over several steps; the capture's own run leaves them at the
tape's values; sync_params brings them back. (Fused: ggpu-fuse's test_fuse_batchnorm.py;
gverify's digest of the states: gverify's test_digest_states.py.)"""

from __future__ import annotations

import pytest
from bn_case import check_captured_steps


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_captured_steps_update_running_statistics_as_the_eager_steps(device, dtype):
    check_captured_steps(device, dtype)
