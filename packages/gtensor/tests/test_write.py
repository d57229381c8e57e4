"""Backend.write on the backend under test: host data into an existing array, converted once to
its dtype, the array's identity kept; bad data refused with dst untouched."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_host_data_lands_converted_once_in_the_same_buffer(be, dtype):
    dst = be.asarray(np.zeros((2, 3)), dtype=dtype)
    host = np.array([[0.1, -2.5, 1e300], [3.0, -0.0, 7.25]])  # float64 (1e300: inf in f32)
    assert be.write(dst, host) is dst
    with np.errstate(over="ignore"):
        want = host.astype(dtype)
    assert be.to_numpy(dst).tobytes() == want.tobytes()
    assert host[0, 0] == 0.1  # the host data is read, never written


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_data_of_the_destinations_dtype_is_copied_not_shared(be, dtype):
    dst = be.asarray(np.zeros(4), dtype=dtype)
    host = np.arange(4).astype(dtype)
    be.write(dst, host)
    host[:] = 9  # a later change of the host array does not reach dst
    assert be.to_numpy(dst).tolist() == [0, 1, 2, 3]


def test_strided_host_data_and_lists_and_numbers(be):
    dst = be.asarray(np.zeros(3), dtype="float64")
    be.write(dst, np.arange(6.0)[::2])  # not contiguous
    assert be.to_numpy(dst).tolist() == [0.0, 2.0, 4.0]
    be.write(dst, [1, 2, 3])
    assert be.to_numpy(dst).tolist() == [1.0, 2.0, 3.0]
    scalar = be.asarray(np.zeros(()), dtype="float32")
    be.write(scalar, 0.1)
    assert be.to_numpy(scalar).tobytes() == np.float32(0.1).tobytes()
    be.write(scalar, 1e300)  # beyond float32: inf, quietly (the one rounding of the cast)
    assert be.to_numpy(scalar) == np.inf
    be.write(scalar, -3.4e38)
    assert be.to_numpy(scalar).tobytes() == np.float32(-3.4e38).tobytes()
    wide = be.asarray(np.zeros(()), dtype="float64")
    be.write(wide, 1e300)
    assert be.to_numpy(wide) == 1e300


def test_bad_data_is_refused_and_dst_kept(be):
    dst = be.asarray(np.ones(3), dtype="float64")
    with pytest.raises(ValueError, match="shape"):
        be.write(dst, np.zeros(4))
    with pytest.raises(ValueError, match="shape"):
        be.write(dst, np.zeros((3, 1)))
    with pytest.raises(TypeError, match="dtype"):
        be.write(dst, np.array(["a", "b", "c"]))
    with pytest.raises(TypeError, match="dst"):
        be.write(np.ones(3) if be.name != "numpy" else [1.0, 1.0, 1.0], np.zeros(3))
    assert be.to_numpy(dst).tolist() == [1.0, 1.0, 1.0]
