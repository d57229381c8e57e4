"""The backward engine's bookkeeping, pinned: zeroed gradients, the work counts.

A parameter the loss does not reach (or one recorded after the loss) gets a gradient of +0.0
bits, also after an earlier backward gave it other values; ``tp.stats()`` counts exactly the
vjps, reductions, accumulations and parameter copies of the last backward.
"""

from __future__ import annotations

import gtape as g
import numpy as np


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint64)


def test_unreached_parameters_get_positive_zero(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.5, -2.0]))
        v = tp.param(np.array([3.0, -0.5]))
        tp.backward(g.sum(g.mul(w, v)))  # both reached: nonzero gradients
        assert _bits(tp.backend.to_numpy(tp.grad(v))).any()
        tp.backward(g.sum(g.mul(w, w)))  # v is not reached now
        gv = tp.backend.to_numpy(tp.grad(v))
        assert not _bits(gv).any(), f"unreached parameter's gradient is {gv!r}, not +0.0"
        late = tp.param(np.array([7.0]))  # recorded after this loss
        loss = g.sum(g.mul(w, w))
        tp.backward(loss)
        for p in (v, late):
            gp = tp.backend.to_numpy(tp.grad(p))
            assert not _bits(gp).any(), gp
        gw = tp.backend.to_numpy(tp.grad(w))
        assert gw.tolist() == [3.0, -4.0], gw


def test_backward_work_counts(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((2, 3)))
        b = tp.param(np.ones(3))
        y = g.add(w, b)  # b's gradient is reduced (sum_to) once
        z = g.mul(y, y)  # y fans out twice into one vjp: no accumulation inside a vjp
        loss = g.sum(g.add(z, y))  # y reached twice: one accumulation
        tp.backward(loss)
        st = tp.stats()
        want = {"vjps": 4, "reductions": 1, "accumulations": 2, "param_copies": 2}
        assert {k: st[k] for k in want} == want, st
        tp.backward(g.sum(w))
        st = tp.stats()
        want = {"vjps": 1, "reductions": 0, "accumulations": 0, "param_copies": 1}
        assert {k: st[k] for k in want} == want, st


def test_nodes_after_the_loss_are_ignored(bname):
    """Ops recorded after the loss (on the same parameters) add no work and no gradient."""
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.5, -2.0]))
        v = tp.param(np.array([3.0, -0.5]))
        loss = g.sum(g.mul(w, w))
        g.mul(w, v)  # after the loss: must not be visited
        tp.backward(loss)
        assert tp.backend.to_numpy(tp.grad(w)).tolist() == [3.0, -4.0]
        assert not _bits(tp.backend.to_numpy(tp.grad(v))).any()
        assert tp.stats()["vjps"] == 2, tp.stats()
