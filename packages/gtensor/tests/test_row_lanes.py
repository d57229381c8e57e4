"""The row ops' interleaved cpu kernels (contiguous rows run 8 at a time, their chains side by
side: forms.Rows.cpu_interleaved_body) against the numpy reference, bitwise.

Row counts cross the lane groups (8, then 4, 2, 1 left over), row lengths cross the SIMD width,
special rows (+-inf, NaN, all equal, +-0, huge) sit between ordinary ones in the same group,
the strided (B > 1) path is checked beside it, and on cpu the rows are split across 1 and 2
threads (split threshold lowered to 1), so group boundaries move.
"""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference

OPS = {"softmax": 1, "softmax_grad": 2, "log_softmax": 1, "log_softmax_grad": 2,
       "logsumexp": 1}
ROW_LENGTHS = (1, 7, 8, 9, 17, 33, 4096)


def _special(kind: int, n: int, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Row ``kind`` of the special rows, length n."""
    big = np.finfo(dtype).max
    row = rng.standard_normal(n)
    j = int(rng.integers(n))
    if kind == 0:
        row[:] = np.inf
    elif kind == 1:
        row[:] = -np.inf
    elif kind == 2:
        row[j] = -np.inf
    elif kind == 3:
        row[j] = np.nan
    elif kind == 4:
        row[:] = 2.5
    elif kind == 5:
        row[:] = np.where(rng.random(n) < 0.5, -0.0, 0.0)
    elif kind == 6:
        row[j] = np.inf
    elif kind == 7:
        row *= big / 4
    elif kind == 8:
        row *= 300.0  # exp under- and overflow after the shift
    return row.astype(dtype)


def _rows(rng: np.random.Generator, rows: int, n: int, dtype: str) -> np.ndarray:
    """(rows, n): odd rows special (cycling through the kinds), even rows ordinary."""
    dt = np.dtype(dtype)
    out = (3 * rng.standard_normal((rows, n))).astype(dt)
    for i in range(1, rows, 2):
        out[i] = _special((i // 2) % 9, n, dt, rng)
    return out


def _inputs(op: str, rows: int, n: int, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [_rows(rng, rows, n, dtype) for _ in range(OPS[op])]


def _check(ref, be, op: str, arrays: list[np.ndarray], axis: int, where: str) -> None:
    want = ref.to_numpy(getattr(ref, op)(*[ref.asarray(a) for a in arrays], axis=axis))
    got = be.to_numpy(getattr(be, op)(*[be.asarray(a) for a in arrays], axis=axis))
    assert bits_equal(want, got), f"{op} {where}: {first_difference(want, got)}"


def _cases(op: str, n: int, dtype: str) -> list[tuple[list[np.ndarray], int, str]]:
    """(inputs, axis, label): contiguous rows in several counts, and strided rows (B > 1)."""
    counts = (11,) if n == 4096 else (1, 3, 7, 13, 19)
    out = [(_inputs(op, c, n, dtype, 10 * c + n), 1, f"{c} rows of {n} {dtype}")
           for c in counts]
    if n <= 33:
        x = _inputs(op, 6, n, dtype, 7)
        out.append(([a.T.copy() for a in x], 0, f"axis 0 of ({n}, 6) {dtype}"))
        out.append(([a.reshape(2, 3, n).transpose(0, 2, 1).copy() for a in x], 1,
                    f"axis 1 of (2, {n}, 3) {dtype}"))
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("op", list(OPS))
def test_row_ops_bitwise_with_special_rows(ref, other, op, n, dtype):
    cases = _cases(op, n, dtype)
    with cpu_thread_runs(other) as runs:
        for threads in runs:
            for arrays, axis, label in cases:
                _check(ref, other, op, arrays, axis,
                       label if threads is None else f"{label}, {threads} threads")
