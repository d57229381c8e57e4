"""A fused captured step with BatchNorm updates the running statistics (tape states) as the
eager step: parameters, states and losses bitwise the eager numpy tape over several steps (the
per-node program: ggpu-replay's test_replay_batchnorm.py, whose model this reads)."""

from __future__ import annotations

import runpy
from pathlib import Path

import gtape as g
import numpy as np
import pytest
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.testing import bits_equal

BN = runpy.run_path(str(Path(__file__).resolve().parents[2] / "ggpu-replay" / "tests"
                        / "bn_case.py"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_steps_update_running_statistics_as_the_eager_steps(device, dtype):
    batches = BN["bn_batches"](4)
    want, want_losses = BN["bn_eager"](dtype, batches)
    tp = g.Tape("numpy", dtype, seed=5)
    model = BN["bn_model"](tp)
    mark = tp.mark()
    x0, y0 = batches[0]
    loss = g.cross_entropy(model(tp.const(x0, name="x")), y0)
    before = model.state_dict()
    prog = fuse(capture(tp, loss, backend=device))
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
