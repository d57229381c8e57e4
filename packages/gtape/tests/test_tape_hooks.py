"""The fault-drill hooks: ``adjust_next_backward`` and ``overwrite_value_at`` (gverify uses
them to make a run differ on purpose, by a known amount, at a known node)."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest


def _episode(tp):
    w = tp.param(np.array([[0.5, -1.25], [2.0, 0.75]]))
    x = tp.const(np.array([[1.0, 2.0], [-3.0, 0.5]]))
    h = g.tanh(x @ w)
    loss = g.sum(h * h)
    return w, h, loss


def _grads(tp):
    return {i: np.array(tp.backend.to_numpy(tp.grad_at(i))) for i in range(len(tp))
            if tp.grad_at(i) is not None}


def test_identity_hook_changes_no_bit_and_sees_every_visited_node(bname):
    ref = g.Tape(bname)
    _, _, loss = _episode(ref)
    ref.backward(loss)
    tp = g.Tape(bname)
    _, _, loss = _episode(tp)
    seen = []
    tp.adjust_next_backward(lambda i, gr: seen.append(i) or gr)
    tp.backward(loss)
    assert seen == sorted(seen, reverse=True) and seen[0] == loss.index
    a, b = _grads(ref), _grads(tp)
    assert a.keys() == b.keys()
    assert all(a[i].tobytes() == b[i].tobytes() for i in a)


def test_hook_moves_the_gradient_that_flows_on_and_only_once(bname):
    tp = g.Tape(bname)
    w, h, loss = _episode(tp)
    tp.backward(loss)
    clean = _grads(tp)
    be = tp.backend

    def double(i, gr):
        return be.asarray(2.0 * be.to_numpy(gr), dtype=tp.dtype) if i == h.index else gr

    tp.adjust_next_backward(double)
    tp.backward(loss)
    moved = _grads(tp)
    assert moved[h.index].tobytes() == (2.0 * clean[h.index]).tobytes()
    assert moved[w.index].tobytes() != clean[w.index].tobytes()  # it flowed on to w
    tp.backward(loss)  # the hook was for one pass only
    assert _grads(tp)[w.index].tobytes() == clean[w.index].tobytes()


def test_overwrite_value_at_is_seen_by_reads_and_backward(bname):
    tp = g.Tape(bname)
    w, h, loss = _episode(tp)
    before = np.array(tp.backend.to_numpy(tp.value_at(loss.index)))
    new = np.array(tp.backend.to_numpy(tp.value_at(h.index))) * 0.5
    tp.overwrite_value_at(h.index, new)
    assert np.array(tp.backend.to_numpy(tp.value_at(h.index))).tobytes() == new.tobytes()
    assert np.array(tp.backend.to_numpy(tp.value_at(loss.index))).tobytes() == before.tobytes()
    tp.backward(loss)  # no staleness error: no parameter was written


def test_hooks_refuse_bad_input_and_change_nothing(bname):
    tp = g.Tape(bname)
    _, h, _ = _episode(tp)
    with pytest.raises(TypeError, match="adjust_next_backward: fn is"):
        tp.adjust_next_backward(3)
    old = np.array(tp.backend.to_numpy(tp.value_at(h.index)))
    with pytest.raises(ValueError, match="overwrite_value_at: node"):
        tp.overwrite_value_at(h.index, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="overwrite_value_at: node"):
        tp.overwrite_value_at(h.index, np.zeros((2, 2), np.float32))
    with pytest.raises(IndexError, match="overwrite_value_at"):
        tp.overwrite_value_at(99, np.zeros((2, 2)))
    assert np.array(tp.backend.to_numpy(tp.value_at(h.index))).tobytes() == old.tobytes()
