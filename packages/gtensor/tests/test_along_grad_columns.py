"""take_along_axis_grad's cpu kernel (one walk per destination column) against the numpy
reference, bitwise: repeated ids (the first contribution starts the sum, so -0.0 alone stays
-0.0 and -0.0 then +0.0 gives +0.0), wrapped negative ids, ignored ids, special gradients,
K from 0 up, N across the SIMD width and up to a vocabulary, B = 1 and B > 1, and on cpu
1 and 2 threads (split threshold lowered to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference

SPECIAL = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e300, -1e300, 2.5])


def _case(rng, a: int, n: int, k: int, b: int, dtype: str, ignore: int | None):
    """(g, ids) of shape (a, k, b) (axis 1) with repeats, negative ids and ignored ids."""
    ids = rng.integers(-n, n, (a, k, b))
    if k > 1:  # repeats: a later k names the same destination as k - 1
        ids[:, 1::2] = ids[:, 0:-1:2]
    if ignore is not None and k:
        ids[:, ::3] = ignore
    g = rng.standard_normal((a, k, b))
    pick = rng.random(g.shape) < 0.3
    g[pick] = rng.choice(SPECIAL, int(pick.sum()))
    with np.errstate(over="ignore"):
        return g.astype(dtype), ids.astype(np.int64)


CASES = [(a, n, k, b, ignore)
         for n in (1, 7, 8, 9, 33, 4096)
         for a, k, b in ((5, 1, 1), (3, 9, 1), (2, 4, 3), (1, 0, 2), (127, 1, 1))
         for ignore in (None, -100)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("a,n,k,b,ignore", CASES)
def test_take_along_axis_grad_bitwise(ref, other, a, n, k, b, ignore, dtype):
    if n == 4096 and a * b > 8 and other.name != "cpu":
        pytest.skip("the vocabulary-sized case with many rows only on cpu (fast there)")
    g, ids = _case(np.random.default_rng(a * 1000 + n + k), a, n, k, b, dtype, ignore)
    attrs = {"n": n, "axis": 1, "ignore": ignore}
    want = ref.to_numpy(ref.apply("take_along_axis_grad",
                                  [ref.asarray(g), ref.asarray(ids, dtype="int64")], **attrs))
    with cpu_thread_runs(other) as threads:
        for t in threads:
            got = other.to_numpy(other.apply(
                "take_along_axis_grad", [other.asarray(g), other.asarray(ids, dtype="int64")],
                **attrs))
            assert bits_equal(want, got), f"threads={t}: {first_difference(want, got)}"


def test_first_contribution_starts_the_sum(ref, other):
    # -0.0 alone stays -0.0 (a +0.0 start would give +0.0); -0.0 then +0.0 gives +0.0
    g = np.array([[-0.0, -0.0, 0.0, 3.0]])
    ids = np.array([[0, 1, 1, 3]])
    got = other.to_numpy(other.apply(
        "take_along_axis_grad", [other.asarray(g), other.asarray(ids, dtype="int64")], n=5,
        axis=1))[0]
    assert np.signbit(got).tolist() == [True, False, False, False, False]
    assert got.tolist() == [0.0, 0.0, 0.0, 3.0, 0.0]
