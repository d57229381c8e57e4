"""Movement ops' forward values against numpy's own indexing (an independent oracle), and
copies that never alias their input. Exact copies: compared bitwise, specials included."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import bits_equal, first_difference

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1.5, 2.0**-1022, 3.0, 1e300,
                     -7.25, 0.5])


def _x(shape: tuple, dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):  # 1e300 becomes inf in float32
        return np.resize(SPECIALS, n).reshape(shape).astype(dtype)


CASES = [  # (name, input shapes, call(be, arrays), numpy oracle(arrays))
    ("pad_axis1", [(3, 4)], lambda be, a: be.pad(a[0], 1, 2, 1),
     lambda a: np.pad(a[0], ((0, 0), (2, 1)))),
    ("pad_axis0", [(2, 3, 4)], lambda be, a: be.pad(a[0], 0, 0, 3),
     lambda a: np.pad(a[0], ((0, 3), (0, 0), (0, 0)))),
    ("slice_head", [(3, 4)], lambda be, a: be.slice(a[0], 1, 0, 1), lambda a: a[0][:, 0:1]),
    ("slice_mid", [(2, 5, 3)], lambda be, a: be.slice(a[0], 1, 1, 4), lambda a: a[0][:, 1:4]),
    ("concat", [(3, 2), (3, 5)], lambda be, a: be.concat([a[0], a[1]], 1),
     lambda a: np.concatenate(a, axis=1)),
    ("transpose", [(2, 3, 4)], lambda be, a: be.transpose(a[0], (2, 0, 1)),
     lambda a: np.transpose(a[0], (2, 0, 1))),
    ("broadcast_to", [(3, 1)], lambda be, a: be.broadcast_to(a[0], (2, 3, 4)),
     lambda a: np.broadcast_to(a[0], (2, 3, 4))),
    ("reshape", [(3, 4)], lambda be, a: be.reshape(a[0], (2, 6)), lambda a: a[0].reshape(2, 6)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_movement_forward_bitwise(be, case, dtype):
    name, shapes, call, oracle = case
    xs = [_x(s, dtype) for s in shapes]
    want = np.ascontiguousarray(oracle(xs))
    got = be.to_numpy(call(be, [be.asarray(x) for x in xs]))
    assert bits_equal(want, got), f"{name} {dtype}: {first_difference(want, got)}"


def test_copy_and_reshape_are_new_arrays(be):
    """copy and reshape return fresh arrays: writing the input later leaves them unchanged."""
    x = be.asarray(_x((3, 4), "float64"))
    for op in (lambda a: be.copy(a), lambda a: be.reshape(a, (3, 4))):
        y = op(x)
        if be.name != "cuda":  # host arrays: no shared memory at all
            assert not np.shares_memory(np.asarray(y), np.asarray(x))
        assert bits_equal(be.to_numpy(y), be.to_numpy(x))
