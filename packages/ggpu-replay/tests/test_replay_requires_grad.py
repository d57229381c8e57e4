"""Requires-grad propagation on the device: a frozen branch gets no backward launch and no
gradient buffer, counted."""

from __future__ import annotations

import gtape as g
import numpy as np
from ggpu_replay import capture


def _program(device: str, frozen_depth: int):
    rng = np.random.default_rng(0)
    tp = g.Tape()
    w = tp.param(rng.normal(size=(4, 3)))
    f = tp.const(rng.normal(size=(4, 3)))
    base = tp.const(rng.normal(size=(3, 3)))
    for _ in range(frozen_depth):  # a frozen "base model": const-only ops
        f = g.tanh(g.matmul(f, base)) + g.exp(g.softmax(f, axis=1))
    loss = g.sum(w * f)
    return tp, capture(tp, loss, backend=device)


def test_frozen_branch_costs_no_backward_launch_and_no_gradient(device):
    tp0, p0 = _program(device, 0)
    tp5, p5 = _program(device, 5)
    s0, s5 = p0.stats(), p5.stats()
    assert s5["nodes"] == s0["nodes"] + 25
    assert s5["forward_launches"] > s0["forward_launches"]
    assert s5["backward_launches"] == s0["backward_launches"]
    assert s5["grad_buffers"] == s0["grad_buffers"] == 3  # w, w * f, loss
    frozen = {n.index for n in p5.nodes if not n.requires_grad}
    assert not [launch for launch in p5.backward_launches if launch.tag in frozen]
    assert all(p5.grad_at(i) is None for i in frozen)


def test_grad_buffers_match_the_tape(device):
    tp, prog = _program(device, 3)
    loss = tp.var_at(len(prog.nodes) - 1)
    tp.backward(loss)
    assert prog.stats()["grad_buffers"] == tp.stats()["grad_buffers"]
