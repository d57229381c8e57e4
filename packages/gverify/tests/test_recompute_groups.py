"""The referee's one-update recomputation of an optimizer with parameter groups (nanoGPT's
decay / no-decay split, torch's clipping): the groups are rebuilt from the committed state,
and the recomputed state is the real step's, bit for bit."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from gverify import canonical, recompute, store


def _run(bname: str, opt_cls, order: str):
    """Three params in two groups (slot order by ``order``), one step taken; the state before
    it, the gradients it used (by node) and the digest after it."""
    tp = g.Tape(bname, seed=3)
    rng = np.random.default_rng(0)
    w1, b1, w2 = (tp.param(rng.standard_normal(s)) for s in ((3, 4), (4,), (4, 2)))
    decay, no_decay = [w1, w2], [b1]
    groups = ([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
              if order == "decay first" else
              [{"params": no_decay, "weight_decay": 0.0}, {"params": decay}])
    opt = opt_cls(groups, lr=0.01, weight_decay=0.1)
    opt.set_clip(0.5, rule="torch")
    x = tp.const(rng.standard_normal((5, 3)))
    for _ in range(2):  # a step before: moments and counters that are not zero
        mark = tp.mark()
        loss = g.sum(g.tanh(x @ w1 + b1) @ w2)
        tp.backward(loss)
        before = store.entries(tp, opt, "test")
        grads = {p.index: np.array(tp.backend.to_numpy(tp.grad(p))) for p in tp.params()}
        opt.step()
        tp.reset_to(mark)
    after = canonical.entries_digest(store.entries(tp, opt, "test"))
    tp.close()
    return before, grads, after


@pytest.mark.parametrize("opt_cls", [gopt.AdamW, gopt.Adam])
@pytest.mark.parametrize("order", ["decay first", "no decay first"])
def test_a_grouped_update_recomputes_to_the_steps_digest(bname, opt_cls, order):
    before, grads, after = _run(bname, opt_cls, order)
    assert "opt.param_group" in dict(before)
    _, digest = recompute.update("numpy", before, grads)
    assert digest == after
    # another gradient gives another state: the check can fail
    i = next(iter(grads))
    moved = dict(grads)
    moved[i] = grads[i] * 1.5
    assert recompute.update("numpy", before, moved)[1] != after
