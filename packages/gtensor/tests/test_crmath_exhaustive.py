"""Every float32 input (all 2^32 bit patterns) of every correctly rounded function, on the cpu
backend, against a correctly rounded float32 reference: ``nox -s oracle`` only (``slow``).

The reference avoids double rounding this way: y = the float64 value of the platform's
function of the exactly widened input (numpy's ufuncs; scipy's erf; ``1/(1 + exp(-x))`` for
sigmoid), whose error we take to be at most K = 16 float64 ulps (numpy and glibc document
1-4); RN32(y) is the correctly rounded float32 result unless a float32 midpoint (the overflow
threshold is one) lies within K ulps of y -- then, and only then (a few hundred inputs per
function), the result is computed from mpmath by ``cr_oracle`` (exact rounding onto the
float32 grid, no float64 in between). NaN results are compared by class, the rest
bitwise. The counts and the time are printed (benchmarks/results/accuracy.md).

    GRAD_SLOW=1 GRAD_TEST_BACKEND=cpu pytest packages/gtensor/tests/test_crmath_exhaustive.py
"""

from __future__ import annotations

import time

import gtensor
import numpy as np
import pytest
from cr_oracle import correctly_rounded
from test_crmath import MEASURED

K = 16  # the float64 reference's error bound, in float64 ulps
CHUNK = 1 << 22


def _ref64(name: str):
    """The platform's float64 function."""
    if name == "erf":
        sp = pytest.importorskip("scipy.special")
        return sp.erf
    if name == "sigmoid":
        return lambda x: 1.0 / (1.0 + np.exp(-x))
    return getattr(np, name)


def ambiguous(y: np.ndarray) -> np.ndarray:
    """Where a float32 midpoint (or the overflow threshold) may lie within K ulps of y."""
    a = np.abs(y)
    with np.errstate(all="ignore"):
        _, e = np.frexp(a)  # 2^(e-1) <= a < 2^e
        g = np.ldexp(1.0, np.maximum(e - 24, -149))  # float32 spacing at a
        t = a / g  # exact
        frac = np.abs((t - np.floor(t)) - 0.5)
        ulp64 = np.ldexp(1.0, e - 53) / g  # y's float64 ulp, in units of g
        near = frac <= K * ulp64
    return np.isfinite(y) & near


def reference32(name: str, x32: np.ndarray) -> tuple[np.ndarray, int]:
    """The correctly rounded float32 results of ``name`` on ``x32`` (see the module), and how
    many came from mpmath."""
    x = x32.astype(np.float64)
    with np.errstate(all="ignore"):
        y = _ref64(name)(x)
        out = y.astype(np.float32)
    amb = np.flatnonzero(ambiguous(y) & np.isfinite(x))
    for i in amb:
        out[i] = correctly_rounded(name, float(x[i]), np.float32)
    return out, len(amb)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "log1p", "expm1",
                                  "sin", "cos"])
def test_every_float32_input(name):
    be = gtensor.backend("cpu")
    op = getattr(be, name)
    t0 = time.perf_counter()
    bad, resolved = 0, 0
    for start in range(0, 1 << 32, CHUNK):
        bits = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32)
        x32 = bits.view(np.float32)
        got = be.to_numpy(op(be.asarray(x32)))
        want, n_mp = reference32(name, x32)
        resolved += n_mp
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        bad += int((~same).sum())
        if bad:
            i = int(np.flatnonzero(~same)[0])
            pytest.fail(f"{name}({float(x32[i])!r}): got {float(got[i])!r}, want "
                        f"{float(want[i])!r}")
    MEASURED.append(f"{name} float32: all 2^32 inputs on cpu, {bad} not correctly rounded "
                    f"({resolved} decided by mpmath), {time.perf_counter() - t0:.0f} s")


def _dd_stage(name: str):
    """The float32 function of ``name`` and its double-double stage (``gt_<name>_dd_f32``: the
    former float32 function, checked over every input above before the first stage)."""
    from gtensor.scalar import crmath

    f32 = crmath.BY_NAME[name].f32
    dd = [fn for fn in f32.dependencies() if fn.cname == f"gt_{name}_dd_f32"]
    assert len(dd) == 1, f"{name}: no double-double stage among {f32.dependencies()}"
    return f32, dd[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exp", "erf", "sigmoid", "sin", "cos"])
def test_float32_first_stage_is_the_double_double_stage(name):
    """Every float32 input: the function with its plain-double first stage gives the bits of
    its double-double stage alone (compiled for the cpu, both threads): the first stage's
    rounding test never accepts a result the double-double stage would round otherwise."""
    from gtensor.kernels import Kernel, params
    from gtensor.runtime.cpu import CpuModule
    from gtensor.scalar.dsl import device_sources

    new, old = _dd_stage(name)
    body = (f"    gtcpu::parallel_for(n, 64, [=](long long lo, long long hi) {{\n"
            f"        for (long long i = lo; i < hi; ++i) {{\n"
            f"            y[i] = {new.cname}(x[i]);\n"
            f"            z[i] = {old.cname}((double)x[i]);\n        }}\n    }});")
    k = Kernel(f"k_first_stage_{name}", params("const float* x, float* y, float* z, long long n"),
               body)
    module = CpuModule([k], device_sources([new, old]) + "\n" + k.source())
    t0 = time.perf_counter()
    y, z = np.empty(CHUNK, np.float32), np.empty(CHUNK, np.float32)
    for start in range(0, 1 << 32, CHUNK):
        x32 = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        module.launch(k, 1, 1, [x32, y, z, np.int64(CHUNK)])
        same = (y.view(np.uint32) == z.view(np.uint32)) | (np.isnan(y) & np.isnan(z))
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            pytest.fail(f"{name}({float(x32[i])!r}): first stage {float(y[i])!r}, "
                        f"double-double stage {float(z[i])!r}")
    MEASURED.append(f"{name} float32: all 2^32 inputs, the first stage gives the double-double "
                    f"stage's bits on every one, {time.perf_counter() - t0:.0f} s")
