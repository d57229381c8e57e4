"""gtape's conv2d / pools: refused calls leave the tape unchanged; the bias is one add."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor.testing import bits_equal


@pytest.mark.parametrize("call,exc,match", [
    (lambda v: g.conv2d(v["x"], v["w1"]), ValueError, r"conv2d: x has 2 channels"),
    (lambda v: g.conv2d(v["x"], v["w"], v["b2"]), ValueError,
     r"conv2d: b has shape \(2,\); expected \(3,\)"),
    (lambda v: g.conv2d(v["x"], v["w"], stride=0), ValueError, r"conv2d: stride is 0"),
    (lambda v: g.conv2d(v["x"], v["w"], padding=-2), ValueError, r"conv2d: padding is -2"),
    (lambda v: g.max_pool2d(v["x"], 7), ValueError, r"max_pool2d: kernel \(7, 7\) is larger"),
    (lambda v: g.avg_pool2d(v["x"], (2, 2.0)), TypeError, r"avg_pool2d: kernel is \(2, 2.0\)"),
    (lambda v: g.max_pool2d(v["x3"], 2), ValueError,
     r"max_pool2d: x has shape \(2, 2, 25\); expected a 4-D array"),
])
def test_refused_calls_leave_the_tape_unchanged(bname, call, exc, match):
    shapes = {"x": (2, 2, 5, 5), "w": (3, 2, 3, 3), "w1": (3, 1, 3, 3), "b2": (2,),
              "x3": (2, 2, 25)}
    with g.Tape(bname) as tp:
        v = {k: tp.param(np.ones(s)) for k, s in shapes.items()}
        n = len(tp)
        with pytest.raises(exc, match=match):
            call(v)
        assert len(tp) == n


def test_bias_is_one_broadcast_add(bname):
    rng = np.random.default_rng(3)
    x, w, b = rng.normal(size=(2, 2, 5, 5)), rng.normal(size=(3, 2, 3, 3)), rng.normal(size=3)
    with g.Tape(bname) as tp:
        X, W, B = tp.const(x), tp.param(w), tp.param(b)
        y = g.conv2d(X, W, B, padding=1)
        z = g.conv2d(X, W, padding=1) + g.reshape(B, (3, 1, 1))
        assert bits_equal(y.numpy(), z.numpy())
        assert [n.name for n in tp.nodes()[3:6]] == ["conv2d", "reshape", "add"]
