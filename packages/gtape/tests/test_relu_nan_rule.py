"""relu's backward at a NaN input is OUR rule (docs/semantics.md): +0.0, since NaN > 0 is
false. PyTorch differs there (its relu passes the gradient through a NaN): pinned both ways so
the doc's claim cannot drift again."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor.testing import bits_equal

X = np.array([np.nan, -1.0, -0.0, 0.0, 2.0])


def test_relu_grad_at_nan_is_zero(bname):
    with g.Tape(bname) as tp:
        w = tp.param(X)
        tp.backward(g.sum(g.relu(w)))
        got = np.asarray(tp.backend.to_numpy(tp.grad(w)))
    assert bits_equal(got, np.array([0.0, 0.0, 0.0, 0.0, 1.0]))


def test_torch_passes_the_gradient_through_a_nan():
    torch = pytest.importorskip("torch", reason="torch is the oracle of this claim")
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    torch.relu(x).sum().backward()
    assert x.grad.numpy().tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
