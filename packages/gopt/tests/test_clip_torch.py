"""``set_clip(max_norm, rule="torch")``: torch.nn.utils.clip_grad_norm_'s coefficient, bit for
bit, given the norm.

torch computes ``clip_coef = max_norm / (total_norm + 1e-6)`` with a tensor on the right, which
Python evaluates as ``total_norm.__rtruediv__`` = ``(total_norm + 1e-6).reciprocal() *
max_norm``: two roundings, not one correctly rounded division. Then ``clamp(max=1.0)``, and the
gradients are multiplied by it always. The hand computation below is that, one rounding per
operation in the tape's dtype; the premises check that the 1e-6 is visible (the norm just under
max_norm, so the coefficient is < 1 where the default rule gives exactly 1) and that the
reciprocal form is not the one-division form for the chosen threshold.
"""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gopt import SGD, AdamW
from gopt_testutil import f32
from gtensor.testing import bits_equal

LRS = (0.5, 0.25)  # two groups: the clip is global over both


def _rnd(dtype: str):
    return f32 if dtype == "float32" else (lambda x: x)


def hand_coef(norm: float, max_norm: float, dtype: str) -> float:
    """torch's coefficient in the tape's dtype: (1 / (norm + 1e-6)) * max_norm, clamped at 1."""
    r = _rnd(dtype)
    den = r(norm + r(1e-6))
    c = r(r(1.0 / den) * r(max_norm))
    return c if (c < 1.0 or math.isnan(c)) else 1.0


def _inits(dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)  # small values: a norm of ~1e-2, so 1e-6 spans many ulps
    return [(rng.standard_normal(s) * 1e-3).astype(dtype) for s in [(3, 4), (4,)]]


def _step(bname: str, dtype: str, max_norm: float, rule: str = "torch"):
    """One SGD step on sum(p*p) (gradient exactly 2p), two groups, global clip."""
    tp = g.Tape(bname, dtype)
    ps = [tp.param(x) for x in _inits(dtype)]
    opt = SGD([{"params": [ps[0]], "lr": LRS[0]}, {"params": [ps[1]], "lr": LRS[1]}], lr=0.1)
    opt.set_clip(max_norm, rule=rule)
    tp.backward(g.sum(ps[0] * ps[0]) + g.sum(ps[1] * ps[1]))
    opt.step()
    return [tp.backend.to_numpy(tp.value(p)).copy() for p in ps], opt.last_norm


def _threshold(norm: float, dtype: str) -> float:
    """A max_norm just above the norm (norm < max_norm < norm + 1e-6 in the dtype) where the
    reciprocal form and the one-division form of the coefficient differ."""
    r = _rnd(dtype)
    for k in range(1, 200):
        m = r(norm + k * 3e-9 + 2e-7)
        c = hand_coef(norm, m, dtype)
        direct = r(r(m) / r(norm + r(1e-6)))
        if norm < m < r(norm + r(1e-6)) and c < 1.0 and c != direct:
            return m
    raise AssertionError("no threshold distinguishes the two forms")  # pragma: no cover


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_rule_coefficient_is_bitwise_the_hand_computation(bname, dtype):
    _, norm = _step(bname, dtype, 1.0)
    m = _threshold(norm, dtype)
    got, norm2 = _step(bname, dtype, m)
    assert norm2 == norm
    c = hand_coef(norm, m, dtype)
    assert c < 1.0  # premise: the 1e-6 is visible (the default rule would give exactly 1)
    r = _rnd(dtype)
    for p0, p1, lr in zip(_inits(dtype), got, LRS):
        want = [r(x - r(r(r(x + x) * c) * r(lr))) for x in p0.astype(np.float64).ravel()]
        assert bits_equal(np.array(want, dtype).reshape(p0.shape), p1), (dtype, c)
    # the default rule leaves the gradient whole here: another result
    plain, _ = _step(bname, dtype, m, rule="gopt")
    assert not bits_equal(plain[0], got[0])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_hand_coefficient_is_torchs_own(dtype):
    """The hand formula against torch's own expression, given the same norm bits."""
    torch = pytest.importorskip("torch")
    tdt = torch.float64 if dtype == "float64" else torch.float32
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(300):
        norm = float(np.asarray(rng.uniform(0.01, 20.0), dtype))
        m = float(np.asarray(norm * rng.uniform(0.5, 1.5), dtype))
        theirs = torch.clamp(m / (torch.tensor(norm, dtype=tdt) + 1e-6), max=1.0).item()
        ours = hand_coef(norm, m, dtype)
        assert ours == theirs, (norm, m, ours, theirs)
        r = _rnd(dtype)
        differs += ours < 1.0 and ours != r(r(m) / r(norm + r(1e-6)))
    assert differs > 0  # premise: the reciprocal form is visible among these


def test_torch_rule_with_adamw_groups_and_state_round_trip(bname, tmp_path):
    """rule="torch" is saved (``clip_rule``) and restored; the default rule saves no key."""
    tp = g.Tape(bname)
    ps = [tp.param(x) for x in _inits("float64")]
    opt = AdamW([{"params": [ps[0]]}, {"params": [ps[1]], "weight_decay": 0.0}], lr=0.01)
    opt.set_clip(0.5, rule="torch")
    assert opt.clip_rule == "torch" and "(torch)" in repr(opt)
    opt.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz", allow_pickle=False) as f:
        assert str(f["clip_rule"]) == "torch"
    other = AdamW([{"params": [ps[0]]}, {"params": [ps[1]], "weight_decay": 0.0}], lr=0.01)
    other.set_clip(0.5)
    assert "clip_rule" not in other.state_dict()
    other.load(tmp_path / "c.npz")
    assert other.clip_rule == "torch" and other.max_norm == 0.5
    with pytest.raises(ValueError, match=r"AdamW.set_clip: rule is 'pytorch' \(a str\); "
                                         r"expected one of \['gopt', 'torch'\]"):
        other.set_clip(1.0, rule="pytorch")
    assert other.clip_rule == "torch" and other.max_norm == 0.5
