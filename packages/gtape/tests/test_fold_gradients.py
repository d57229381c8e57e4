"""amax / amin / prod gradients on a tape: ties share g evenly (torch's and JAX's rule), a
slot's lone zero gets the product of the others, several zeros give 0; against torch."""

from __future__ import annotations

import gtape
import numpy as np
import pytest
from gtape_testutil import host


def _grad(name: str, x: np.ndarray, axis=1, g=None, bname: str = "numpy") -> np.ndarray:
    with gtape.Tape(bname) as tp:
        p = tp.param(x)
        y = getattr(gtape, name)(p, axis)
        tp.backward(gtape.sum(y * tp.const(np.ones(y.shape) if g is None else g)))
        return host(tp, tp.grad(p))


def test_amax_amin_split_the_gradient_between_ties(bname):
    """torch's and JAX's rule: (g / count) * mask, so tied extremes share g evenly."""
    x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, -0.0, -1.0, -2.0]])
    want = [[0, 0.5, 0.5, 0], [0.25] * 4, [0.5, 0.5, 0, 0]]
    assert _grad("amax", x, bname=bname).tolist() == want
    assert _grad("amin", -x, bname=bname).tolist() == want
    nan = _grad("amax", np.array([[1.0, np.nan, 3.0]]), bname=bname)  # NaN: every share NaN
    assert np.isnan(nan).all()


def test_amax_gradient_matches_torch_with_ties():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, 2.0, np.inf, -np.inf, 0.5]), (5, 6))
    t = torch.tensor(x, requires_grad=True)
    gw = np.random.default_rng(2).standard_normal(5)
    (torch.amax(t, 1) * torch.from_numpy(gw)).sum().backward()
    np.testing.assert_array_equal(_grad("amax", x, 1, gw), t.grad.numpy())


def test_prod_gradient_at_zeros(bname):
    """One zero in a slot: g times the product of the others there, 0 elsewhere in the slot;
    two zeros: 0 everywhere in the slot; none: g * (out / x)."""
    x = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 5.0, 0.0, 1.0], [2.0, 4.0, 0.5, -1.0]])
    assert _grad("prod", x, bname=bname).tolist() == [[0, 24, 0, 0], [0, 0, 0, 0],
                                         [-2.0, -1.0, -8.0, 4.0]]
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    t.prod(1).sum().backward()
    np.testing.assert_array_equal(_grad("prod", x), t.grad.numpy())
