"""A captured episode whose loss holds a recorded backward (a gradient penalty) replays it
bitwise: the recorded gradient is ordinary nodes, the helpers' rules ordinary kernels."""

from __future__ import annotations

import gtape as g
import numpy as np
from ggpu_replay import capture


def test_a_gradient_penalty_episode_replays_bitwise(device):
    tp = g.Tape("numpy")
    w = tp.param(np.array([[0.5, -0.3], [-1.0, 0.2], [2.0, 0.7]]))
    x = tp.const(np.array([[1.0, 2.0, 0.5], [-1.0, 0.5, 1.0]]))
    h = x @ w
    loss = g.sum(g.softmax(g.tanh(h), axis=-1) * g.sigmoid(h) + g.relu(h) * g.maximum(h, 0.1))
    (gw,) = g.grad(loss, [w], create_graph=True)
    total = loss + 0.1 * g.sum(gw * gw)
    tp.backward(total)
    want = np.array(tp.grad(w))
    prog = capture(tp, total, backend=device)
    prog.forward()
    prog.backward()
    assert np.asarray(prog.grad(w)).tobytes() == want.tobytes()
