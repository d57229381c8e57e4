"""Bad input gets a clear exception naming the op, the argument and what is accepted."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"unknown backend 'tpu'.*numpy.*sim.*cuda"):
        gtensor.backend("tpu")


@pytest.mark.parametrize("dtype", ["int32", np.float16, "complex128", "float128"])
def test_unsupported_dtype(be, dtype):
    with pytest.raises(TypeError, match="expected float32, float64, int64 or bool"):
        be.asarray([1, 2], dtype=dtype)


def test_integer_input_becomes_float64(be):
    x = be.asarray(np.array([1, 2, 3], dtype=np.int32))
    assert x.dtype == np.float64
    assert be.to_numpy(x).tolist() == [1.0, 2.0, 3.0]


def test_complex_rejected(be):
    with pytest.raises(TypeError, match="cannot convert"):
        be.asarray(np.array([1 + 2j]))


def test_incompatible_shapes(be):
    a, b = be.asarray(np.ones((3, 4))), be.asarray(np.ones((3, 5)))
    with pytest.raises(ValueError, match=r"add: shapes \(3, 4\) and \(3, 5\)"):
        be.add(a, b)
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: a \(3, 4\) @ b"):
        be.matmul(a, b)
    with pytest.raises(ValueError, match=r"bmm: expected 3-D"):
        be.bmm(a, b)
    with pytest.raises(ValueError, match="concat: xs\\[1\\] has shape"):
        be.concat([a, b], 0)
    with pytest.raises(ValueError, match="sum_to: cannot reduce"):
        be.sum_to(a, (4, 4))
    with pytest.raises(ValueError, match="reshape: cannot reshape"):
        be.reshape(a, (5, 2))
    with pytest.raises(ValueError, match="broadcast_to: cannot broadcast"):
        be.broadcast_to(a, (4, 4))


def test_mixed_dtypes(be):
    a = be.asarray(np.ones(3), dtype="float64")
    b = be.asarray(np.ones(3), dtype="float32")
    with pytest.raises(TypeError, match="mul: b is float32 but a is float64"):
        be.mul(a, b)


def test_foreign_arrays(be):
    with pytest.raises(TypeError, match=f"exp: x is .*the {be.name} backend takes"):
        be.exp([1.0, 2.0])
    if be.name != "numpy":
        with pytest.raises(TypeError, match="plain numpy.ndarray"):
            be.exp(np.ones(3))
    else:
        with pytest.raises(TypeError, match="an array of the sim backend"):
            be.exp(gtensor.backend("sim").asarray(np.ones(3)))


def test_axis_out_of_range(be):
    x = be.asarray(np.ones((2, 3)))
    for call in (lambda: be.sum(x, 2), lambda: be.softmax(x, -3), lambda: be.slice(x, 5, 0, 1),
                 lambda: be.concat([x], 2), lambda: be.mean(x, axis=7)):
        with pytest.raises(ValueError, match="axis .* out of range .* 2 dimensions"):
            call()
    with pytest.raises(TypeError, match="axis must be an int"):
        be.sum(x, 1.0)


def test_bad_attributes(be):
    x = be.asarray(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"slice: \[1:5\] is out of range"):
        be.slice(x, 1, 1, 5)
    with pytest.raises(ValueError, match="not a permutation"):
        be.transpose(x, (0, 0))
    with pytest.raises(TypeError, match="adds: s must be a real"):
        be.adds(x, "1")
    with pytest.raises(TypeError, match="unexpected argument 'axes'"):
        be.sum(x, axes=0)
    with pytest.raises(TypeError, match="missing argument"):
        be.slice(x, 0)


def test_out_buffer_checks(be):
    x = be.asarray(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\)"):
        be.exp(x, out=be.zeros((3, 2)))
    with pytest.raises(ValueError, match="shares memory"):
        be.exp(x, out=x)
    out = be.zeros((2, 3))
    assert be.exp(x, out=out) is out
    assert be.to_numpy(out)[0, 0] == be.to_numpy(be.exp(x))[0, 0]


def test_numpy_integer_axes_are_ints(be):
    x = be.asarray(np.arange(6.0).reshape(2, 3))
    assert be.to_numpy(be.sum(x, np.int64(1))).tolist() == [3.0, 12.0]
    assert be.to_numpy(be.mean(x, axis=np.int32(-1))).tolist() == [1.0, 4.0]
    t = be.transpose(x, (np.int64(1), np.int64(0)))
    assert be.to_numpy(t).tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    with pytest.raises(TypeError, match="axis must be an int"):
        be.sum(x, np.float64(1.0))
    with pytest.raises(TypeError, match="axis must be an int"):
        be.sum(x, np.bool_(True))


def test_ids_are_checked_on_the_backends_own_arrays(be):
    """take / take_along_axis check their ids where they live (a cupy array is reduced on its
    device): numpy's range [-n, n), the strict range [0, n) of torch's labels and ids, ignore."""
    x = be.asarray(np.arange(6.0).reshape(2, 3))

    def ids_of(v):
        return be.asarray(np.array(v, dtype=np.int64), dtype="int64")

    ids = ids_of([[2], [-3]])
    got = be.apply("take_along_axis", (x, ids), axis=1)
    assert be.to_numpy(got).tolist() == [[2.0], [3.0]]
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\); got \[-3, 2\]"):
        be.apply("take_along_axis", (x, ids), axis=1, strict="labels")
    with pytest.raises(IndexError, match="take_along_axis: ids: id 3 is out of range"):
        be.apply("take_along_axis", (x, ids_of([[3], [0]])), axis=1)
    held = ids_of([[-100], [1]])
    got = be.apply("take_along_axis", (x, held), axis=1, ignore=-100, strict="labels")
    assert be.to_numpy(got).tolist() == [[0.0], [4.0]]
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 2\); got \[0, 2\]"):
        be.apply("take", (x, ids_of([0, 2])), axis=0,
                 strict="ids")
