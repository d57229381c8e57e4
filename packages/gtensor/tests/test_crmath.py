"""The correctly rounded functions (gtensor.scalar.crmath) against mpmath, bit for bit.

Every result must be *the* correctly rounded value (``cr_oracle``: mpmath with increasing
precision, rounded exactly onto the float64 / float32 grid, no double rounding), so each check
is an equality, not a tolerance:

* a seeded sample over the whole domain (random bit patterns of every magnitude and both
  signs, the function's busy range, log-uniform magnitudes, edges and their neighbours);
* CORE-MATH's published round-to-nearest hard cases (``crmath_hard.py``), both signs;
* the accurate path alone on the same kind of sample: it is what decides the hard inputs, so
  it must be right everywhere (this is the test that forces it);
* the fast path's measured error against its bound (the bound is what sends an input to the
  accurate path; a bound that were too small would let a wrong result through), and the
  measured rate of the accurate path;
* special values (IEEE / C99), golden digests of a fixed sample, numpy == sim bitwise
  (hard inputs included, so both paths run compiled), and the op through the backend under
  test against numpy.

The ``slow`` tests (``nox -s oracle``) repeat the comparison on 10^6 inputs per function and
dtype and print the counts (benchmarks/results/accuracy.md).
"""

from __future__ import annotations

import hashlib
import zlib

import gtensor
import mpmath as mp
import numpy as np
import pytest
from cr_oracle import reference
from crmath_hard import HARD
from gtensor import testing
from gtensor.scalar import crmath

NAMES = sorted(crmath.BY_NAME)
# the numpy-side checks do not depend on the backend under test: they run in its numpy session
# only (the sim and cpu sessions run the engine comparisons)
_SESSION = testing.backend_name()
numpy_session = pytest.mark.skipif(_SESSION != "numpy", reason="backend-independent: runs in "
                                   "the numpy session")
DTYPES = [np.float64, np.float32]
IDS = {np.float64: "f64", np.float32: "f32"}
BOTH_SIGNS = {"erf", "sin", "cos", "tanh"}  # hard cases listed for x > 0: test -x too
ABS_FAST = {"erf", "tanh"}  # fast_dd gives f(|x|)

# per function: the busy range (uniform samples) and edge points (each with 4 neighbours a side)
DOMAIN = {
    "erf": ((-6.5, 6.5), [0.25, 0.5, 1.0, 2.0, 5.921587195794507, 2.0**-960, 2.0**-28, 3.92,
                          0.0625, 0.28125]),
    "log1p": ((-1.0, 4.0), [-1.0, -0.5, 2.0**-60, 2.0**-54, 2.0**-53, 2.0**-6, 1.0,
                            0.0078125, -0.00390625, 2.0**1023, 1e300]),
    "expm1": ((-40.0, 710.0), [2.0**-54, 2.0**-6, 0.0054152123481245725, 0.01083042469624915,
                               -37.42994775023705, -40.0, 709.782712893384, 1.0, -1.0,
                               88.72283935546875, -0.34657359027997264]),
    "exp": ((-750.0, 712.0), [709.782712893384, -745.1332191019411, -708.3964185322641,
                              -708.39, 2.0**-54, -(2.0**-54), 0.5, 1.0, -1.0,
                              88.72283935546875, -103.97207708399179, -87.33654475055311]),
    "log": ((0.0, 4.0), [1.0, 0.5, 2.0, 0.99609375, 1.00390625, 2.0**-1022, 5e-324,
                         1.7976931348623157e308, 1.4142135623730951, 0.7071067811865476]),
    "tanh": ((-22.0, 22.0), [2.0**-27, 2.0**-26, 20.0, 19.06154746539849, 0.5, 1.0,
                             0.0054152123481245725, 0.01083042469624915]),
    "sigmoid": ((-750.0, 45.0), [0.0, 40.0, 36.7368005696771, 37.42994775023705,
                                 -708.39, -745.1332191019411, -709.0, -87.33654475055311,
                                 -103.97207708399179]),
    "sin": ((-10.0, 10.0), [2.0**-26, 2.0**-27, 0.7853981633974483, 1.5707963267948966,
                            3.141592653589793, 2.0**20, 1e22, 6381956970095103 * 2.0**797,
                            0.01227184630308513, 355.0, 1.7976931348623157e308]),
    "cos": ((-10.0, 10.0), [2.0**-26, 2.0**-27, 0.7853981633974483, 1.5707963267948966,
                            3.141592653589793, 2.0**20, 1e22, 6381956970095103 * 2.0**797,
                            0.01227184630308513, 355.0, 1.7976931348623157e308]),
}
# the rate of the accurate path is measured away from the inputs sent there on purpose (results
# in the subnormal range: exp and sigmoid below -708.39)
RATE_RANGE = {"exp": (-708.0, 710.0), "sigmoid": (-708.0, 45.0)}
MEASURED: list[str] = []  # printed in the terminal summary (conftest)


def _fns(name, dtype):
    f = crmath.BY_NAME[name]
    return (f.f64, f.acc_f64) if dtype == np.float64 else (f.f32, f.acc_f32)


def _neighbours(values, dtype, k=4):
    out = []
    with np.errstate(over="ignore"):
        for v in values:
            a = b = dtype(v)
            out += [a, -a]
            for _ in range(k):
                a, b = np.nextafter(a, dtype(np.inf)), np.nextafter(b, dtype(-np.inf))
                out += [a, b, -a, -b]
    return np.array(out, dtype)


def sample(name: str, dtype, n: int, seed: int = 0) -> np.ndarray:
    """A seeded sample of ``n`` finite inputs over the whole domain of ``name``."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), 64 if dtype == np.float64
                                 else 32])
    q = (n * 103) // 300 + 1  # a few percent spare: non-finite patterns are dropped
    if dtype == np.float64:
        bits = rng.integers(-(2**63), 2**63 - 1, q, dtype=np.int64).view(np.float64)
    else:
        bits = rng.integers(-(2**31), 2**31 - 1, q).astype(np.int32).view(np.float32)
    (lo, hi), edges = DOMAIN[name]
    busy = rng.uniform(lo, hi, q)
    mag = np.exp2(rng.uniform(-60, np.log2(max(abs(lo), abs(hi))), q)) * rng.choice([-1, 1], q)
    with np.errstate(over="ignore"):
        x = np.concatenate([_neighbours(edges, dtype), bits, busy.astype(dtype),
                            mag.astype(dtype)])
    return x[np.isfinite(x)][: n + len(edges) * 18]


# Every float32 x with |x| < 87 whose e^x (numpy's float64 exp) lies within 16 float64 ulps
# of a float32 midpoint: the exhaustive test's ``ambiguous`` over all 2^32 inputs (2026-12-05).
# exp's lean float32 stage must send each to the double-double stage or round it right.
EXP32_NEAR_MIDPOINTS = [
    "0x1.fffffe0000000p-25", "0x1.0000000000000p-24", "0x1.7ffffe0000000p-23",
    "0x1.bffffa0000000p-22", "0x1.dffff20000000p-21", "0x1.efffe20000000p-20",
    "0x1.f7ffc20000000p-19", "0x1.fbff820000000p-18", "0x1.fdff020000000p-17",
    "0x1.747de20000000p-15", "0x1.5b3c520000000p-14", "0x1.cd39820000000p-14",
    "0x1.8d7cb60000000p-12", "0x1.cb763a0000000p-12", "0x1.f79a100000000p-11",
    "0x1.c1141c0000000p-7", "0x1.2e35540000000p-6", "0x1.5ffc5c0000000p-6", "0x1.344e9c0000000p-5",
    "0x1.cce3320000000p+0", "0x1.0364920000000p+1", "0x1.62b6660000000p+1", "0x1.69a0560000000p+1",
    "0x1.97f0f60000000p+4", "0x1.1128560000000p+6", "-0x1.0000000000000p-25",
    "-0x1.c1c4b80000000p-10", "-0x1.6e1dd00000000p-8", "-0x1.e1dbe20000000p-8",
    "-0x1.548c340000000p-7", "-0x1.71e81e0000000p-6", "-0x1.f02a660000000p+1",
    "-0x1.7acc620000000p+3", "-0x1.d2259a0000000p+3",
]


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    u = f"u{got.itemsize}"
    return (got.view(u) == want.view(u)) | (np.isnan(got) & np.isnan(want))


def _assert_cr(name, dtype, x, got, what):
    want = reference(name, x)
    ok = _same(got, want)
    bad = np.flatnonzero(~ok)
    assert not len(bad), (f"{name} {IDS[dtype]} {what}: {len(bad)} of {len(x)} not correctly "
                          f"rounded, e.g. x={[float(v).hex() for v in x[bad[:4]]]} "
                          f"got={[float(v).hex() for v in got[bad[:4]]]} "
                          f"want={[float(v).hex() for v in want[bad[:4]]]}")


# --------------------------------------------------------------------------- correctness
@numpy_session
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_correctly_rounded_on_a_sample(name, dtype):
    fn, _ = _fns(name, dtype)
    x = sample(name, dtype, 3000)
    _assert_cr(name, dtype, x, fn.numpy(x), "sample")


@numpy_session
@pytest.mark.parametrize("name", [n for n in NAMES if n in HARD])
def test_correctly_rounded_on_published_hard_cases(name):
    x = np.array([float.fromhex(h) for h, _ in HARD[name]])
    if name in BOTH_SIGNS:
        x = np.concatenate([x, -x])
    f = crmath.BY_NAME[name]
    _assert_cr(name, np.float64, x, f.f64.numpy(x), "hard cases")
    with np.errstate(over="ignore"):
        x32 = np.unique(x.astype(np.float32))
    x32 = x32[np.isfinite(x32)]
    _assert_cr(name, np.float32, x32, f.f32.numpy(x32), "hard cases (as float32)")


@numpy_session
def test_exp_float32_near_midpoints():
    """exp's float32 inputs nearest a midpoint: correctly rounded, and none decided by the lean
    first stage's bit test (each within its 16 ulps)."""
    from gtensor.scalar import crexp
    from gtensor.scalar.dsl import NUMPY

    x32 = np.array([float.fromhex(h) for h in EXP32_NEAR_MIDPOINTS], np.float32)
    _assert_cr("exp", np.float32, x32, crmath.BY_NAME["exp"].f32.numpy(x32), "near midpoints")
    _, ok = crexp.lean32(NUMPY, x32.astype(np.float64))
    assert not ok.any(), x32[ok]


@numpy_session
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_accurate_path_alone_is_correctly_rounded(name, dtype):
    _, acc = _fns(name, dtype)
    x = sample(name, dtype, 240, seed=3)
    got = acc.numpy(x.astype(np.float64))
    _assert_cr(name, dtype, x, got, "accurate path")


@numpy_session
@pytest.mark.parametrize("name", NAMES)
def test_fast_path_error_within_its_bound(name):
    """The fast double-double's error, measured with mpmath, stays under the bound that the
    rounding test uses (the ratio is printed)."""
    mod = crmath.BY_NAME[name].module
    x = sample(name, np.float64, 4000, seed=5)
    h, low, eps, live = mod.fast_dd(x)
    worst = 0.0
    with mp.workprec(200):
        from cr_oracle import FUNCTIONS
        for xi, hi, lo, e in zip(x[live], h[live], low[live], eps[live]):
            v = FUNCTIONS[name](mp.mpf(abs(float(xi))) if name in ABS_FAST else mp.mpf(float(xi)))
            rel = abs((mp.mpf(float(hi)) + mp.mpf(float(lo))) / v - 1)
            worst = max(worst, float(rel / e))
    MEASURED.append(f"{name}: fast path error / bound, max over {int(live.sum())} inputs: "
                    f"{worst:.3f}")
    assert worst < 1.0


@numpy_session
@pytest.mark.parametrize("name", NAMES)
def test_accurate_path_is_rare(name):
    mod = crmath.BY_NAME[name].module
    rng = np.random.default_rng(9)
    (lo, hi) = RATE_RANGE.get(name, DOMAIN[name][0])
    # the busy range and log-uniform magnitudes (not the random bit patterns: their tiny and
    # huge ends are decided, or sent on purpose, without the fast path)
    x = np.concatenate([rng.uniform(lo, hi, 50_000), rng.choice([-1, 1], 50_000)
                        * np.exp2(rng.uniform(-60, np.log2(max(-lo, hi)), 50_000))])
    rate64 = float(mod.accurate_needed(x).mean())
    rate32 = float(mod.accurate_needed(x.astype(np.float32).astype(np.float64), True).mean())
    MEASURED.append(f"{name}: accurate path taken for {rate64:.2e} (f64) / {rate32:.2e} (f32) "
                    f"of {len(x)} sampled inputs")
    assert rate64 < 2e-4 and rate32 < 2e-4


# --------------------------------------------------------------------------- specials, pins
SPECIALS = {
    "erf": [(0.0, 0.0), (-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0), (np.nan, np.nan),
            ("max", 1.0), ("-max", -1.0), (6.0, 1.0), (-6.0, -1.0)],
    "log1p": [(0.0, 0.0), (-0.0, -0.0), (np.inf, np.inf), (-np.inf, np.nan), (np.nan, np.nan),
              (-1.0, -np.inf), (-2.0, np.nan), ("-max", np.nan), ("sub", "sub"),
              ("-sub", "-sub")],
    "expm1": [(0.0, 0.0), (-0.0, -0.0), (np.inf, np.inf), (-np.inf, -1.0), (np.nan, np.nan),
              ("max", np.inf), ("-max", -1.0), ("sub", "sub"), ("-sub", "-sub"), (-50.0, -1.0)],
    "exp": [(0.0, 1.0), (-0.0, 1.0), (np.inf, np.inf), (-np.inf, 0.0), (np.nan, np.nan),
            ("max", np.inf), ("-max", 0.0), ("sub", 1.0), ("-sub", 1.0), (1000.0, np.inf)],
    "log": [(0.0, -np.inf), (-0.0, -np.inf), (-1.0, np.nan), (-np.inf, np.nan),
            (np.inf, np.inf), (1.0, 0.0), (np.nan, np.nan), ("-sub", np.nan)],
    "tanh": [(0.0, 0.0), (-0.0, -0.0), (np.inf, 1.0), (-np.inf, -1.0), (np.nan, np.nan),
             ("sub", "sub"), ("-sub", "-sub"), ("max", 1.0), ("-max", -1.0), (30.0, 1.0)],
    "sigmoid": [(np.inf, 1.0), (-np.inf, 0.0), (np.nan, np.nan), (0.0, 0.5), (-0.0, 0.5),
                ("max", 1.0), ("-max", 0.0), ("sub", 0.5), ("-sub", 0.5), (800.0, 1.0),
                (-800.0, 0.0)],
    "sin": [(0.0, 0.0), (-0.0, -0.0), (np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan),
            ("sub", "sub"), ("-sub", "-sub")],
    "cos": [(0.0, 1.0), (-0.0, 1.0), (np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan),
            ("sub", 1.0), ("-sub", 1.0)],
}


def _resolve(v, dtype):
    fi = np.finfo(dtype)
    table = {"max": fi.max, "-max": -fi.max, "sub": fi.smallest_subnormal,
             "-sub": -fi.smallest_subnormal}
    return dtype(table[v]) if isinstance(v, str) else dtype(v)


@numpy_session
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name, dtype):
    fn, acc = _fns(name, dtype)
    x = np.array([_resolve(a, dtype) for a, _ in SPECIALS[name]], dtype)
    want = np.array([_resolve(b, dtype) for _, b in SPECIALS[name]], dtype)
    for f in (fn, acc):
        got = f.numpy(x if f is fn else x.astype(np.float64))
        assert _same(got, want).all(), (name, f.cname, x, got, want)
    # the smallest subnormal in and its neighbours: correctly rounded too
    tiny = _neighbours([np.finfo(dtype).smallest_subnormal], dtype)
    _assert_cr(name, dtype, tiny, fn.numpy(tiny), "subnormal inputs")


def splitmix64(seed: int, n: int) -> np.ndarray:
    """n pseudo-random uint64 (splitmix64, numpy-version independent)."""
    with np.errstate(over="ignore"):
        x = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def pin_sample(dtype) -> np.ndarray:
    """4096 inputs: random bit patterns (every class) and uniform on [-8, 8]."""
    u = splitmix64(38, 4096)
    if dtype == np.float64:
        bits = u[:2048].view(np.float64)
    else:
        bits = (u[:2048] >> np.uint64(32)).astype(np.uint32).view(np.float32)
    unit = (u[2048:] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.concatenate([bits, (unit * 16.0 - 8.0).astype(dtype)])


def digest(y: np.ndarray) -> str:
    """sha256 of the output bits, every NaN replaced by one canonical NaN."""
    y = np.array(y)
    y[np.isnan(y)] = np.nan
    return hashlib.sha256(y.tobytes()).hexdigest()[:32]


# A correctly rounded function's bits are the mathematics': these change only if a result was
# wrong before (or the sample changes).
DIGESTS = {
    ("erf", "f64"): "e13629f4877b27203a702c9afd02af60",
    ("erf", "f32"): "1d3bcd77705f0913c80e968289a6bae5",
    ("log1p", "f64"): "8e1f12c3cfaf4f36b67b14eb53163df7",
    ("log1p", "f32"): "aca72c4ebcf38fa8487c049a0fdf220f",
    ("expm1", "f64"): "a949bb0c5e14037d71f1e51bd4446e1f",
    ("expm1", "f32"): "e484764284fd4dda0e528b3d10ab18f5",
    ("exp", "f64"): "b96aad2ff5a5cd7ee4d8cbf8bdfaded0",
    ("exp", "f32"): "7c1e009fc43ebedd5799ded2510721e2",
    ("log", "f64"): "dacac10a19b8f5e5438d07e87f1d4595",
    ("log", "f32"): "3dd06442dd93c1dd66bf854c3668f020",
    ("tanh", "f64"): "147c0caf53ec859d6ec4a97364d318e2",
    ("tanh", "f32"): "3699fb8cb91b75751bcb3474d060846f",
    ("sigmoid", "f64"): "805cb2412bc0fe49c51d49fa6fdcdb00",
    ("sigmoid", "f32"): "ff14eed35b91d39691705ebe61fea009",
    ("sin", "f64"): "0dfcbf0a02c3b9d76496b0dd575fdd59",
    ("sin", "f32"): "de19f11455006f2eb7b8f25fa7007648",
    ("cos", "f64"): "69333e30739da02bbbedfda7012902f1",
    ("cos", "f32"): "8156d87f276ad4822c0c27799521b77e",
}


@numpy_session
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_golden_digest(name, dtype):
    fn, _ = _fns(name, dtype)
    assert digest(fn.numpy(pin_sample(dtype))) == DIGESTS[(name, IDS[dtype])]


def _first_stage32(name, x):
    """(y, err, live) of a float32 first stage on widened inputs ``x``: the plain-double value,
    the error bound its rounding test uses, and the lanes it computes (numpy)."""
    from gtensor.scalar import crerf, crexp, crhyp, crtrig
    from gtensor.scalar.dsl import NUMPY

    with np.errstate(all="ignore"):
        if name == "erf":
            y, err, decided, _ = crerf.fast32(NUMPY, x)
            return y, err, ~decided
        if name == "sigmoid":
            y, err, decided, _ = crhyp.sig_fast32(NUMPY, x)
            return y, err, ~decided & (x > -138.0)  # below, exp's scaling is clamped
        if name == "exp":  # exp's own lean stage (its fast32 is sigmoid's: above)
            y, _ = crexp.lean32(NUMPY, x)
            return y, np.abs(y) * crexp.LEAN_EPS, np.abs(x) < crexp.LEAN_LIVE
        offset, tiny = (0, crtrig.SIN_TINY) if name == "sin" else (64, crtrig.COS_TINY)
        y, err, decided, _, fast = crtrig._fast32(NUMPY, x, offset, tiny, x)
        return y, err, ~decided & fast


@numpy_session
@pytest.mark.parametrize("name", ["exp", "erf", "sigmoid", "sin", "cos"])
def test_float32_first_stage_within_its_bound(name):
    """The float32 plain-double first stages (crexp.lean32, crerf.fast32, crhyp.sig_fast32 and
    the crexp.fast32 it calls, crtrig._fast32): the error,
    measured with mpmath, stays under the bound the rounding test uses (the ratio is printed),
    and few inputs are sent on to the double-double stage (the rate is printed)."""
    from gtensor.scalar import multi

    x = sample(name, np.float32, 4000, seed=6).astype(np.float64)
    y, err, live = _first_stage32(name, x)
    f = {"exp": mp.exp, "erf": mp.erf, "sin": mp.sin, "cos": mp.cos,
         "sigmoid": lambda v: 1 / (1 + mp.exp(-v))}[name]
    worst = 0.0
    with mp.workprec(200):
        for xi, yi, ei in zip(x[live], y[live], err[live]):
            if np.isfinite(yi) and ei > 0:
                worst = max(worst, float(abs(mp.mpf(float(yi)) - f(mp.mpf(float(xi)))) / ei))
    rng = np.random.default_rng(8)
    (lo, hi), _ = DOMAIN[name]
    busy = np.concatenate([rng.uniform(max(lo, -20.0), min(hi, 20.0), 100_000),
                           rng.choice([-1, 1], 100_000) * np.exp2(rng.uniform(-20, 6, 100_000))]
                          ).astype(np.float32).astype(np.float64)
    yb, eb, lb = _first_stage32(name, busy)
    from gtensor.scalar.dsl import NUMPY

    with np.errstate(all="ignore"):
        _, ok = multi.round_d_f32(NUMPY, yb, eb)
        if name == "exp":  # the lean stage's own test: the low bits' distance to a midpoint
            from gtensor.scalar import crexp

            _, ok = crexp.lean32(NUMPY, busy)
    rate = float((~ok & lb).mean())
    MEASURED.append(f"{name} float32 first stage: error / bound, max over {int(live.sum())} "
                    f"inputs: {worst:.3f}; sent on: {rate:.1e} of {len(busy)}")
    assert worst < 1.0 and rate < 1e-4


# --------------------------------------------------------------------------- engines
def _parity_inputs(name, dtype):
    """Sampled inputs, the hard cases and inputs the fast path cannot decide (both paths)."""
    x = sample(name, dtype, 4000, seed=11)
    mod = crmath.BY_NAME[name].module
    rng = np.random.default_rng(12)
    (lo, hi), _ = DOMAIN[name]
    wide = rng.uniform(lo, hi, 400_000).astype(dtype)
    hard = wide[mod.accurate_needed(wide.astype(np.float64), dtype == np.float32)]
    extra = [float.fromhex(h) for h, _ in HARD.get(name, [])]
    if name == "exp" and dtype == np.float32:
        extra += [float.fromhex(h) for h in EXP32_NEAR_MIDPOINTS]
    with np.errstate(over="ignore"):
        return np.concatenate([x, hard, np.array(extra, dtype),
                               np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)])


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_sim_matches_numpy(name, dtype):
    f = crmath.BY_NAME[name]
    fns = [f.f64, f.f32, f.acc_f64]
    x = _parity_inputs(name, dtype)
    testing.assert_sim_map_matches(fns, f.f64 if dtype == np.float64 else f.f32, x)
    if dtype == np.float64:
        testing.assert_sim_map_matches(fns, f.acc_f64, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_backend_op_matches_numpy(be, name, dtype):
    if be.name == "numpy":
        pytest.skip("numpy against itself")
    x = _parity_inputs(name, dtype)
    want = gtensor.backend("numpy").to_numpy(getattr(gtensor.backend("numpy"), name)(x))
    got = be.to_numpy(getattr(be, name)(be.asarray(x)))
    assert _same(got, want).all(), (name, x[~_same(got, want)][:4])


# --------------------------------------------------------------------------- the big oracle
@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_million_random_inputs(name, dtype):
    """10^6 inputs per function and dtype against mpmath: the counts go to accuracy.md."""
    fn, _ = _fns(name, dtype)
    n = 10**6
    x = sample(name, dtype, n, seed=2024)
    got = fn.numpy(x)
    bad = 0
    for start in range(0, n, 50_000):
        part = x[start:start + 50_000]
        bad += int((~_same(got[start:start + 50_000], reference(name, part))).sum())
    MEASURED.append(f"{name} {IDS[dtype]}: {len(x)} random inputs vs mpmath, {bad} not "
                    "correctly rounded")
    assert bad == 0


@pytest.mark.slow
def test_generated_tables_are_current():
    """``tools/gen_crmath_data.py --check`` (about a minute of mpmath): the tables, pieces and
    error bounds in ``scalar/crdata_*.py`` are exactly what the generator computes, so a hand
    edit of a constant or a bound that no longer matches its derivation fails here."""
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[3] / "tools" / "gen_crmath_data.py"
    if not tool.exists():
        pytest.fail(f"{tool} is missing (the test runs from the repository)")
    run = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

