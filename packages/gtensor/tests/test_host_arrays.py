"""The host backends' new arrays: from ALIGN_FROM bytes their data starts on an ALIGN-byte
boundary (whole-vector loads and stores of the cpu kernels never straddle a cache line)."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest
from gtensor.backends.host_arrays import ALIGN, ALIGN_FROM, aligned_empty


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_aligned_empty_shapes_and_alignment(dtype):
    dt = np.dtype(dtype)
    for shape in [(), (3,), (0,), (2, 0, 3), (ALIGN_FROM // dt.itemsize,), (17, 331), (5, 7, 64)]:
        a = aligned_empty(shape, dt)
        assert a.shape == shape and a.dtype == dt and a.flags.c_contiguous and a.flags.writeable
        if a.nbytes >= ALIGN_FROM:
            assert _address(a) % ALIGN == 0, (shape, _address(a) % ALIGN)
        a[...] = 1  # the whole extent is writable
        assert (a == 1).all()


@pytest.mark.parametrize("name", ["cpu", "sim"])
def test_backend_arrays_are_aligned(name):
    be = gtensor.backend(name)
    x = be.asarray(np.arange(512 * 48, dtype=np.float32).reshape(512, 48))
    made = [be.empty((512, 48), "float32"), be.zeros((129, 33), "float64"),
            be.apply("add", [x, x])]
    for a in made:
        assert _address(a) % ALIGN == 0
    assert (be.to_numpy(made[1]) == 0).all()
    assert (be.to_numpy(made[2]) == 2 * be.to_numpy(x)).all()
