"""int64 ids and bool masks moved by the movement ops (reshape, transpose, slice, concat,
broadcast_to, copy: their ``ANY`` inputs) and shifted by int64 arithmetic (``ids + 1``:
add_int) inside a captured step: replayed per node and fused, bitwise the eager tape, with
fresh ids and masks each step."""

from __future__ import annotations

import gtape as g
import numpy as np
from fuse_testutil import assert_fused_first_is_per_node
from ggpu_fuse import fuse
from ggpu_replay import capture

R, C = 4, 6


def _loss(tp, w, ids, mask):
    flat = g.reshape(ids, (2 * R,)) + 1  # (R, 2) ids -> one row of gathers, shifted (add_int)
    rows = g.take(w, g.concat([g.slice(flat, 0, 0, R), g.copy(flat)], 0), 0)  # (3R, C)
    keep = g.broadcast_to(g.transpose(g.slice(mask, 1, 0, 1)), (3 * R, C))  # a column, spread
    big = g.broadcast_to(g.reshape(g.copy(flat) > 3, (2 * R, 1)), (2 * R, C))  # int64 compare
    return g.sum(g.where(keep, rows * rows, rows)) + g.sum(g.where(big, g.slice(rows, 0, 0,
                                                                                2 * R), 0.0))


def _data(rng):
    return (rng.integers(0, 6, (R, 2)), rng.random((1, 3 * R)) < 0.5)


def _eager(device, w0, ids, mask):
    with g.Tape(device) as tp:
        w = tp.param(w0)
        loss = _loss(tp, w, tp.const(ids, dtype="int64"), tp.const(mask, dtype="bool"))
        tp.backward(loss)
        return tp.backend.to_numpy(tp.value(loss)), tp.backend.to_numpy(tp.grad(w))


def test_typed_moves_replay_and_fuse_bitwise(device):
    typed_moves_fuse_bitwise(device)


def typed_moves_fuse_bitwise(device: str) -> None:
    """The check on ``device`` (test_fuse_cpu runs it on the compiled cpu step)."""
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(7, C))
    ids0, mask0 = _data(rng)
    tp = g.Tape(device)
    w = tp.param(w0)
    ids = tp.const(ids0, name="ids", dtype="int64")
    mask = tp.const(mask0, name="mask", dtype="bool")
    assert g.reshape(ids, (2 * R,)).dtype == np.int64 and g.transpose(mask).dtype == np.bool_
    assert (ids + ids).op == "add_int" and (1 + ids).dtype == np.int64
    prog = capture(tp, _loss(tp, w, ids, mask), backend=device)
    fp = fuse(prog)
    for step in range(3):
        new_ids, new_mask = _data(rng)
        fp.set_input(mask, new_mask)  # the two programs share their buffers
        assert_fused_first_is_per_node(prog, fp, ids, new_ids, f"step {step} ")
        loss, grad = _eager(device, w0, new_ids, new_mask)
        assert np.float64(prog.loss()).tobytes() == np.asarray(loss, np.float64).tobytes()
        assert prog.grad(w).tobytes() == np.ascontiguousarray(grad).tobytes()
