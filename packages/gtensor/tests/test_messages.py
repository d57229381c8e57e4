"""gtensor.describe: the one description of a received value in every error message."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest


def test_plain_numpy_array_names_dtype_shape_and_layout() -> None:
    x = np.zeros((2, 3))
    assert gtensor.describe(x) == ("a plain numpy.ndarray (the numpy backend's array type) of "
                                   "dtype float64 and shape (2, 3)")
    assert gtensor.describe(x[:, ::2]).endswith("shape (2, 2), not C-contiguous")


@pytest.mark.parametrize("name", ["sim", "cpu"])
def test_kernel_backend_arrays_name_their_backend(name: str) -> None:
    if name == "cpu" and "cpu" not in gtensor.BACKENDS:
        pytest.skip("no cpu backend")
    x = gtensor.backend(name).asarray(np.ones(4, np.float32))
    assert gtensor.describe(x) == (f"an array of the {name} backend of dtype float32 and "
                                   "shape (4,)")


def test_scalars_show_their_value_and_type() -> None:
    assert gtensor.describe(1.5) == "1.5 (a float)"
    assert gtensor.describe(True) == "True (a bool)"
    assert gtensor.describe(None) == "None (a NoneType)"
    assert gtensor.describe(3) == "3 (an int)"
    assert gtensor.describe(np.float32(2)) == "np.float32(2.0) (a numpy.float32)"
    long = gtensor.describe("x" * 100)
    assert long == "'" + "x" * 36 + "... (a str)"


def test_other_objects_show_their_type_only() -> None:
    assert gtensor.describe([1, 2]) == "a list"
    assert gtensor.describe(object()) == "an object"

    class Duck:
        dtype = "float16"
        shape = [5, 2]

    assert gtensor.describe(Duck()) == "a test_messages.Duck of dtype float16 and shape (5, 2)"
