"""sin/cos of the scalar language (gtensor.scalar.trig): accuracy, specials, bit pins, C parity.

* ulp error against mpmath (200 bits) on a seeded sample of the domain |x| <= 2**20: the
  rotary-table range [0, 4096], log-uniform magnitudes of both signs, and the doubles nearest
  to multiples of pi/2 (where the reduction cancels); bound 1 ulp (float64), 0.5 + 2**-20
  (float32); the measured max is printed;
* special values (+-0, tiny, NaN, inf, out of domain);
* bitwise pins: a digest of the float64 results on a fixed input set, so any change of a bit
  in the algorithm or its constants is seen;
* the emitted device source compiled for the CPU by the sim runtime gives the numpy bits.
"""

from __future__ import annotations

import hashlib

import mpmath
import numpy as np
import pytest
from gtensor import testing
from gtensor.scalar import trig as T
from gtensor.scalar.dsl import device_sources

PREC = 200
N = 4000


def _ulp_err(y: float, v, p: int, emin: int) -> float:
    if v == 0:
        return 0.0 if y == 0 else float("inf")
    _, e = mpmath.frexp(v)
    return float(abs(mpmath.mpf(float(y)) - v) / mpmath.ldexp(1, max(int(e) - p, emin)))


def sample(n: int = N, seed: int = 0) -> np.ndarray:
    """Angles of the rotary range, log-uniform magnitudes and near-multiples of pi/2."""
    rng = np.random.default_rng(seed)
    with mpmath.workprec(PREC):
        near = [float(mpmath.mpf(int(k)) * mpmath.pi / 2) for k in
                rng.integers(1, 667000, n // 4)]
    return np.concatenate([
        rng.uniform(0.0, 4096.0, n // 4),
        np.arange(n // 4, dtype=np.float64) * 0.0078125,  # pos * inv_freq with a power of 2
        np.exp2(rng.uniform(-40.0, 20.0, n // 4)) * rng.choice([-1.0, 1.0], n // 4),
        np.array(near) * rng.choice([-1.0, 1.0], n // 4),
    ])


@pytest.mark.parametrize("which", ["sin", "cos"])
def test_float64_within_one_ulp(which):
    fn = T.SIN_F64 if which == "sin" else T.COS_F64
    exact = mpmath.sin if which == "sin" else mpmath.cos
    xs = sample()
    ys = fn.numpy(xs)
    with mpmath.workprec(PREC):
        errs = np.array([_ulp_err(y, exact(mpmath.mpf(float(x))), 53, -1074)
                         for x, y in zip(xs, ys)])
    worst = int(np.argmax(errs))
    print(f"\n{fn.cname}: max {errs[worst]:.4f} ulp (x = {xs[worst]!r}), mean {errs.mean():.4f}")
    assert errs[worst] <= 1.0, (fn.cname, xs[worst], ys[worst], errs[worst])


@pytest.mark.parametrize("which", ["sin", "cos"])
def test_float32_correctly_rounded_nearly(which):
    fn = T.SIN_F32 if which == "sin" else T.COS_F32
    exact = mpmath.sin if which == "sin" else mpmath.cos
    xs = sample(2000, seed=1).astype(np.float32)
    ys = fn.numpy(xs)
    assert ys.dtype == np.float32
    with mpmath.workprec(PREC):
        errs = np.array([_ulp_err(y, exact(mpmath.mpf(float(x))), 24, -149)
                         for x, y in zip(xs, ys)])
    print(f"\n{fn.cname}: max {errs.max():.6f} ulp")
    assert errs.max() <= 0.5 + 2**-20, (fn.cname, errs.max())


def test_special_values():
    x = np.array([0.0, -0.0, 1e-300, -5e-324, 2.0**-28, np.nan, np.inf, -np.inf,
                  T.TRIG_MAX, -T.TRIG_MAX, np.nextafter(T.TRIG_MAX, np.inf)])
    s, c = T.SIN_F64.numpy(x), T.COS_F64.numpy(x)
    assert np.signbit(s[1]) and s[0] == 0.0 and not np.signbit(s[0])
    assert s[2] == 1e-300 and s[3] == -5e-324 and s[4] == 2.0**-28
    assert np.all(c[:5] == 1.0)
    assert np.all(np.isnan(s[5:8])) and np.all(np.isnan(c[5:8]))
    assert np.all(np.isfinite(s[8:10])) and np.isnan(s[10]) and np.isnan(c[10])
    assert s[8] == -s[9] and c[8] == c[9]  # odd and even
    # pythagoras to a few ulp on a sample (both functions are within 1 ulp)
    xs = sample(400)
    resid = np.abs(T.SIN_F64.numpy(xs) ** 2 + T.COS_F64.numpy(xs) ** 2 - 1.0)
    assert resid.max() <= 4 * 2.0**-53, resid.max()


def test_constants_split_pi_over_two():
    with mpmath.workprec(PREC):
        total = mpmath.mpf(T.P1) + T.P2 + T.P3 + T.P3T
        assert abs(total - mpmath.pi / 2) < mpmath.mpf(2) ** -150
    for p in (T.P1, T.P2, T.P3):  # 33 significant bits: n*P exact for |n| < 2**20
        m, _ = np.frexp(p)
        assert float(m * 2.0**33) == int(m * 2.0**33)


PIN_INPUTS = np.concatenate([np.linspace(-50.0, 50.0, 1001), np.arange(0, 2048) * 0.37,
                             np.array([np.pi / 4, np.pi / 2, np.pi, 1e5, 7e5])])
# sha256 of the result bits on PIN_INPUTS (float64), recorded when the functions were written;
# a change here means the tables (and every rotary embedding after them) changed bits
PINS = {
    "gt_sin20_f64": "41efd9cc0785166b3c6d696e9e13deb7",
    "gt_cos20_f64": "ee9bf57d96ba78d781aa24107ede103c",
}


def _digest(fn) -> str:
    return hashlib.sha256(fn.numpy(PIN_INPUTS).tobytes()).hexdigest()[:32]


@pytest.mark.parametrize("fn", [T.SIN_F64, T.COS_F64], ids=lambda f: f.cname)
def test_bitwise_pins(fn):
    assert _digest(fn) == PINS[fn.cname], f"{fn.cname}: result bits changed: {_digest(fn)}"


def test_device_source_has_no_fma_and_no_libm_trig():
    src = device_sources(T.ALL)
    assert "fma" not in src.lower()
    for libm in ("sin(", "cos(", "sinf(", "cosf(", "sincos(", "__sinf(", "__cosf("):
        assert f" {libm}" not in src and f"({libm}" not in src, libm
    for fn in T.ALL:
        assert fn.cname in src


@pytest.mark.parametrize("fn", T.ALL, ids=lambda f: f.cname)
def test_numpy_matches_compiled_c(fn):
    """The function compiled by the sim runtime (g++ -O2 -ffp-contract=off) gives its numpy bits."""
    dtype = np.float64 if fn.out_dt == "f64" else np.float32
    rng = np.random.default_rng(3)
    x = np.concatenate([sample(2000), rng.uniform(-2e6, 2e6, 2000),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan])]).astype(dtype)
    testing.assert_sim_map_matches(T.ALL, fn, x)


@pytest.mark.parametrize("fn", [T.SIN_F64, T.COS_F64], ids=lambda f: f.cname)
def test_eval_float_is_the_numpy_bits(fn):
    """``eval_float`` (one Python float, the schedules' host-side cosine) gives numpy's bits:
    the pins' inputs, random ones over the whole domain, tiny ones, +-0.0 (rint's zero sign
    matters there), the domain's edges, inf and NaN; a float32 function is refused."""
    rng = np.random.default_rng(11)
    xs = np.concatenate([PIN_INPUTS, rng.uniform(-2.0 ** 20, 2.0 ** 20, 500),
                         rng.uniform(-4, 4, 500), rng.standard_normal(200) * 1e-9,
                         [0.0, -0.0, -0.3, -0.5, 0.5, 2.0 ** 20, -2.0 ** 20, 2.0 ** 20 + 1,
                          np.inf, -np.inf, np.nan, 5e-324, -5e-324]])
    want = fn.numpy(xs)
    got = np.array([fn.eval_float(float(v)) for v in xs])
    assert testing.bits_equal(want, got), testing.first_difference(want, got)
    assert np.array_equal(want.view(np.int64), got.view(np.int64))  # NaN payloads too
    with pytest.raises(TypeError, match="eval_float: for float64"):
        T.COS_F32.eval_float(0.5)
