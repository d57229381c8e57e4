"""Reductions over several axes pinned bitwise to row-major loops (sum_to, sum, mean).

The data spans many magnitudes, so another summation order gives other bits; each test first
checks that on its data a column-major order really does differ (the test can fail).
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import loop_sum
from gtensor.testing import bits_equal, first_difference

DTYPES = ["float64", "float32"]
# (input shape, target shape): several reduced axes, leading and inner, adjacent or not
SUM_TO = [((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1, 4, 1)), ((2, 3, 4, 5), (2, 1, 4, 1)),
          ((2, 3, 4, 5), ()), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (1, 3, 1, 5)),
          ((3, 4, 5), (1, 1, 1)), ((4, 1, 6), (1, 1, 1)), ((2, 3, 4, 5), (1, 1, 4, 5))]


def data(shape: tuple, dtype: str, seed: int) -> np.ndarray:
    """Seeded values over ~9 binades, both signs (order-sensitive sums)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape))).astype(dtype)


def reduced(x_shape: tuple, target: tuple) -> tuple:
    lead = len(x_shape) - len(target)
    return tuple(i for i in range(len(x_shape))
                 if i < lead or (target[i - lead] == 1 and x_shape[i] != 1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,target", SUM_TO, ids=lambda v: "x".join(map(str, v)) or "()")
def test_sum_to_several_axes_row_major(be, shape, target, dtype):
    x = data(shape, dtype, seed=sum(shape) * 31 + len(target))
    axes = reduced(shape, target)
    want = loop_sum(x, axes).reshape(target)
    if len([a for a in axes if shape[a] > 1]) > 1:  # the order is observable on this data
        other = loop_sum(x, axes, order="F").reshape(target)
        assert not bits_equal(want, other), "premise: column-major order gives the same bits"
    got = be.to_numpy(be.sum_to(be.asarray(x), target))
    assert bits_equal(want, got), f"sum_to {shape}->{target} {dtype}: {first_difference(want, got)}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_and_mean_of_everything_row_major(be, dtype):
    x = data((3, 4, 5), dtype, seed=5)
    want = loop_sum(x, (0, 1, 2))
    assert not bits_equal(want, loop_sum(x, (0, 1, 2), order="F"))
    got = be.to_numpy(be.sum(be.asarray(x)))
    assert bits_equal(want, got), first_difference(want, got)
    with np.errstate(all="ignore"):
        want_mean = np.asarray(want / np.dtype(dtype).type(60), dtype)
    got = be.to_numpy(be.mean(be.asarray(x)))
    assert bits_equal(want_mean, got), first_difference(want_mean, got)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_inner_products_are_positive_zero(be, dtype):
    """matmul and bmm with k = 0: every output is +0.0 (an empty sum), with the right shape."""
    for a_shape, b_shape, want_shape in [((3, 0), (0, 4), (3, 4)),
                                         ((2, 3, 0), (2, 0, 4), (2, 3, 4))]:
        op = be.matmul if len(a_shape) == 2 else be.bmm
        for inner in ("plain", "fma"):
            got = be.to_numpy(op(be.asarray(np.zeros(a_shape, dtype)),
                                 be.asarray(np.zeros(b_shape, dtype)), inner=inner))
            assert got.shape == want_shape and got.dtype == np.dtype(dtype), (got.shape,
                                                                               got.dtype)
            assert not got.view(np.uint64 if dtype == "float64" else np.uint32).any(), got
