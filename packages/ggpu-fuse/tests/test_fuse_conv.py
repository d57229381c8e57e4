"""conv2d and the pools in a fused program: their launches stay per-node kernels (kinds "conv"
and "pool" are not row-local maps), everything around them fuses, and every node's value and
gradient equals the per-node replay bit for bit."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from fuse_testutil import assert_same_nodes, node_bits
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.kernels import Kind
from gtensor.testing import bits_equal


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
        assert_same_nodes(node_bits(prog), node_bits(fp))
        seen = set()
        for phase in ("forward", "backward"):
            for seg in fp._phase(phase).segments:
                kinds = {info.kind for info in seg.items}
                if kinds & {Kind.CONV, Kind.POOL}:
                    assert not seg.fused and len(seg.items) == 1, (phase, kinds)
                    seen |= kinds
        assert seen == {Kind.CONV, Kind.POOL}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["device", "cpu"])
def test_fma_contract_cnn_step_is_the_tapes(device, backend, dtype):
    """A CNN step captured from a Tape(inner="fma") (on the device, or as the compiled cpu
    step), then fused: its conv launches (forward and backward) are the fma kernels, and every
    node's value and gradient equals the numpy tape's bits -- not the plain contract's."""
    rng = np.random.default_rng(9)
    w0, b0 = rng.normal(0, 0.5, (3, 2, 3, 3)), rng.normal(0, 0.1, 3)
    w1, x0 = rng.normal(0, 0.5, (2, 3, 2, 2)), rng.normal(size=(4, 2, 6, 6))

    def episode(inner):
        tp = g.Tape("numpy", dtype, inner=inner)
        w, b, v = tp.param(w0), tp.param(b0), tp.param(w1)
        h = g.tanh(g.conv2d(tp.const(x0), w, b, stride=1, padding=1))
        h = g.conv2d(g.max_pool2d(h, 2), v, stride=(2, 1), padding=(0, 1))
        return tp, g.mean(h * h)

    ref, rloss = episode("fma")
    ref.backward(rloss)
    tp, loss = episode("fma")
    prog = capture(tp, loss, backend=device if backend == "device" else "cpu")
    fp = fuse(prog)
    names = [info.name for phase in ("forward", "backward")
             for seg in fp._phase(phase).segments for info in seg.items if info.kind is Kind.CONV]
    # 2 forwards, 2 weight gradients, the second conv's input gradient (x is a const)
    assert len(names) == 5 and all("_fma_" in n for n in names), names
    assert {n.rsplit("_fma_", 1)[0][2:] for n in names} == {"conv2d", "conv2d_grad_input",
                                                             "conv2d_grad_weight"}
    for p in (prog, fp):
        p.forward()
        p.backward()
        assert_same_nodes(node_bits(ref, len(p.nodes)), node_bits(p))
    plain, ploss = episode("plain")
    plain.backward(ploss)
    assert not bits_equal(plain.grad_at(1), fp.grad_at(1))  # w's gradient
