"""sum, mean and sum_to whose innermost kept axis is contiguous with more kept axes outside it
(the cpu kernel's column sum in runs, e.g. backward's (2, 4, 128, 32) -> (2, 1, 128, 32) of
grouped-query attention) against the numpy reference, bitwise: special values (+-inf, NaN,
+-0: a sum of -0.0 alone stays -0.0), run lengths across the SIMD width, 1 and 2 threads on
cpu (split threshold lowered to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference

SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e300, -1e300])

# (x shape, op, attrs): a single reduced axis inside, kept axes on both sides
CASES = [((2, 4, 128, 32), "sum_to", {"shape": (2, 1, 128, 32)}),
         ((3, 5, 1), "sum_to", {"shape": (3, 1, 1)}),
         ((3, 5, 7), "sum_to", {"shape": (3, 1, 7)}),
         ((2, 3, 9, 8), "sum_to", {"shape": (2, 3, 1, 8)}),
         ((4, 2, 17), "sum", {"axis": 1}), ((4, 2, 17), "mean", {"axis": 1}),
         ((2, 3, 4, 33), "sum", {"axis": 2, "keepdims": True}),
         ((2, 6, 3, 9), "mean", {"axis": 1}), ((5, 1, 8), "sum", {"axis": 1})]


def _x(shape: tuple, dtype: str, seed: int, axis: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    pick = rng.random(shape) < 0.2
    x[pick] = rng.choice(SPECIAL, int(pick.sum()))
    zero = [0] * len(shape)
    zero[axis] = slice(None)
    x[tuple(zero)] = -0.0  # the first output sums only -0.0s: -0.0 (a +0.0 start: +0.0)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,op,attrs", CASES)
def test_reduce_runs_bitwise(ref, other, shape, op, attrs, dtype):
    axis = attrs["axis"] if "axis" in attrs else \
        next(i for i, (a, b) in enumerate(zip(shape, attrs["shape"])) if a != b)
    x = _x(shape, dtype, len(shape) * 100 + shape[-1], axis)
    want = ref.to_numpy(ref.apply(op, [ref.asarray(x)], **attrs))
    with cpu_thread_runs(other) as threads:
        for t in threads:
            got = other.to_numpy(other.apply(op, [other.asarray(x)], **attrs))
            assert bits_equal(want, got), f"{op} {shape} threads={t}: " \
                                          f"{first_difference(want, got)}"


# (x shape, op, attrs): the innermost reduced axis contiguous, outputs strided (the cpu
# kernel's groups of 8 outputs over a list of outer reduced offsets): BatchNorm's statistics
# over (n, h, w), row sums, and output counts that leave a partial group
GROUPED = [((5, 11, 3, 4), "sum", {"axis": (0, 2, 3)}),
           ((5, 11, 3, 4), "mean", {"axis": (0, 2, 3)}),
           ((3, 16, 2, 2), "sum_to", {"shape": (1, 16, 1, 1)}),
           ((2, 3, 4, 5, 6), "sum", {"axis": (0, 2, 4)}),
           ((9, 13), "sum", {"axis": 1}), ((4, 1, 7), "mean", {"axis": (0, 2)})]


def _signed(shape: tuple, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    pick = rng.random(shape) < 0.2
    x[pick] = rng.choice(SPECIAL, int(pick.sum()))
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,op,attrs", GROUPED)
def test_reduce_grouped_outputs_bitwise(ref, other, shape, op, attrs, dtype):
    x = _signed(shape, dtype, sum(shape))
    if op != "sum_to":  # one output whose every term is -0.0: the sum stays -0.0
        axes = attrs["axis"] if isinstance(attrs["axis"], tuple) else (attrs["axis"],)
        first = tuple(slice(None) if i in axes else 0 for i in range(len(shape)))
        x[first] = -0.0
    want = ref.to_numpy(ref.apply(op, [ref.asarray(x)], **attrs))
    with cpu_thread_runs(other, threads=("1", "2", "3")) as threads:
        for t in threads:
            got = other.to_numpy(other.apply(op, [other.asarray(x)], **attrs))
            assert bits_equal(want, got), f"{op} {shape} threads={t}: " \
                                          f"{first_difference(want, got)}"
