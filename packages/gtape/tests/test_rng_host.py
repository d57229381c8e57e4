"""g.rng on the host (tp=None): numpy's Philox bit for bit, keys, split/fold, bad input."""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gtensor import philox

SEEDS = [0, 1, 5, 42, 2**32 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 3, 2**100 + 12345,
         2**128 - 1, 0x0123456789ABCDEF_FEDCBA9876543210]


@pytest.mark.parametrize("seed", SEEDS)
def test_bits_are_numpy_philox_words(seed):
    k = g.rng.key(seed)
    got = g.rng.bits(k, (3, 7, 2))
    ref = np.random.Philox(key=seed).random_raw(42)
    assert got.dtype == np.uint64 and got.shape == (3, 7, 2)
    assert np.array_equal(got.reshape(-1), ref), (seed, got.reshape(-1)[:4], ref[:4])


@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_f64_is_numpy_generator_random(seed):
    got = g.rng.uniform(g.rng.key(seed), (5, 9))
    ref = np.random.Generator(np.random.Philox(key=seed)).random(45)
    assert got.dtype == np.float64
    assert got.reshape(-1).tobytes() == ref.tobytes()


def test_uniform_f32_is_the_top_24_bits():
    k = g.rng.key(7)
    w = np.random.Philox(key=7).random_raw(1000)
    got = g.rng.uniform(k, 1000, dtype="float32")
    exact = [float(int(v) >> 40) / 2**24 for v in w]
    assert got.dtype == np.float32
    assert got.tobytes() == np.array(exact, np.float32).tobytes()
    assert got.min() >= 0.0 and got.max() < 1.0


def test_empty_and_one_element_draws():
    k = g.rng.key(2**64 + 1)
    e = g.rng.bits(k, (0, 3))
    assert e.shape == (0, 3) and e.dtype == np.uint64
    assert g.rng.bits(k, ()).shape == ()
    assert np.array_equal(g.rng.bits(k, 1), np.random.Philox(key=2**64 + 1).random_raw(1))
    assert philox.words((1, 1), 0).dtype == np.uint64 and philox.words((1, 1), 0).size == 0


def test_a_draw_is_a_prefix_of_a_longer_one():
    k = g.rng.key(99)
    long, short = g.rng.bits(k, 101), g.rng.bits(k, 13)
    assert np.array_equal(long[:13], short)
    # shape does not matter, only the row-major element index
    assert np.array_equal(g.rng.bits(k, (4, 25)).reshape(-1), long[:100])


@pytest.mark.parametrize("counter", [2**64 - 2, 2**64 - 1, 2**128 - 3, 2**192 - 1,
                                     2**256 - 2])
def test_counter_arithmetic_carries_across_words(counter):
    # numpy bumps the 256-bit counter before each block: the carry must cross 64-bit words
    ref = np.random.Philox(key=2**70 + 9, counter=counter).random_raw(23)
    got = philox.words(philox.key_words(2**70 + 9), 23, counter=counter)
    assert np.array_equal(got, ref)


def test_word_offsets_are_the_stream_positions():
    ref = np.random.Philox(key=3).random_raw(64)
    for start in (0, 1, 3, 4, 5, 17, 30):
        got = philox.words((3, 0), 64 - start - 2, start=start)
        assert np.array_equal(got, ref[start:62])


def test_normal_transform_and_f32():
    k = g.rng.key(2024)
    z = g.rng.normal(k, (8, 8))
    w = np.random.Philox(key=2024).random_raw(128).reshape(64, 2)
    for i in (0, 5, 63):  # spot-check the formula with math.log / math.cos (within ulps)
        u1 = ((int(w[i, 0]) >> 11) + 1) * 2.0**-53
        u2 = (int(w[i, 1]) >> 11) * 2.0**-53
        expect = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
        assert abs(z.reshape(-1)[i] - expect) <= 1e-14 * max(1.0, abs(expect))
    z32 = g.rng.normal(k, (8, 8), dtype=np.float32)
    assert z32.tobytes() == z.astype(np.float32).tobytes()


def test_fold_and_split_are_defined_blocks():
    k = g.rng.key(2**65 + 11)
    b = np.random.Philox(key=k.seed, counter=(1 << 192) + 5 - 1).random_raw(4)
    assert k.fold(5).words == (int(b[0]), int(b[1]))
    parts = k.split(3)
    for j, p in enumerate(parts):
        b = np.random.Philox(key=k.seed, counter=(2 << 192) + j - 1).random_raw(4)
        assert p.words == (int(b[0]), int(b[1]))
    assert len({p.words for p in parts} | {k.fold(i).words for i in range(3)}) == 6
    assert k.fold(5) == k.fold(5) and k.fold(5) != k.fold(6)
    assert k.split(0) == [] and k.split(1) == parts[:1]
    assert g.rng.Key.from_array(k.array()) == k


def test_chi_square_uniform_and_normal():
    k = g.rng.key(1234)
    n, bins = 100_000, 100
    u = g.rng.uniform(k, n)
    counts = np.bincount((u * bins).astype(int), minlength=bins)
    chi2 = float(((counts - n / bins) ** 2 / (n / bins)).sum())
    assert 60 < chi2 < 140, chi2  # 99 dof: mean 99, sd 14
    z = g.rng.normal(k.fold(1), n)
    edges = np.array([-np.inf, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, np.inf])
    cdf = np.array([0.5 * (1 + math.erf(e / math.sqrt(2))) if np.isfinite(e) else
                    (0.0 if e < 0 else 1.0) for e in edges])
    expect = n * np.diff(cdf)
    obs = np.histogram(z, edges)[0]
    chi2 = float(((obs - expect) ** 2 / expect).sum())
    assert chi2 < 30, chi2  # 9 dof: p < 0.001 above 27.9
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


@pytest.mark.parametrize("seed, err", [(-1, ValueError), (2**128, ValueError),
                                       (1.5, TypeError), (True, TypeError), ("7", TypeError)])
def test_bad_seed(seed, err):
    with pytest.raises(err, match=r"rng\.key: seed"):
        g.rng.key(seed)


@pytest.mark.parametrize("fn", [g.rng.bits, g.rng.uniform, g.rng.normal])
def test_bad_key_and_shape(fn):
    with pytest.raises(TypeError, match="key must be a gtape.rng.Key"):
        fn(42, (2,))
    k = g.rng.key(1)
    with pytest.raises(ValueError, match="shape"):
        fn(k, (2, -1))
    with pytest.raises(TypeError, match="shape"):
        fn(k, (2.0,))
    with pytest.raises(TypeError, match="fold: i"):
        k.fold(-1)
    with pytest.raises(TypeError, match="split: n"):
        k.split(1.0)


def test_pinned_bits_of_the_transforms():
    """The documented transforms' bits, pinned (docs/semantics.md publishes the digests): a
    change of any constant or step of normal, f32 uniform or dropout fails here."""
    import hashlib

    z = g.rng.normal(g.rng.key(0), 6)
    assert [float(v).hex() for v in z] == [
        "0x1.44ad6314878aep-3", "-0x1.ecfa265480f4fp+0", "-0x1.9eba0a1cda46ep-3",
        "0x1.5221212eb8ae4p-2", "0x1.1ef2a0b661f8ep-1", "0x1.1e99d8686cd22p-1"]
    z32 = g.rng.normal(g.rng.key(2**127 + 3), 4, dtype="float32")
    assert [float(v).hex() for v in z32] == [
        "-0x1.465c7c0000000p-5", "0x1.942a7e0000000p-1", "-0x1.12ba380000000p-2",
        "0x1.ce0ad00000000p-3"]

    def digest(a: np.ndarray) -> str:
        return hashlib.sha256(a.tobytes()).hexdigest()

    k = g.rng.key(1)
    assert digest(g.rng.normal(k, 10000)) == \
        "6b7a2cd9831080575f9b978cb63a290b58af7118f9b6465a50fc538d523eb16e"
    assert digest(g.rng.uniform(k, 10000, dtype="float32")) == \
        "6395625f4f2e3d1cd410aa9be7f9e9cfa805b8c3369e02fbebe4719ca9117364"
    assert digest(g.dropout(np.ones(10000), 0.3, k)) == \
        "4fa0fbf738fc8e4d2eafb10bdcf4f94ce6745c47136333aba6fe0764d4e2a411"


def test_normal_is_box_muller_with_correctly_rounded_log_and_cos():
    """An independent derivation of ``normal``'s bits: numpy's Philox words (``bits``, checked
    against numpy above), the documented float64 steps in numpy, and log / cos rounded once from
    mpmath at 300 bits (so no gtensor code): 4000 draws, bitwise."""
    mpmath = pytest.importorskip("mpmath")
    k = g.rng.key(7)
    n = 4000
    w = g.rng.bits(k, 2 * n)
    u1 = ((w[0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (w[1::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    two_pi = 6.283185307179586  # 2*pi rounded to float64
    theta = two_pi * u2  # one rounding, as the definition's product
    with mpmath.workprec(300):
        log_u1 = np.array([float(mpmath.log(mpmath.mpf(float(v)))) for v in u1])
        cos_t = np.array([float(mpmath.cos(mpmath.mpf(float(v)))) for v in theta])
    want = np.sqrt(-2.0 * log_u1) * cos_t
    got = g.rng.normal(k, n)
    assert got.dtype == np.float64
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    got32 = g.rng.normal(k, n, dtype="float32")
    assert np.array_equal(got32.view(np.uint32), want.astype(np.float32).view(np.uint32))


def test_draw_size_limit_is_2_to_the_60():
    from gtensor.ops import random as rops

    assert rops.check_shape("x", (2**30, 2**30)) == (2**30, 2**30)
    assert rops.check_shape("x", 0) == (0,)
    for bad in [(2**60 + 1,), (2**31, 2**30)]:
        with pytest.raises(ValueError, match="at most 2\\*\\*60 elements"):
            rops.check_shape("x", bad)
        with pytest.raises(ValueError, match="rng.bits: shape"):
            g.rng.bits(g.rng.key(1), bad)
