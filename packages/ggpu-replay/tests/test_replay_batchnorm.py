"""A captured training step with BatchNorm: the running statistics (tape states) are updated
by the program's step exactly as by the eager step -- values, gradients, parameters and states
bitwise the eager numpy tape over several steps, fused and not; the capture's own run leaves
them at the tape's values; sync_params brings them back; gverify's digest covers them."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import capture
from gtensor.testing import bits_equal


def _model(tp: g.Tape) -> g.nn.Module:
    return g.nn.Sequential(
        g.nn.Conv2d(tp, 2, 4, 3, padding=1, bias=False), g.nn.BatchNorm2d(tp, 4), g.nn.ReLU(),
        g.nn.MaxPool2d(3, 2, 1), g.nn.Conv2d(tp, 4, 4, 3, padding=1, groups=2),
        g.nn.BatchNorm2d(tp, 4, momentum=None), g.nn.ReLU(), g.nn.AdaptiveAvgPool2d(1),
        g.nn.Flatten(), g.nn.Linear(tp, 4, 3))


def _batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    return [(rng.normal(size=(4, 2, 6, 6)), rng.integers(0, 3, 4)) for _ in range(n)]


def _eager(dtype: str, batches) -> tuple[dict, list[float]]:
    tp = g.Tape("numpy", dtype, seed=5)
    model = _model(tp)
    opt = gopt.Adam(tp, lr=0.01)
    opt.add(model.parameters())
    losses = []
    for x, y in batches:
        with tp.episode():
            loss = g.cross_entropy(model(tp.const(x, name="x")), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return model.state_dict(), losses


@pytest.mark.parametrize("fused", [False, True], ids=["per-node", "fused"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_captured_steps_update_running_statistics_as_the_eager_steps(device, dtype, fused):
    batches = _batches(4)
    want, want_losses = _eager(dtype, batches)
    tp = g.Tape("numpy", dtype, seed=5)
    model = _model(tp)
    mark = tp.mark()
    x0, y0 = batches[0]
    loss = g.cross_entropy(model(tp.const(x0, name="x")), y0)
    before = model.state_dict()
    prog = capture(tp, loss, backend=device)
    if fused:
        from ggpu_fuse import fuse

        prog = fuse(prog)
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


def test_digest_covers_the_running_statistics():
    """gverify's digest of a tape with states changes when only a state changes, and equals
    the captured program's digest after the same steps (program and tape read alike)."""
    from gverify import digest

    tp = g.Tape()
    model = _model(tp)
    mark = tp.mark()
    d0 = digest(tp)
    x, y = _batches(1)[0]
    with tp.no_grad():
        model(tp.const(x))  # a training-mode forward: only the states move
    assert digest(tp) != d0  # the pending update is the state's current value
    tp.reset_to(mark)
    d1 = digest(tp)
    assert d1 != d0
    loss = g.cross_entropy(model(tp.const(x)), y)
    prog = capture(tp, loss, backend="sim")
    assert digest(prog) == d1  # the capture's own run does not move them
    prog.forward()
    prog.backward()
    assert digest(prog) != d1
