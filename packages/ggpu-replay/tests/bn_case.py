"""The BatchNorm model, batches and eager run shared by the captured-step tests of
ggpu-replay, ggpu-fuse and gverify (the suites above ggpu-replay read it with runpy.run_path:
their packages' tests do not install ggpu-replay's tests)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np


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

