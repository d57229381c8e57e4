"""amax, amin and prod (the generic ``Reduce`` form's folds) and softplus: pinned bitwise to
per-slot loops in numpy scalars, against torch float64, and the refusals. numpy == sim == cpu
bitwise is the parity table's (their declared rows); the gradients' tie and zero rules are
gtape's tests (``gtape/tests/test_fold_gradients.py``)."""

from __future__ import annotations

import cases
import numpy as np
import pytest
from gtensor.ops.checks import reduce_cases
from gtensor.testing import bits_equal, first_difference

DTYPES = ["float64", "float32"]
FOLDS = ["amax", "amin", "prod"]


def _T(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def combine(name: str, a, b):
    """The documented combine on numpy scalars: maximum / minimum (a where a > b (a < b) or
    a is NaN, else b: ties and +-0 give the later element b) or the product."""
    if name == "amax":
        return a if (a > b or a != a) else b
    if name == "amin":
        return a if (a < b or a != a) else b
    return a * b


def loop_fold(name: str, x: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
    """Per kept slot, the serial fold of its positions in row-major order, first element
    first (1.0 for an empty prod)."""
    axes = tuple(range(x.ndim)) if axis is None else tuple(
        sorted(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,))))
    out = cases.loop_fold(x, axes, lambda a, b: combine(name, a, b), 1.0)
    if keepdims:
        out = out.reshape([1 if i in axes else d for i, d in enumerate(x.shape)])
    return out


def data(shape: tuple, dtype: str, seed: int, ties: bool = False) -> np.ndarray:
    """Values over several binades; with ``ties`` a few values only (ties, +-0, inf, NaN)."""
    rng = np.random.default_rng(seed)
    if ties:
        vals = np.array([0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, np.nan, 0.5])
        return rng.choice(vals, shape).astype(dtype)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape))).astype(dtype)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FOLDS)
def test_folds_equal_the_row_major_loop_bitwise(be, name, dtype, ties):
    for k, ((shape,), attrs) in enumerate(reduce_cases(nonempty=name != "prod")):
        x = data(shape, dtype, 100 * k + len(name), ties)
        want = loop_fold(name, x, attrs.get("axis"), attrs.get("keepdims", False))
        got = be.to_numpy(getattr(be, name)(be.asarray(x), **attrs))
        assert got.shape == want.shape, (name, shape, attrs)
        assert bits_equal(want, got), (f"{name} {shape} {attrs} {dtype}: "
                                       f"{first_difference(want, got)}")


def test_the_loop_oracle_sees_the_order():
    """The pins can fail: prod in another order, and amax with ties resolved to the first
    element, give other bits on the same data."""
    x = data((3, 40), "float64", 5)
    fwd = loop_fold("prod", x, 1)
    rev = loop_fold("prod", x[:, ::-1].copy(), 1)
    assert not bits_equal(fwd, rev)
    z = np.array([[0.0, -0.0], [-0.0, 0.0]])
    assert [np.signbit(v) for v in loop_fold("amax", z, 1)] == [True, False]  # the later one


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FOLDS)
def test_against_torch_float64(ref, name, dtype):
    torch = pytest.importorskip("torch")
    x = data((4, 5, 6), dtype, 11)
    t = torch.from_numpy(x.astype(np.float64))
    for axis in (None, 0, 2, (0, 2)):
        got = ref.to_numpy(getattr(ref, name)(ref.asarray(x), axis=axis)).astype(np.float64)
        if name == "prod":
            w = t
            for d in sorted(range(3) if axis is None else
                            (axis if isinstance(axis, tuple) else (axis,)), reverse=True):
                w = w.prod(d)
            want = w.numpy()
            tol = 1e-13 if dtype == "float64" else 1e-5  # another order: a few roundings apart
            np.testing.assert_allclose(got, want, rtol=tol)
        else:
            dims = tuple(range(3)) if axis is None else axis
            want = getattr(torch, name)(t, dims).numpy()
            assert np.array_equal(got, want), (name, axis)  # a selection: exact


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_an_empty_axis_is_refused_as_torch_refuses(ref, name):
    x = ref.asarray(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=rf"{name}: cannot reduce over an axis of length 0"):
        getattr(ref, name)(x, axis=0)
    with pytest.raises(ValueError, match=rf"{name}: cannot reduce over an axis of length 0"):
        getattr(ref, name)(x)
    assert ref.to_numpy(getattr(ref, name)(x, axis=1)).shape == (0,)  # nothing reduced


def test_prod_of_nothing_is_one(be):
    x = be.asarray(np.zeros((0, 3)))
    assert be.to_numpy(be.prod(x, axis=0)).tolist() == [1.0, 1.0, 1.0]
    assert be.to_numpy(be.prod(x)).tolist() == 1.0


def test_bad_arguments_name_the_op(ref):
    x = ref.asarray(np.ones((2, 3)))
    with pytest.raises(TypeError, match="amax: keepdims must be a bool"):
        ref.amax(x, axis=0, keepdims=1)
    with pytest.raises(ValueError, match="prod"):
        ref.prod(x, axis=2)
    with pytest.raises(ValueError, match="amin: axis"):
        ref.amin(x, axis=(1, -1))


def test_softplus_is_the_composite_bitwise(be):
    """softplus(x) = x where x > 20, else log1p(exp(x)): the op's bits are the composite's
    (over the special values and both sides of the threshold), in both dtypes."""
    for dtype in DTYPES:
        x = np.array([-800.0, -40.0, -1.0, -0.0, 0.0, 1e-8, 1.0, 19.999, 20.0,
                      np.nextafter(20.0, 30.0), 21.0, 800.0, np.inf, -np.inf, np.nan],
                     dtype)
        xa = be.asarray(x)
        over = be.greater(xa, be.asarray(np.array(20.0, dtype)))
        zero = be.asarray(np.array(0.0, dtype))
        want = be.where(over, xa, be.log1p(be.exp(be.where(over, zero, xa))))
        got = be.softplus(xa)
        assert bits_equal(be.to_numpy(want), be.to_numpy(got)), dtype


def test_softplus_against_torch(ref):
    torch = pytest.importorskip("torch")
    x = np.linspace(-50.0, 50.0, 1001)
    got = ref.to_numpy(ref.softplus(ref.asarray(x)))
    want = torch.nn.functional.softplus(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)  # torch: libm exp, log1p
