"""The elementwise and copy forms' index maps (what ggpu-fuse reads a launch's accesses from)
against the kernels' own decode, written out per output: i -> row-major coordinates over the
shape -> sum of coordinate * stride."""

import numpy as np
import pytest
from gtensor.ops import forms


def decoded(shape: list[int], strides: list[int], base: int = 0) -> np.ndarray:
    """Output i's offset as the CUDA / sim kernels compute it (rem % shape[d], innermost first)."""
    n = int(np.prod(shape)) if shape else 1
    out = np.empty(n, np.int64)
    for i in range(n):
        rem, off = i, base
        for d in range(len(shape) - 1, -1, -1):
            off += (rem % shape[d]) * strides[d]
            rem //= shape[d]
        out[i] = off
    return out


@pytest.mark.parametrize("seed", range(40))
def test_zip_and_copy_maps_are_the_kernels_decode(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 5))
    shape = [int(s) for s in rng.integers(1, 6, rank)]
    n = int(np.prod(shape)) if rank else 1
    st = [[int(s) for s in rng.integers(-3, 50, rank)] for _ in range(3)]
    geom = np.array([rank, *shape, *st[0], *st[1], *st[2]], np.int64)
    acc = forms.Zip(("a", "b", "c")).index_maps({"n": n, "geom": geom})
    assert acc.n == n and np.array_equal(acc.oo, np.arange(n))
    for k, name in enumerate(("a", "b", "c")):
        assert np.array_equal(acc.oi[name], decoded(shape, st[k])), name
    ioff, ooff = int(rng.integers(0, 9)), int(rng.integers(0, 9))
    cg = np.array([rank, *shape, *st[0], ioff, *st[1], ooff], np.int64)
    cp = forms.Copy().index_maps({"n": n, "geom": cg})
    assert np.array_equal(cp.oi["x"], decoded(shape, st[0], ioff))
    assert np.array_equal(cp.oo, decoded(shape, st[1], ooff))


def test_a_launch_whose_n_is_not_its_shape_is_refused():
    geom = np.array([2, 3, 4, 4, 1, 4, 1], np.int64)
    with pytest.raises(ValueError, match=r"n \(11\) is not the size of its shape \(3, 4\)"):
        forms.Zip(("a", "b")).index_maps({"n": 11, "geom": geom})
