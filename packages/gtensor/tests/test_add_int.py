"""add_int: int64 + int64 wrapping modulo 2**64, on every backend as numpy computes it."""

from __future__ import annotations

import numpy as np
import pytest

EDGES = np.array([-2**63, -2**63 + 1, -2, -1, 0, 1, 2, 2**62, 2**63 - 2, 2**63 - 1], np.int64)


def _int(be, a):
    return be.asarray(np.asarray(a, np.int64), dtype="int64")


def test_every_pair_of_edges_wraps_as_numpy(be):
    """All 100 pairs of the int64 edges (broadcast (10, 1) + (10,)): numpy's wrapped sums."""
    got = be.to_numpy(be.add_int(_int(be, EDGES[:, None]), _int(be, EDGES)))
    with np.errstate(over="ignore"):
        want = EDGES[:, None] + EDGES
    assert got.dtype == np.int64 and got.shape == (10, 10)
    assert np.array_equal(got, want)
    assert got[-1, EDGES.tolist().index(1)] == -2**63  # max + 1 wraps to min


def test_shapes_broadcast_and_empty(be):
    a, b = np.arange(6, dtype=np.int64).reshape(2, 3), np.array([10, 20, 30], np.int64)
    assert be.to_numpy(be.add_int(_int(be, a), _int(be, b))).tolist() == (a + b).tolist()
    empty = be.to_numpy(be.add_int(_int(be, np.zeros((0, 3))), _int(be, b)))
    assert empty.shape == (0, 3) and empty.dtype == np.int64
    assert be.to_numpy(be.add_int(_int(be, 7), _int(be, -9))).tolist() == -2


def test_non_int64_inputs_are_refused(be):
    ids = _int(be, [1, 2])
    with pytest.raises(TypeError, match="add_int: b has dtype float64; expected int64"):
        be.add_int(ids, be.asarray(np.array([1.0, 2.0])))
    with pytest.raises(TypeError, match="add_int: a has dtype bool"):
        be.add_int(be.asarray(np.array([True, False]), dtype="bool"), ids)
    with pytest.raises(ValueError, match="add_int: shapes"):
        be.add_int(ids, _int(be, [1, 2, 3]))


def test_the_scalar_function_is_the_unsigned_sum():
    """The C text adds the unsigned images (no signed overflow); the numpy side wraps."""
    from gtensor.ops.add_int import ADD_INT

    src = ADD_INT.device_source()
    assert "(unsigned long long)a0 + (unsigned long long)a1" in src
    assert ADD_INT.numpy(np.int64(2**63 - 1), np.int64(1)) == -2**63
