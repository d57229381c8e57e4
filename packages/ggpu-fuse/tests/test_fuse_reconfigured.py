"""A fused program whose optimizer is reconfigured after its whole step was fused: the step is
fused again from the re-recorded optimizer segment (the fused units are a recording keyed by
the launches they were made from), so it lands on the per-node program's bits (issue 24)."""

from __future__ import annotations

import gtape as g
import numpy as np
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference


def _run(device: str, fused: bool, alone) -> list[np.ndarray]:
    rng = np.random.default_rng(2)
    tp = g.Tape("numpy")
    w = tp.param(rng.normal(0, 0.5, (3, 4)))
    b = tp.param(np.zeros((1, 4)))
    x = tp.const(rng.normal(size=(6, 3)))
    prog = capture(tp, g.mean(g.tanh(x @ w + b) * g.tanh(x @ w + b)), backend=device)
    if fused:
        prog = fuse(prog, alone=alone)
    dev = prog.sgd(0.5)
    dev.add([w, b])
    out = []
    for k in range(6):
        if k == 2:
            dev.optimizer.set_clip(0.01)  # through gopt's door: the segment re-records
        if k == 4:
            dev.optimizer.lr = 0.05
        prog.step(dev)
        out.append(np.concatenate([prog.value(w).ravel(), prog.value(b).ravel()]))
    return out


def test_a_reconfigured_optimizer_refuses_the_old_fused_step(device, alone):
    want = _run(device, False, alone)
    got = _run(device, True, alone)
    for k, (a, b) in enumerate(zip(got, want)):
        assert bits_equal(a, b), f"step {k + 1}: {first_difference(b, a)}"
