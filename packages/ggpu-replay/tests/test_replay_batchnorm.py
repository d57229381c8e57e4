"""A captured training step with BatchNorm: the running statistics (tape states) are updated
by the program's step exactly as by the eager step -- values, gradients, parameters and states
bitwise the eager numpy tape over several steps; the capture's own run leaves them at the
tape's values; sync_params brings them back. (Fused: ggpu-fuse's test_fuse_batchnorm.py;
gverify's digest of the states: gverify's test_digest_states.py.)"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from bn_case import bn_batches, bn_eager, bn_model
from ggpu_replay import capture
from gtensor.testing import bits_equal


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_captured_steps_update_running_statistics_as_the_eager_steps(device, dtype):
    batches = bn_batches(4)
    want, want_losses = bn_eager(dtype, batches)
    tp = g.Tape("numpy", dtype, seed=5)
    model = bn_model(tp)
    mark = tp.mark()
    x0, y0 = batches[0]
    loss = g.cross_entropy(model(tp.const(x0, name="x")), y0)
    before = model.state_dict()
    prog = capture(tp, loss, backend=device)
    assert all(np.array_equal(model.state_dict()[k], v) for k, v in before.items())
    dopt = prog.adam(model.parameters(), lr=0.01)
    losses = []
    for x, y in batches:
        prog.set_input("x", x)
        prog.set_input("labels", y)
        prog.step(dopt)
        losses.append(prog.loss())
    assert losses == want_losses
    tp.reset_to(mark)
    prog.sync_params(tp)
    got = model.state_dict()
    assert list(got) == list(want)
    for k, v in want.items():
        assert bits_equal(got[k], v), k
