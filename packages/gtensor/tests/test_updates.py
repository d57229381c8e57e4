"""The in-place optimizer updates (gtensor.ops.updates): bitwise the out-of-place update ops they
replace, special values included, on the backend under test and against numpy; refused calls
write nothing."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.ops.updates import adam_update, adamw_update, sgd_update
from gtensor.testing import bits_equal

SPECIAL = [0.0, -0.0, 1.0, -2.5, 1e-310, -1e-310, 3e38, np.inf, -np.inf, np.nan, 1e-8, 7.0]


def _data(dtype, n=60, seed=0):
    rng = np.random.default_rng(seed)
    m, v, p, g = (rng.standard_normal(n) for _ in range(4))
    v = np.abs(v)
    for a in (m, v, p, g):  # special values at random places
        a[rng.integers(0, n, 8)] = rng.choice(SPECIAL, 8)
    v[:3] = [0.0, -0.0, np.inf]  # sqrt(-0.0) and sqrt(inf) too
    return [a.astype(dtype) for a in (m, v, p, g)]


def _ab(be, xs):
    return [be.asarray(x) for x in xs]


CASES = [(clip, alpha) for clip in (False, True) for alpha in (0.0, 3e-3)]


def _adam_oop(be, m, v, p, g, scale, lr_t, clip, alpha):
    m_new = be.adam_m(m, g, p, scale, 0.9, alpha, clip)
    v_new = be.adam_v(v, g, p, scale, 0.999, alpha, clip)
    return m_new, v_new, be.adam_p(p, m_new, v_new, lr_t, 1e-8)


def _adamw_oop(be, m, v, p, g, scale, s, r, d, clip, alpha):
    m_new = be.adam_m(m, g, p, scale, 0.9, alpha, clip)
    v_new = be.adam_v(v, g, p, scale, 0.999, alpha, clip)
    den = be.adds(be.div(be.sqrt(v_new), r), 1e-8)
    p_new = be.sub(be.mul(p, d), be.div(be.mul(m_new, s), den))
    return m_new, v_new, p_new


def _sgd_oop(be, p, g, scale, lr, clip, alpha):
    gk = be.mul(g, scale) if clip else g
    if alpha != 0.0:
        gk = be.add(gk, be.muls(p, alpha))
    return (be.sgd_p(p, gk, p, lr, 1.0, 0.0, True),)


def _run(be, kind, dtype, clip, alpha):
    """(in-place results, out-of-place results) as numpy arrays."""
    m, v, p, g = _data(dtype)
    zero_d = [be.asarray(np.array(x, dtype)) for x in (0.37, 0.013, 0.99, 0.998)]
    scale, a, b, c = zero_d
    M, V, P, G = _ab(be, (m, v, p, g))
    if kind == "adam":
        want = _adam_oop(be, M, V, P, G, scale, a, clip, alpha)
        run = adam_update(be, M, V, P, G, scale, a, beta1=0.9, beta2=0.999, eps=1e-8,
                          alpha=alpha, clip=clip)
        got = (M, V, P)
    elif kind == "adamw":
        want = _adamw_oop(be, M, V, P, G, scale, a, b, c, clip, alpha)
        run = adamw_update(be, M, V, P, G, scale, a, b, c, beta1=0.9, beta2=0.999, eps=1e-8,
                           alpha=alpha, clip=clip)
        got = (M, V, P)
    else:
        want = _sgd_oop(be, P, G, scale, a, clip, alpha)
        run = sgd_update(be, P, G, scale, a, alpha=alpha, clip=clip)
        got = (P,)
    want = [be.to_numpy(x) for x in want]
    untouched = [be.to_numpy(x) for x in got]
    assert all(bits_equal(x, y) for x, y in zip(untouched, [m, v, p][-len(got):])), \
        "preparing an update must write nothing"
    run()
    return [be.to_numpy(x) for x in got], want


@pytest.mark.parametrize("kind", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("clip,alpha", CASES)
def test_in_place_update_is_the_out_of_place_ops(be, kind, dtype, clip, alpha):
    got, want = _run(be, kind, dtype, clip, alpha)
    for k, (a, b) in enumerate(zip(got, want)):
        assert bits_equal(a, b), f"output {k}: {a} vs {b}"
    assert np.isnan(got[-1]).any() and np.isfinite(got[-1]).any()  # premise: special values


@pytest.mark.parametrize("kind", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_in_place_update_matches_numpy(be, ref, kind, dtype):
    if be.name == "numpy":
        pytest.skip("parity of the numpy reference with itself is vacuous")
    for clip, alpha in CASES:
        got, _ = _run(be, kind, dtype, clip, alpha)
        want, _ = _run(ref, kind, dtype, clip, alpha)
        for k, (a, b) in enumerate(zip(got, want)):
            assert bits_equal(a, b), f"clip={clip} alpha={alpha} output {k}"


def test_refused_calls_write_nothing(be):
    m, v, p, g = _ab(be, _data("float64"))
    scale, lr = be.asarray(np.array(1.0)), be.asarray(np.array(0.1))
    before = [be.to_numpy(x) for x in (m, v, p)]
    kw = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    with pytest.raises(ValueError, match="adam_update: m shares memory with v"):
        adam_update(be, m, m, p, g, scale, lr, **kw)
    with pytest.raises(ValueError, match="adam_update: p has shape"):
        adam_update(be, m, v, be.zeros((3,)), g, scale, lr, **kw)
    with pytest.raises(ValueError, match="adam_update: lr_t has shape"):
        adam_update(be, m, v, p, g, scale, g, **kw)
    with pytest.raises(TypeError, match="adam_update: g has dtype float32"):
        adam_update(be, m, v, p, be.asarray(np.zeros(60, np.float32)), scale, lr, **kw)
    with pytest.raises(TypeError, match="adam_update: m is"):
        adam_update(be, np.zeros(60) if be.name != "numpy" else [0.0], v, p, g, scale, lr, **kw)
    with pytest.raises(TypeError, match="sgd_update: clip is"):
        sgd_update(be, p, g, scale, lr, clip=1)
    with pytest.raises(TypeError, match="sgd_update: alpha is"):
        sgd_update(be, p, g, scale, lr, alpha="0")
    assert all(bits_equal(be.to_numpy(x), b) for x, b in zip((m, v, p), before))
