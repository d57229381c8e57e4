"""layer_norm and rms_norm: the defined order (a loop oracle, bitwise), torch float64 (forward
and the gradients of x, weight, bias), every backend bitwise against numpy, and the refusals.
(Finite differences: rows in test_tape_fd.py.)"""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(max |want|, 1): relative, absolute near zero (torch's weight
    gradient of a size-1 axis is 4e-14 where the exact one, ours, is 0)."""
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1.0))

DTYPES = ["float64", "float32"]


def _rows(dtype: str) -> np.ndarray:
    """(6, 5) rows: random, a constant row (var = 0), zeros, large, tiny, mixed signs."""
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 2.0, (6, 5)) + 0.5
    x[1] = 3.25
    x[2] = 0.0
    x[3] *= 1e150 if dtype == "float64" else 1e18
    x[4] *= 1e-150 if dtype == "float64" else 1e-18
    x[5] = [-1.0, 1.0, -0.0, 2.0, -3.0]
    return x.astype(dtype)


# ---------------------------------------------------------------- the defined order, by loops
def _mean(xs: list, t: type) -> object:
    acc = xs[0]
    for v in xs[1:]:
        acc = t(acc + v)
    return t(acc / t(len(xs)))


def loop_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """The module docstring's order, one scalar operation at a time (numpy scalars round to
    the dtype at each step)."""
    t = x.dtype.type
    out = np.empty_like(x)
    for i, row in enumerate(x):
        mu = _mean(list(row), t)
        d = [t(v - mu) for v in row]
        var = _mean([t(v * v) for v in d], t)
        r = t(t(1.0) / t(np.sqrt(t(var + t(eps)))))
        out[i] = [t(t(t(dv * r) * w[j]) + b[j]) for j, dv in enumerate(d)]
    return out


def loop_rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """rms_norm's order, one scalar operation at a time."""
    t = x.dtype.type
    out = np.empty_like(x)
    for i, row in enumerate(x):
        ms = _mean([t(v * v) for v in row], t)
        r = t(t(1.0) / t(np.sqrt(t(ms + t(eps)))))
        out[i] = [t(w[j] * t(v * r)) for j, v in enumerate(row)]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_is_the_defined_order(dtype):
    x = _rows(dtype)
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=5).astype(dtype), rng.normal(size=5).astype(dtype)
    with g.Tape("numpy", dtype) as tp:
        y = host(tp, tp.value(g.layer_norm(tp.param(x), tp.param(w), tp.param(b))))
    assert bits_equal(y, loop_layer_norm(x, w, b, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_is_the_defined_order(dtype):
    x = _rows(dtype)
    w = np.random.default_rng(2).normal(size=5).astype(dtype)
    with g.Tape("numpy", dtype) as tp:
        y = host(tp, tp.value(g.rms_norm(tp.param(x), tp.param(w))))
    assert bits_equal(y, loop_rms_norm(x, w, 1e-6))


def test_no_weight_is_weight_one_and_no_bias_is_bias_zero():
    """Skipped affine steps: the same bits as weight 1 and bias +0 (x * 1 and y + 0 are exact;
    -0 + +0 would be +0, so a -0 output differs only in the sign of zero -- none here)."""
    x = _rows("float64")[[0, 5]]
    with g.Tape() as tp:
        xv = tp.const(x)
        plain = host(tp, tp.value(g.layer_norm(xv)))
        affine = host(tp, tp.value(g.layer_norm(xv, np.ones(5), np.zeros(5))))
        rms = host(tp, tp.value(g.rms_norm(xv)))
        rms_w = host(tp, tp.value(g.rms_norm(xv, np.ones(5))))
    assert bits_equal(plain, affine) and bits_equal(rms, rms_w)


# ---------------------------------------------------------------- torch float64
torch_cases = [((5, 7), True, True), ((2, 3, 6), True, True), ((4, 9), False, False),
               ((3, 1), True, True), ((1, 4, 2, 8), True, False)]


def _torch_grads(fn, arrays: dict[str, np.ndarray], gy: np.ndarray):
    torch = pytest.importorskip("torch")
    tv = {k: torch.from_numpy(a.copy()).requires_grad_(True) for k, a in arrays.items()}
    y = fn(torch, tv)
    (y * torch.from_numpy(gy)).sum().backward()
    return y.detach().numpy(), {k: t.grad.numpy() for k, t in tv.items()}


def _tape_grads(bname, build, arrays: dict[str, np.ndarray], gy: np.ndarray, dtype="float64"):
    with g.Tape(bname, dtype) as tp:
        v = {k: tp.param(a) for k, a in arrays.items()}
        y = build(v)
        tp.backward(g.sum(y * gy))
        return host(tp, tp.value(y)), {k: host(tp, tp.grad(p)) for k, p in v.items()}


@pytest.mark.parametrize("shape,has_w,has_b", torch_cases)
def test_layer_norm_against_torch_float64(bname, shape, has_w, has_b):
    rng = np.random.default_rng(len(shape) * 10 + shape[-1])
    h = shape[-1]
    arrays = {"x": rng.normal(1.0, 3.0, shape)}
    if has_w:
        arrays["w"] = rng.normal(size=h)
    if has_b:
        arrays["b"] = rng.normal(size=h)
    gy = rng.normal(size=shape)
    ours = _tape_grads(bname, lambda v: g.layer_norm(v["x"], v.get("w"), v.get("b")), arrays, gy)
    theirs = _torch_grads(lambda torch, v: torch.nn.functional.layer_norm(
        v["x"], (h,), v.get("w"), v.get("b"), 1e-5), arrays, gy)
    assert rel_err(ours[0], theirs[0]) <= 1e-14, "forward"
    for k in arrays:
        err = rel_err(ours[1][k], theirs[1][k])
        assert err <= 1e-12, f"grad of {k}: {err:.3e} relative"


@pytest.mark.parametrize("shape,has_w,has_b", torch_cases)
def test_rms_norm_against_torch_float64(bname, shape, has_w, has_b):
    rng = np.random.default_rng(len(shape) * 10 + shape[-1] + 1)
    h = shape[-1]
    arrays = {"x": rng.normal(0.5, 2.0, shape)}
    if has_w:
        arrays["w"] = rng.normal(size=h)
    gy = rng.normal(size=shape)
    ours = _tape_grads(bname, lambda v: g.rms_norm(v["x"], v.get("w")), arrays, gy)
    theirs = _torch_grads(lambda torch, v: torch.nn.functional.rms_norm(
        v["x"], (h,), v.get("w"), 1e-6), arrays, gy)
    assert rel_err(ours[0], theirs[0]) <= 1e-14, "forward"
    for k in arrays:
        err = rel_err(ours[1][k], theirs[1][k])
        assert err <= 1e-12, f"grad of {k}: {err:.3e} relative"


# ---------------------------------------------------------------- every backend, bitwise
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["layer_norm", "rms_norm"])
def test_backend_bitwise_against_numpy(other, which, dtype):
    """Values and every gradient (x, weight, bias) are numpy's bits, special rows included."""
    rng = np.random.default_rng(3)
    arrays = {"x": _rows(dtype), "w": rng.normal(size=5).astype(dtype),
              "b": rng.normal(size=5).astype(dtype)}
    if which == "rms_norm":
        del arrays["b"]
    gy = rng.normal(size=(6, 5)).astype(dtype)
    fn = getattr(g, which)

    def build(v):
        return fn(v["x"], *[v[k] for k in ("w", "b") if k in v])

    want = _tape_grads("numpy", build, arrays, gy, dtype)
    got = _tape_grads(other, build, arrays, gy, dtype)
    assert bits_equal(want[0], got[0]), f"{which} forward on {other}"
    for k in arrays:
        assert bits_equal(want[1][k], got[1][k]), f"{which} grad of {k} on {other}"


def test_special_values_propagate():
    """A row with inf or NaN normalises to NaN (as torch); other rows are untouched."""
    x = _rows("float64")
    x[0, 1], x[2, 3] = np.inf, np.nan
    with g.Tape() as tp:
        xv = tp.const(x)
        ln = host(tp, tp.value(g.layer_norm(xv)))
        rms = host(tp, tp.value(g.rms_norm(xv)))
    assert np.isnan(ln[0]).all() and np.isnan(ln[2]).all() and np.isfinite(ln[[1, 3, 4, 5]]).all()
    assert np.isnan(rms[2]).all() and np.isfinite(rms[[1, 3, 4, 5]]).all()
    assert rms[0, 1] != rms[0, 1] or math.isinf(rms[0, 1])


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("call,exc,words", [
    (lambda tp: g.layer_norm(np.ones((2, 3))), TypeError, "layer_norm: x is"),
    (lambda tp: g.layer_norm(tp.const(np.ones((2, 3))), np.ones(2)), ValueError,
     "layer_norm: weight has shape (2,); expected (3,)"),
    (lambda tp: g.layer_norm(tp.const(np.ones((2, 3))), None, np.ones((1, 3))), ValueError,
     "layer_norm: bias has shape (1, 3)"),
    (lambda tp: g.layer_norm(tp.const(np.ones((2, 3))), eps=-1.0), ValueError,
     "layer_norm: eps is -1.0"),
    (lambda tp: g.rms_norm(tp.const(np.ones((2, 3))), eps=float("nan")), ValueError,
     "rms_norm: eps is nan"),
    (lambda tp: g.rms_norm(tp.const(np.ones((2, 0)))), ValueError, "rms_norm: x has shape (2, 0)"),
    (lambda tp: g.rms_norm(tp.const(np.float64(2.0))), ValueError, "rms_norm: x has shape ()"),
    (lambda tp: g.layer_norm(tp.const(np.ones((2, 3, 0)))), ValueError,
     "layer_norm: x has shape (2, 3, 0)"),
    (lambda tp: g.rms_norm(tp.const(np.ones((2, 3))), eps="1e-6"), ValueError,
     "rms_norm: eps is '1e-6'"),
])
def test_refusals_name_the_function_and_leave_the_tape_alone(call, exc, words):
    with g.Tape() as tp:
        tp.const(np.ones((2, 3)))
        n = len(tp)
        with pytest.raises(exc) as info:
            call(tp)
        assert words in str(info.value)
        assert len(tp) <= n + 1  # at most the const the call itself made


def test_eps_zero_is_accepted_and_exact():
    """eps = 0 is a valid epsilon (torch accepts it): the plain formulas, in the same order."""
    x = _rows("float64")[[0, 3, 5]]
    w, b = np.ones(5), np.zeros(5)
    with g.Tape() as tp:
        xv = tp.const(x)
        rms = host(tp, tp.value(g.rms_norm(xv, eps=0.0)))
        ln = host(tp, tp.value(g.layer_norm(xv, eps=0)))
    assert bits_equal(rms, loop_rms_norm(x, w, 0.0))
    assert bits_equal(ln, loop_layer_norm(x, w, b, 0.0))
