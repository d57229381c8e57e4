"""conv2d and the pools in a fused program: their launches stay per-node kernels (kinds "conv"
and "pool" are not row-local maps), everything around them fuses, and every node's value and
gradient equals the per-node replay bit for bit."""

from __future__ import annotations

import gtape as g
import numpy as np
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference


def test_conv_and_pool_launches_stay_alone_and_bits_equal():
    rng = np.random.default_rng(4)
    with g.Tape("numpy") as tp:
        w = tp.param(rng.normal(0, 0.5, (3, 2, 3, 3)))
        b = tp.param(rng.normal(0, 0.1, 3))
        x = tp.const(rng.normal(size=(4, 2, 6, 6)))
        h = g.tanh(g.conv2d(x, w, b, stride=1, padding=1)) * 0.5 + 0.1
        h = g.avg_pool2d(g.max_pool2d(h, 2), 2, 1)
        loss = g.mean(h * h)
        prog = capture(tp, loss, backend="sim")
        fp = fuse(prog)
        for p in (prog, fp):
            p.forward()
            p.backward()
        for i in range(len(prog.nodes)):
            a, c = prog.value_at(i), fp.value_at(i)
            assert bits_equal(a, c), f"node {i} value: {first_difference(a, c)}"
            ga, gc = prog.grad_at(i), fp.grad_at(i)
            assert (ga is None) == (gc is None)
            assert ga is None or bits_equal(ga, gc), f"node {i} grad: {first_difference(ga, gc)}"
        seen = set()
        for phase in ("forward", "backward"):
            for seg in fp._phase(phase).segments:
                kinds = {info.kind for info in seg.items}
                if kinds & {"conv", "pool"}:
                    assert not seg.fused and len(seg.items) == 1, (phase, kinds)
                    seen |= kinds
        assert seen == {"conv", "pool"}
