"""int64 ids and bool masks through the movement ops (copy, transpose, reshape, slice, concat,
broadcast_to: ``ANY`` inputs): dtype kept, no gradient path, numpy's values on every backend."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape_testutil import host

IDS = np.array([[3, 0, 2], [1, 1, 4]])
MASK = np.array([[True, False, True], [False, False, True]])
MOVES = {
    "copy": (lambda v: g.copy(v), lambda a: a.copy()),
    "transpose": (lambda v: g.transpose(v), lambda a: a.T),
    "reshape": (lambda v: g.reshape(v, (3, 2)), lambda a: a.reshape(3, 2)),
    "slice": (lambda v: g.slice(v, 1, 1, 3), lambda a: a[:, 1:3]),
    "concat": (lambda v: g.concat([v, g.slice(v, 0, 0, 1)], 0),
               lambda a: np.concatenate([a, a[:1]], 0)),
    "broadcast_to": (lambda v: g.broadcast_to(g.slice(v, 0, 1, 2), (4, 3)),
                     lambda a: np.broadcast_to(a[1:2], (4, 3))),
}


@pytest.mark.parametrize("data", [IDS, MASK], ids=["int64", "bool"])
@pytest.mark.parametrize("name", sorted(MOVES))
def test_moves_keep_the_dtype_and_the_values(bname, name, data):
    ours, theirs = MOVES[name]
    with g.Tape(bname) as tp:
        v = tp.const(data, dtype=data.dtype.name)
        y = ours(v)
        assert y.dtype == data.dtype and not y.requires_grad
        got = host(tp, tp.value(y))
    want = theirs(data)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_data_operands_take_the_var_operands_dtype(bname):
    with g.Tape(bname) as tp:
        ids = tp.const(IDS, dtype="int64")
        y = g.concat([ids, np.array([[7, 8, 9]])], 0)
        assert y.dtype == np.int64 and host(tp, tp.value(y))[2].tolist() == [7, 8, 9]
        w = tp.param(np.ones((1, 3)))
        assert g.concat([w, np.array([[2, 3, 4]])], 0).dtype == np.float64  # a float Var: floats


def test_mixed_dtypes_are_refused_naming_the_op(bname):
    with g.Tape(bname) as tp:
        ids, w = tp.const(IDS, dtype="int64"), tp.param(np.ones((2, 3)))
        n = len(tp)
        with pytest.raises(TypeError, match="concat: xs\\[1\\] is float64 but xs\\[0\\] is int64"):
            g.concat([ids, w], 0)
        assert len(tp) == n  # nothing recorded


def test_gathers_through_moved_ids_give_the_direct_gradient(bname):
    """A VJP or composite can reshape its index with an ordinary op: the same bits as the
    ids given in that shape."""
    w0 = np.random.default_rng(0).normal(size=(5, 3))
    grads = []
    for moved in (True, False):
        with g.Tape(bname) as tp:
            w = tp.param(w0)
            ids = tp.const(IDS if moved else IDS.T.reshape(-1), dtype="int64")
            flat = g.reshape(g.transpose(ids), (6,)) if moved else ids
            tp.backward(g.sum(g.take(w, flat, 0) ** 3))
            grads.append(host(tp, tp.grad(w)))
    assert grads[0].tobytes() == grads[1].tobytes()


def test_ids_compare_as_numbers(bname):
    """The comparisons take int64 data too (NUMBER inputs): ids against ids or a Python int
    (held as int64), exact integer comparisons, bool masks usable by where."""
    with g.Tape(bname) as tp:
        ids = tp.const(IDS, dtype="int64")
        big = ids > 1
        same = g.equal(ids, g.transpose(g.reshape(ids, (3, 2))))  # (2, 3) vs (2, 3)
        huge = tp.const(np.array([2**62 + 1, 2**62]), dtype="int64") > 2**62  # beyond float64
        w = tp.param(np.ones((2, 3)))
        y = g.where(big, w * 3.0, w)
        assert big.dtype == np.bool_ and not big.requires_grad
        assert host(tp, tp.value(big)).tolist() == (IDS > 1).tolist()
        assert host(tp, tp.value(same)).tolist() == (IDS == IDS.reshape(3, 2).T).tolist()
        assert host(tp, tp.value(huge)).tolist() == [True, False]
        tp.backward(g.sum(y))
        assert host(tp, tp.grad(w)).tolist() == np.where(IDS > 1, 3.0, 1.0).tolist()
        with pytest.raises(TypeError, match="greater: b is float64 but a is int64"):
            g.greater(ids, w)
