"""What numpy and torch users type without thinking: values out, .T, slicing, **, methods."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host
from gtensor.testing import bits_equal as nan_class_equal


@pytest.fixture
def tp(bname):
    with g.Tape(bname) as t:
        yield t


def test_values_come_out(tp):
    w = tp.param(np.arange(6.0).reshape(2, 3))
    mark = tp.mark()
    loss = g.sum(w * w)
    assert loss.item() == 55.0 and float(loss) == 55.0 and isinstance(loss.item(), float)
    a = w.numpy()
    assert type(a) is np.ndarray and a.tolist() == [[0, 1, 2], [3, 4, 5]]
    a[0, 0] = 99.0  # a copy: the tape is unchanged
    assert host(tp, tp.value(w))[0, 0] == 0.0
    assert np.asarray(w).dtype == np.float64 and np.asarray(w).tolist() == w.numpy().tolist()
    assert np.asarray(w, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="has 6 elements; expected exactly one"):
        w.item()
    value = loss.item()
    tp.reset_to(mark)
    assert value == 55.0
    with pytest.raises(g.StaleVarError):
        loss.item()


def test_transpose_methods_and_reshape(tp):
    x = np.arange(12.0).reshape(3, 4)
    w = tp.param(x)
    assert bits_equal(w.T.numpy(), x.T)
    assert bits_equal(w.sum(axis=0).numpy(), g.sum(w, axis=0).numpy())
    assert w.mean().item() == float(np.add.accumulate(x.ravel())[-1] / 12.0)
    assert w.sum(axis=1, keepdims=True).shape == (3, 1)
    assert w.reshape(2, 6).shape == (2, 6) and w.reshape((6, 2)).shape == (6, 2)
    assert w.reshape(-1).shape == (12,)


@pytest.mark.parametrize("key", [1, -1, slice(1, 3), (slice(None), 2), (0, slice(1, None)),
                                 (Ellipsis, -1), (slice(-2, None), slice(None, 2)),
                                 slice(3, 1), (1, 2)])
def test_basic_indexing_matches_numpy(tp, key):
    x = np.arange(12.0).reshape(3, 4)
    w = tp.param(x)
    got = w[key]
    assert bits_equal(got.numpy(), np.array(x[key]))
    tp.backward(g.sum(got * 2.0)) if got.numpy().size else None
    if got.numpy().size:
        want = np.zeros_like(x)
        want[key] = 2.0
        assert bits_equal(host(tp, tp.grad(w)), want)


def test_unsupported_indexing_is_refused(tp):
    w = tp.param(np.ones((3, 4)))
    with pytest.raises(TypeError, match="step 2; only step 1"):
        w[::2]
    with pytest.raises(TypeError, match="not supported; supported: integers, step-1 slices"):
        w[1:2, [0.5]]
    with pytest.raises(TypeError, match="index array of dtype float64 is not supported"):
        w[[0.5, 1.0]]
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        w[3]
    with pytest.raises(IndexError, match="3 indices for a Var of 2 dimensions"):
        w[0, 0, 0]


def test_powers(tp):
    x = np.array([0.3, -1.7, 2.5])
    w = tp.param(x)
    assert bits_equal((w ** 2).numpy(), x * x)
    assert bits_equal((w ** 3).numpy(), (x * x) * x)
    assert bits_equal((w ** -2).numpy(), 1.0 / (x * x))
    assert bits_equal((w ** 1).numpy(), x)
    assert bits_equal((w ** 0).numpy(), np.ones(3))
    p = tp.param(np.array([4.0, 2.0]))
    assert bits_equal((p ** 0.5).numpy(), np.sqrt([4.0, 2.0]))
    assert bits_equal((p ** -0.5).numpy(), 1.0 / np.sqrt([4.0, 2.0]))
    tp.backward(g.sum(w ** 3))
    assert np.allclose(host(tp, tp.grad(w)), 3 * x * x, rtol=1e-15)
    with pytest.raises(ValueError, match="exponent 1.7 is not supported"):
        w ** 1.7
    with pytest.raises(TypeError, match="must be a constant number"):
        w ** w


def test_abs(tp):
    x = np.array([-2.0, -0.0, 0.0, 3.5, np.nan, -np.inf])
    w = tp.param(x)
    y = g.abs(w)
    assert nan_class_equal(y.numpy(), np.abs(x))  # NaN by class: its payload is not defined
    tp.backward(g.sum(g.abs(tp.param(np.array([-2.0, 0.0, 3.0]))) * 1.5))
    assert host(tp, tp.grad(tp.params()[-1])).tolist() == [-1.5, 0.0, 1.5]
