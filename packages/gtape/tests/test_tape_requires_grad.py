"""Requires-grad propagation, proved by counting: a frozen branch costs no backward op and no
gradient buffer."""

from __future__ import annotations

from collections import Counter

import gtape as g
import numpy as np
from gtape_testutil import CountingBackend, bits_equal, host


def _episode(bname: str, frozen_depth: int) -> tuple[Counter, dict, bool]:
    """loss = sum(w * f) where f is a const passed through ``frozen_depth`` frozen ops."""
    be = CountingBackend(bname)
    rng = np.random.default_rng(0)
    with g.Tape(be) as tp:
        w = tp.param(rng.normal(size=(4, 3)))
        f = tp.const(rng.normal(size=(4, 3)))
        base = tp.const(rng.normal(size=(3, 3)))
        for _ in range(frozen_depth):  # a frozen "base model": const-only ops
            f = g.tanh(g.matmul(f, base)) + g.exp(g.softmax(f, axis=1))
        loss = g.sum(w * f)
        assert not f.requires_grad and loss.requires_grad
        be.calls.clear()
        tp.backward(loss)
        return Counter(be.calls), tp.stats()


def test_frozen_branch_costs_no_backward_work(bname):
    calls0, stats0 = _episode(bname, 0)
    calls5, stats5 = _episode(bname, 5)
    # the seed: fill; sum's vjp: reshape + broadcast_to; mul's vjp for w only: mul; w's buffer:
    # copy
    assert calls0 == Counter({"fill": 1, "reshape": 1, "broadcast_to": 1, "mul": 1, "copy": 1})
    assert calls5 == calls0
    assert stats5["nodes"] == stats0["nodes"] + 5 * 5
    assert stats5["grad_buffers"] == stats0["grad_buffers"] == 3  # w, w * f, loss
    assert stats5["vjps"] == stats0["vjps"] == 2


def test_lora_style_frozen_base(bname):
    """y = x @ W (frozen) + (x @ A) @ B: no gradient ever computed for W's product."""
    be = CountingBackend(bname)
    rng = np.random.default_rng(1)
    with g.Tape(be) as tp:
        x = tp.const(rng.normal(size=(5, 4)))
        wb = tp.const(rng.normal(size=(4, 4)))
        a = tp.param(rng.normal(size=(4, 2)))
        b = tp.param(np.zeros((2, 4)))  # PEFT init: B = 0
        base = x @ wb
        y = base + (x @ a) @ b
        loss = g.mse(y, np.zeros((5, 4)))
        be.calls.clear()
        tp.backward(loss)
        assert tp.grad_at(base.index) is None and tp.grad_at(wb.index) is None
        # matmul vjps: (x @ a) @ b needs both (2 matmuls), x @ a needs only a (1 matmul)
        assert be.calls["matmul"] == 3
        ga, gb = host(tp, tp.grad(a)), host(tp, tp.grad(b))
        assert bits_equal(ga, np.zeros_like(ga)) and np.any(gb != 0)  # dL/dA == 0 exactly


def test_requires_grad_flags(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        c = tp.const(np.ones(2))
        assert w.requires_grad and not c.requires_grad
        assert not g.exp(c).requires_grad and (c * w).requires_grad and (w + 1.0).requires_grad
        assert tp.stats()["requires_grad"] == 3
