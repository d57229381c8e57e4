"""The random ops on the backend under test: numpy's Philox bit for bit, independent of thread
count and launch geometry; dropout's special values and its threshold rule."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor import philox
from gtensor.ops import random as rops
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference

KEYS = [(0, 0), (42, 0), (2**64 - 1, 2**64 - 1), (0x0123456789ABCDEF, 0xFEDCBA9876543210),
        (3, 2**63)]


def _key(be, words):
    return be.asarray(np.array(words, dtype=np.uint64).view(np.int64), dtype=np.int64)


@pytest.mark.parametrize("words", KEYS)
def test_bits_and_uniforms_are_numpys_philox(be, words):
    seed = words[0] | (words[1] << 64)
    k = _key(be, words)
    got = be.to_numpy(be.rng_bits(k, shape=(3, 41))).view(np.uint64).ravel()
    assert np.array_equal(got, np.random.Philox(key=seed).random_raw(123))
    u = be.to_numpy(be.rng_uniform(k, shape=(123,), dtype="float64"))
    assert u.tobytes() == np.random.Generator(np.random.Philox(key=seed)).random(123).tobytes()


def test_fold_is_the_tagged_block(be):
    for words in KEYS:
        for i in (0, 7, 2**63, 2**64 - 1):
            got = be.to_numpy(be.rng_fold(_key(be, words), i=i)).view(np.uint64)
            c = (1 << 192) + i  # counter (i, 0, 0, 1); numpy bumps it before the block
            ref = np.random.Philox(key=words[0] | (words[1] << 64), counter=c - 1).random_raw(2)
            assert np.array_equal(got, ref), (words, i)


def test_many_blocks_of_the_grid(be):
    """More elements than one launch's threads: the grid-stride loop keeps element = index."""
    n = 4096 * 256 + 13
    k = _key(be, (2**64 - 5, 99))
    got = be.to_numpy(be.rng_bits(k, shape=(n,))).view(np.uint64)
    assert np.array_equal(got, philox.words((2**64 - 5, 99), n))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_thread_count_changes_no_bit(dtype):
    """The cpu kernels with 1, 2 and 3 threads (parallel split threshold lowered to 1; with 3
    threads the chunks of 1023 outputs start inside a Philox block)."""
    import gtensor

    try:
        cpu = gtensor.backend("cpu")
        cpu.module  # noqa: B018
    except RuntimeError as e:
        pytest.skip(f"cpu backend unavailable: {e}")
    ref = gtensor.backend("numpy")
    x = np.random.default_rng(1).normal(size=(33, 31)).astype(dtype)
    key = np.array([12345, -7], dtype=np.int64)
    calls = [("rng_bits", (key,), {"shape": (33, 31)}),
             ("rng_uniform", (key,), {"shape": (1023,), "dtype": dtype}),
             ("rng_normal", (key,), {"shape": (1023,), "dtype": dtype}),
             ("dropout", (x, key), {"p": 0.3})]
    with cpu_thread_runs(cpu, threads=("1", "2", "3")) as runs:
        for op, args, attrs in calls:
            want = ref.to_numpy(getattr(ref, op)(*[ref.asarray(a, dtype=a.dtype) for a in args],
                                                  **attrs))
            for threads in runs:
                got = cpu.to_numpy(getattr(cpu, op)(
                    *[cpu.asarray(a, dtype=a.dtype) for a in args], **attrs))
                assert bits_equal(want, got), f"{op} threads={threads}: " \
                                              f"{first_difference(want, got)}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dropout_special_values(be, dtype):
    """Dropped: +0.0 whatever x is (NaN, inf, -0); kept: x * s, so inf stays inf, NaN NaN."""
    x = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, -3.0, 1e-300, 2.0] * 16, dtype)
    k = np.array([77, 0], dtype=np.int64)
    y = be.to_numpy(be.dropout(be.asarray(x), be.asarray(k, dtype=np.int64), p=0.5))
    u = np.random.Generator(np.random.Philox(key=77)).random(x.size)
    keep = u >= 0.5
    assert keep.any() and (~keep).any()
    dropped = y[~keep]
    assert np.all(dropped == 0) and not np.any(np.signbit(dropped))
    s = np.dtype(dtype).type(2.0)
    with np.errstate(all="ignore"):
        assert bits_equal(y[keep], x[keep] * s)


def test_dropout_threshold_is_exact():
    """Kept iff (w >> 11) >= ceil(p * 2**53): the f64 uniform compared with p, exactly."""
    for p in (0.0, 0.5, 0.1, 1e-300, 5e-324, 0.9999999999999999, 1 / 3):
        t = rops.threshold(p)
        assert t * 2.0**-53 >= p and (t == 0 or (t - 1) * 2.0**-53 < p)
    assert rops.threshold(0.0) == 0 and rops.threshold(0.5) == 2**52
    assert rops.scale(0.5, np.float32) == np.float32(2.0)
    assert rops.scale(0.1, np.float32) == np.float32(1.0 / 0.9)


def test_refusals_name_the_op(be):
    k = be.asarray(np.array([1, 2], dtype=np.int64), dtype=np.int64)
    x = be.asarray(np.ones(3))
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\), got 1.0"):
        be.dropout(x, k, p=1.0)
    with pytest.raises(ValueError, match="dropout: p must be in"):
        be.dropout(x, k, p=float("nan"))
    with pytest.raises(TypeError, match="dropout: p must be a real number"):
        be.dropout(x, k, p=True)
    with pytest.raises(ValueError, match=r"rng_bits: key has shape \(3,\)"):
        be.rng_bits(be.asarray(np.array([1, 2, 3], dtype=np.int64), dtype=np.int64), shape=(2,))
    with pytest.raises(TypeError, match="key"):
        be.rng_uniform(be.asarray(np.array([1.0, 2.0])), shape=(2,), dtype="float64")
    with pytest.raises(ValueError, match="rng_normal: shape"):
        be.rng_normal(k, shape=(2, -1), dtype="float64")
    with pytest.raises(TypeError, match="rng_fold: i must be an int"):
        be.rng_fold(k, i=-1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_normal_is_box_muller_of_word_pairs(be, dtype):
    """Element i from words 2i, 2i+1; within a few ulps of math's sqrt(-2 log u1) cos(2 pi u2)
    (the exact bits are gtensor's own log and cos: the parity rows pin them)."""
    import math

    k = np.array([5, 6], dtype=np.int64)
    z = be.to_numpy(be.rng_normal(be.asarray(k, dtype=np.int64), shape=(300,), dtype=dtype))
    ref = rops._normal_ref(k, shape=(300,), dtype=np.dtype(dtype))
    assert bits_equal(z, ref)
    w = philox.words((5, 6), 600).reshape(300, 2)
    tol = 1e-13 if dtype == "float64" else 1e-6
    for i in range(300):
        u1 = ((int(w[i, 0]) >> 11) + 1) * 2.0**-53
        u2 = (int(w[i, 1]) >> 11) * 2.0**-53
        want = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        assert abs(float(z[i]) - want) <= tol * max(1.0, abs(want)), (i, z[i], want)


def test_dropout_keeps_an_element_whose_uniform_equals_p(be):
    """keep iff uniform >= p: p set to an element's own uniform keeps it; the next float64
    above drops it."""
    k = np.array([2024, 1], dtype=np.int64)
    u = np.random.Generator(np.random.Philox(key=2024 + 2**64)).random(64)
    j = int(np.argmin(np.abs(u - 0.5)))
    x = be.asarray(np.ones(64))
    kb = be.asarray(k, dtype=np.int64)
    y = be.to_numpy(be.dropout(x, kb, p=float(u[j])))
    assert y[j] == 1.0 / (1.0 - u[j])
    y2 = be.to_numpy(be.dropout(x, kb, p=float(np.nextafter(u[j], 1.0))))
    assert y2[j] == 0.0
    assert np.array_equal(y != 0, u >= u[j]) and np.array_equal(y2 != 0, u > u[j])


def test_uniform_f32_is_the_top_24_bits(be):
    """float32 uniforms: (w >> 40) * 2**-24, from Python's integers."""
    k = np.array([9, 10], dtype=np.int64)
    u = be.to_numpy(be.rng_uniform(be.asarray(k, dtype=np.int64), shape=(200,), dtype="float32"))
    w = philox.words((9, 10), 200)
    assert u.tobytes() == np.array([(int(v) >> 40) / 2**24 for v in w], np.float32).tobytes()


def test_dropout_every_length_across_the_lane_groups(be):
    """Lengths 1..140 (partial and whole groups of the cpu kernels' 16 blocks side by side):
    the numpy definition's mask and scale, bit for bit."""
    ref = __import__("gtensor").backend("numpy")
    k = np.array([0x0123456789ABCDEF, -99], dtype=np.int64)
    for n in range(1, 141):
        x = np.arange(1, n + 1, dtype=np.float64)
        want = ref.to_numpy(ref.dropout(ref.asarray(x), ref.asarray(k, dtype=np.int64), p=0.25))
        got = be.to_numpy(be.dropout(be.asarray(x), be.asarray(k, dtype=np.int64), p=0.25))
        assert bits_equal(want, got), f"n={n}: {first_difference(want, got)}"
