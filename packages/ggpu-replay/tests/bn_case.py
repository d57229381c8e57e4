"""The BatchNorm model, batches and eager run shared by the captured-step tests of
ggpu-replay, ggpu-fuse and gverify (the suites above ggpu-replay read it with runpy.run_path:
their packages' tests do not install ggpu-replay's tests)."""

from __future__ import annotations

from collections.abc import Callable

import gopt
import gtape as g
import numpy as np
from ggpu_replay import capture
from gtensor.testing import bits_equal


def bn_model(tp: g.Tape) -> g.nn.Module:
    """Two conv / BatchNorm blocks (one with momentum=None), pools and a linear head."""
    return g.nn.Sequential(
        g.nn.Conv2d(tp, 2, 4, 3, padding=1, bias=False), g.nn.BatchNorm2d(tp, 4), g.nn.ReLU(),
        g.nn.MaxPool2d(3, 2, 1), g.nn.Conv2d(tp, 4, 4, 3, padding=1, groups=2),
        g.nn.BatchNorm2d(tp, 4, momentum=None), g.nn.ReLU(), g.nn.AdaptiveAvgPool2d(1),
        g.nn.Flatten(), g.nn.Linear(tp, 4, 3))


def bn_batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` (images, labels) batches of 4."""
    rng = np.random.default_rng(11)
    return [(rng.normal(size=(4, 2, 6, 6)), rng.integers(0, 3, 4)) for _ in range(n)]


def bn_eager(dtype: str, batches) -> tuple[dict, list[float]]:
    """The eager numpy tape's Adam run over ``batches``: (final state_dict, losses)."""
    tp = g.Tape("numpy", dtype, seed=5)
    model = bn_model(tp)
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



def check_captured_steps(device: str, dtype: str, transform: Callable = lambda p: p) -> None:
    """A program captured on ``device`` (``transform``ed: fused, or as is) trains 4 Adam steps:
    losses, parameters and running statistics bitwise the eager numpy tape's; the capture
    itself leaves the states at the tape's values."""
    batches = bn_batches(4)
    want, want_losses = bn_eager(dtype, batches)
    tp = g.Tape("numpy", dtype, seed=5)
    model = bn_model(tp)
    mark = tp.mark()
    x0, y0 = batches[0]
    loss = g.cross_entropy(model(tp.const(x0, name="x")), y0)
    before = model.state_dict()
    prog = transform(capture(tp, loss, backend=device))
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
