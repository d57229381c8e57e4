"""g.rng and g.dropout on a tape: recorded ops equal to the host draws, refusals leave the
tape unchanged, p == 0 is the identity."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape_testutil import host
from gtensor.testing import bits_equal

K = g.rng.key(2**120 + 5)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tape_draws_equal_host_draws(bname, dtype):
    with g.Tape(bname, dtype) as tp:
        b = g.rng.bits(K, (3, 5), tp)
        u = g.rng.uniform(K, (7,), tp)
        z = g.rng.normal(K, (2, 9), tp)
        kv = g.rng.key_input(tp, K, name="k")
        f = g.rng.fold(kv, 2**64 - 1)
        uf = g.rng.uniform(f, (4,))  # a key Var: the tape is the key's
        assert b.dtype == np.int64 and u.dtype == np.dtype(dtype) and z.dtype == np.dtype(dtype)
        assert np.array_equal(host(tp, tp.value(b)).view(np.uint64), g.rng.bits(K, (3, 5)))
        assert bits_equal(host(tp, tp.value(u)), g.rng.uniform(K, (7,), dtype=dtype))
        assert bits_equal(host(tp, tp.value(z)), g.rng.normal(K, (2, 9), dtype=dtype))
        assert g.rng.Key.from_array(host(tp, tp.value(f))) == K.fold(2**64 - 1)
        assert bits_equal(host(tp, tp.value(uf)), g.rng.uniform(K.fold(2**64 - 1), 4,
                                                                 dtype=dtype))
        names = [n.name for n in tp.nodes()]
        assert names.count("rng_fold") == 1 and names.count("const") == 4
        assert tp.name_of(tp.var_at(0)) == "rng_key"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dropout_on_a_tape_equals_the_host_reference(bname, dtype):
    x = np.random.default_rng(0).normal(size=(6, 7))
    with g.Tape(bname, dtype) as tp:
        w = tp.param(x)
        y = g.dropout(w, 0.25, K)
        tp.backward(g.sum(y * 3.0))
        want = g.dropout(x.astype(dtype), 0.25, K)
        assert bits_equal(host(tp, tp.value(y)), want)
        keep = g.rng.uniform(K, x.shape) >= 0.25
        s = np.dtype(dtype).type(1 / 0.75)
        expect = np.where(keep, np.dtype(dtype).type(3.0) * s, np.dtype(dtype).type(0.0))
        assert bits_equal(host(tp, tp.grad(w)), expect)


def test_p_zero_is_the_identity(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(3))
        n = len(tp)
        assert g.dropout(w, 0.0, K) is w and len(tp) == n
    x = np.array([1.0, np.nan])
    assert g.dropout(x, 0, K) is x


def test_the_same_key_gives_the_same_mask_and_a_fold_another(bname):
    x = np.ones((8, 8))
    a, b = g.dropout(x, 0.5, K), g.dropout(x, 0.5, K)
    c = g.dropout(x, 0.5, K.fold(1))
    assert bits_equal(a, b) and not np.array_equal(a, c)
    assert set(np.unique(a)) == {0.0, 2.0}


@pytest.mark.parametrize("bad, err, match", [
    (1.0, ValueError, r"dropout: p must be in \[0, 1\), got 1.0"),
    (-0.1, ValueError, r"dropout: p must be in \[0, 1\)"),
    (float("nan"), ValueError, r"dropout: p must be in \[0, 1\)"),
    (True, TypeError, "dropout: p must be a real number"),
    ("0.5", TypeError, "dropout: p must be a real number"),
])
def test_bad_p_is_refused_and_the_tape_unchanged(bname, bad, err, match):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(4))
        n = len(tp)
        with pytest.raises(err, match=match):
            g.dropout(w, bad, K)
        assert len(tp) == n


@pytest.mark.parametrize("bad", [42, np.array([1.0, 2.0]), np.array([1, 2, 3]), "key", None])
def test_bad_key_is_refused_and_the_tape_unchanged(bname, bad):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(4))
        n = len(tp)
        with pytest.raises(TypeError, match="dropout: key must be a gtape.rng.Key"):
            g.dropout(w, 0.5, bad)
        with pytest.raises(TypeError, match="rng.uniform: key must be a gtape.rng.Key"):
            g.rng.uniform(bad, (2,), tp)
        fv = g.exp(w)  # a float Var is not a key either
        n = len(tp)
        with pytest.raises(TypeError, match="int64 key Var of shape"):
            g.rng.normal(fv, (2,))
        assert len(tp) == n


def test_bad_shape_dtype_and_tape_are_refused(bname):
    with g.Tape(bname, "float32") as tp:
        n = len(tp)
        with pytest.raises(ValueError, match=r"rng.bits: shape \(2, -1\)"):
            g.rng.bits(K, (2, -1), tp)
        with pytest.raises(TypeError, match="rng.normal: shape must be"):
            g.rng.normal(K, (2.5,), tp)
        with pytest.raises(TypeError, match="dtype float64 differs from the tape's float32"):
            g.rng.uniform(K, 3, tp, dtype="float64")
        with pytest.raises(TypeError, match="tp must be a gtape.Tape"):
            g.rng.uniform(K, 3, "tape")
        assert len(tp) == n
        kv = g.rng.key_input(tp, K)
        with g.Tape(bname) as other:
            w = other.param(np.ones(3))
            with pytest.raises(ValueError, match="another tape"):
                g.dropout(w, 0.5, kv)
            with pytest.raises(ValueError, match="another tape"):
                g.rng.bits(kv, 3, other)
