"""gtensor.fma (the numpy reference's exact fused multiply-add) against an exact rational
oracle: Python fractions, rounded to nearest-even by integer arithmetic written here (never
through a float operation), on random bit patterns and every edge class."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fma_oracle import FORMATS, oracle
from gtensor.fma import fma


def _same(got: np.ndarray, want, dt) -> np.ndarray:
    """Elementwise bitwise equality, NaN by class."""
    w = np.array(want, dtype=dt)
    bt = FORMATS[dt][3]
    return (got.view(bt) == w.view(bt)) | (np.isnan(got) & np.isnan(w))


def _check(a, b, c, dt) -> None:
    got = fma(a, b, c)
    _check_got(got, a, b, c, dt)
    # the matmul chain: step 0 puts c in the accumulator exactly (c * 1 + 0), step 1 is the fma
    # (its unscaled fast step where the operands are in range)
    from gtensor.fma import fma_chain

    one = np.ones_like(a)
    cols, rows = np.stack([c, a])[..., None], np.stack([one, b])[..., None]
    chained = fma_chain(cols, rows, (a.size, 1))[:, 0]
    zero_c = (c == 0) & (np.signbit(c))  # -0.0 cannot be put in an accumulator starting at +0
    keep = ~zero_c
    _check_got(chained[keep], a[keep], b[keep], c[keep], dt)


def _check_got(got, a, b, c, dt) -> None:
    want = [oracle(float(x), float(y), float(z), dt) for x, y, z in zip(a, b, c)]
    ok = _same(got, want, dt)
    bad = np.nonzero(~ok)[0][:5]
    assert ok.all(), [(a[i], b[i], c[i], got[i], want[i]) for i in bad]


def _random_bits(rng, n, dt) -> np.ndarray:
    bt = FORMATS[dt][3]
    return rng.integers(0, np.iinfo(bt).max, n, dtype=bt, endpoint=True).view(dt)


DTYPES = [np.float64, np.float32]


@pytest.mark.parametrize("dt", DTYPES)
def test_random_bit_patterns(dt):
    rng = np.random.default_rng(1)
    n = 3000
    a, b, c = (_random_bits(rng, n, dt) for _ in range(3))
    _check(a, b, c, dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_cancellation_and_close_magnitudes(dt):
    """c close to -a*b (massive cancellation), and c within a few binades of a*b (the
    rounding of the sum decides the last bit)."""
    rng = np.random.default_rng(2)
    n = 3000
    a = rng.standard_normal(n).astype(dt)
    b = rng.standard_normal(n).astype(dt)
    p = (a.astype(np.float64) * b.astype(np.float64)).astype(dt)
    scale = np.ldexp(1.0, rng.integers(-60, 5, n)).astype(dt)
    c = np.where(rng.random(n) < 0.5, -p, (-p * (1 + scale)).astype(dt)).astype(dt)
    _check(a, b, c, dt)
    # c = -RN(a*b): the result is the product's rounding error, exactly
    _check(a, b, -p, dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_subnormal_products_and_results(dt):
    """Products and results in (and near) the subnormal range, and tiny c against large a*b."""
    rng = np.random.default_rng(3)
    _, emin, emax, _ = FORMATS[dt]
    n = 2000
    ma = (rng.random(n) + 0.5).astype(dt)
    mb = (rng.random(n) + 0.5).astype(dt)
    ea = rng.integers(emin - 10, emin // 2 + 5, n)
    eb = rng.integers(emin // 2 - 30, 20, n)
    a = np.ldexp(ma, ea).astype(dt)
    b = np.ldexp(mb, eb).astype(dt)
    c = np.ldexp((rng.random(n) - 0.5).astype(dt), rng.integers(emin - 60, emin + 60, n)).astype(dt)
    _check(a, b, c, dt)
    # results crossing the normal/subnormal boundary: c = -RN(a*b) + a few ulps
    p = (a.astype(np.float64) * b.astype(np.float64)).astype(dt)
    c2 = np.nextafter(-p, np.where(rng.random(n) < 0.5, np.inf, -np.inf).astype(dt))
    _check(a, b, c2.astype(dt), dt)
    # c far below a*b (only its sign decides a tie), and far above (the result is c)
    big = np.full(n, 2.0 ** (emax - 2), dt)
    _check(a, b, big, dt)
    _check(np.ones(n, dt), np.full(n, 1 + 2.0 ** -(FORMATS[dt][0] - 1), dt),
           np.ldexp(np.ones(n, dt), rng.integers(emin - 20, emin, n)).astype(dt), dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_ties_broken_by_tiny_c(dt):
    """a*b exactly halfway between two floats: a c of either sign, far smaller, decides."""
    p, emin, _, _ = FORMATS[dt]
    one = dt(1.0)
    h = dt(1.0 + 2.0 ** -(p // 2 + 1))  # h*h = 1 + 2^-(p//2) + 2^-(2(p//2+1)): not a tie
    a = np.array([1 + 2.0 ** -(p - 1), 3.0, h], dt)
    b = np.array([1 + 2.0 ** -(p - 1), 1 + 2.0 ** -(p - 1), h], dt)
    # 3 * (1 + 2^-(p-1)) = 3 + 3 * 2^-(p-1): 3*2^-(p-1) is 1.5 ulp of the result binade
    for tiny in (2.0 ** (emin - p + 1), 2.0 ** -400 if dt is np.float64 else 2.0 ** -140):
        for s in (1.0, -1.0):
            c = np.full(3, dt(s * tiny))
            _check(a, b, c, dt)
    _check(np.array([one]), np.array([one]), np.array([dt(2.0 ** -p)]), dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_special_values_and_zero_signs(dt):
    """Every combination of the special classes: +-0, +-1, +-subnormal, +-max, +-inf, NaN."""
    tiny = np.finfo(dt).smallest_subnormal
    big = np.finfo(dt).max
    vals = np.array([0.0, -0.0, 1.0, -1.0, tiny, -tiny, big, -big, np.inf, -np.inf, np.nan,
                     1.5, -3.25, np.finfo(dt).tiny], dt)
    a, b, c = (x.ravel() for x in np.meshgrid(vals, vals, vals, indexing="ij"))
    _check(a, b, c, dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_overflow(dt):
    """Products past the largest float, pulled back (or not) by c; exact sums at the edge."""
    big = np.finfo(dt).max
    rng = np.random.default_rng(4)
    n = 1000
    a = (big / (1 + rng.random(n))).astype(dt)
    b = (1 + 2 * rng.random(n)).astype(dt)
    c = (-big * rng.random(n)).astype(dt)
    _check(a, b, c, dt)
    _check(a, b, -c, dt)


def test_broadcasting_and_dtype_refusal():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    got = fma(x, np.float64(2.0), np.zeros((1, 3)))
    assert got.shape == (2, 3) and got.tobytes() == (x * 2).tobytes()
    with pytest.raises(TypeError, match="fma: a, b and c must share one dtype"):
        fma(x, x.astype(np.float32), x)


@pytest.mark.skipif(not hasattr(math, "fma"),
                    reason="math.fma needs Python >= 3.13 (this interpreter has none)")
def test_against_math_fma():
    rng = np.random.default_rng(5)
    a, b, c = (_random_bits(rng, 5000, np.float64) for _ in range(3))
    got = fma(a, b, c)
    want = [math.fma(x, y, z) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
    assert _same(got, want, np.float64).all()


def _chain_by_fma(cols, rows, shape):
    acc = np.zeros(shape, cols.dtype)
    for kk in range(cols.shape[0]):
        acc = fma(cols[kk], rows[kk], acc)
    return acc


@pytest.mark.parametrize("case", ["normal", "zeros", "cancel", "huge_acc", "tiny", "special"])
def test_fma_chain_is_the_fma_loop(case):
    """The matmul chain's unscaled fast step gives fma's bits (zeros' signs included), and
    falls back where operands or the accumulator leave its range."""
    from gtensor.fma import fma_chain

    rng = np.random.default_rng(6)
    k, m, n = 9, 5, 7
    a = rng.standard_normal((k, m, 1))
    b = rng.standard_normal((k, 1, n))
    if case == "zeros":
        a[rng.random(a.shape) < 0.4] = 0.0
        a[rng.random(a.shape) < 0.3] = -0.0
        b[rng.random(b.shape) < 0.3] = -0.0
    elif case == "cancel":
        b[1::2] = -b[0::2][: b[1::2].shape[0]]
        a[1::2] = a[0::2][: a[1::2].shape[0]] * (1 + 2.0 ** -40)
    elif case == "huge_acc":
        a *= 2.0 ** 440
        b *= 2.0 ** 440
    elif case == "tiny":
        a[::2] *= 2.0 ** -500
    elif case == "special":
        a[3, 1, 0], b[5, 0, 2], a[6, 4, 0] = np.inf, np.nan, -np.inf
    want = _chain_by_fma(a, b, (m, n))
    got = fma_chain(a, b, (m, n))
    assert _same(got, want.tolist(), np.float64).all(), (got, want)
