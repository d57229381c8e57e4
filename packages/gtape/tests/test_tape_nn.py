"""Layer helpers, initialisers (as torch defines them) and the losses users expect."""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gtape_testutil import central_fd, host, rel_err


def test_initialiser_bounds_and_seeds():
    w = g.nn.kaiming_uniform(50, 30, seed=1)
    assert w.shape == (50, 30) and np.abs(w).max() <= 1 / math.sqrt(50)
    assert np.abs(w).max() > 0.9 / math.sqrt(50)  # it fills its range
    assert np.array_equal(w, g.nn.kaiming_uniform(50, 30, seed=1))
    assert not np.array_equal(w, g.nn.kaiming_uniform(50, 30, seed=2))
    x = g.nn.xavier_uniform(40, 60, seed=0, gain=2.0)
    bound = 2.0 * math.sqrt(6 / 100)
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.9 * bound
    with pytest.raises(TypeError, match="seed must be an int"):
        g.nn.kaiming_uniform(3, 3, seed=-1)


def test_kaiming_matches_torch_linear_distribution():
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(64, 16)
    bound = float(lin.weight.detach().abs().max())
    assert bound <= 1 / math.sqrt(64)  # torch's own default: the same bound as ours
    ours = g.nn.kaiming_uniform(64, 16)
    assert abs(np.abs(ours).max() - bound) < 0.05 / math.sqrt(64)


def test_linear_and_mlp(bname):
    with g.Tape(bname) as tp:
        lin = g.nn.Linear(tp, 3, 2, seed=0)
        assert [p.shape for p in lin.params] == [(2, 3), (2,)]  # torch's layout
        x = np.arange(12.0).reshape(4, 3)
        y = lin(tp.const(x))
        want = x @ host(tp, tp.value(lin.weight)).T + host(tp, tp.value(lin.bias))
        assert np.allclose(host(tp, tp.value(y)), want, rtol=1e-14)
        nobias = g.nn.Linear(tp, 3, 2, bias=False, init="xavier")
        assert nobias.params == [nobias.weight] and nobias.bias is None
        mlp = g.nn.MLP(tp, [3, 8, 8, 1], activation="tanh", final="sigmoid", seed=3)
        out = mlp(tp.const(x))
        assert out.shape == (4, 1) and len(mlp.params) == 6
        assert np.all((host(tp, tp.value(out)) > 0) & (host(tp, tp.value(out)) < 1))
        assert len(tp.params()) == 2 + 1 + 6
    with pytest.raises(ValueError, match="in_features is 0"):
        g.nn.Linear(g.Tape(), 0, 2)
    with pytest.raises(ValueError, match="activation 'gelu'"):
        g.nn.MLP(g.Tape(), [2, 2], activation="gelu")


def _fd_check(bname, loss_fn, x0, *args):
    with g.Tape(bname) as tp:
        p = tp.param(x0)
        loss = loss_fn(p, *args)
        tp.backward(loss)
        grad = host(tp, tp.grad(p))
    with g.Tape(bname) as ft:
        m = ft.mark()

        def f(vals):
            ft.reset_to(m)
            return loss_fn(ft.const(vals[0]), *args).item()

        fd = central_fd(f, [x0], 0)
    return rel_err(grad, fd)


def test_bce_with_logits(bname):
    rng = np.random.default_rng(0)
    z, y = rng.normal(0, 3, (5, 2)), rng.uniform(size=(5, 2))
    with g.Tape(bname) as tp:
        got = g.bce_with_logits(tp.param(z), y).item()
    s = 1 / (1 + np.exp(-z))
    assert abs(got - np.mean(-(y * np.log(s) + (1 - y) * np.log(1 - s)))) < 1e-14
    with g.Tape(bname) as tp:  # stable at any magnitude
        big = g.bce_with_logits(tp.param(np.array([800.0, -800.0])), np.array([1.0, 0.0]))
        assert big.item() == 0.0
    assert _fd_check(bname, g.bce_with_logits, z, y) < 1e-7


def test_cross_entropy(bname):
    rng = np.random.default_rng(1)
    z, labels = rng.normal(size=(6, 4)), np.array([0, 3, 1, 1, 2, 3])
    with g.Tape(bname) as tp:
        got = g.cross_entropy(tp.param(z), labels).item()
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    assert abs(got + np.mean(logp[np.arange(6), labels])) < 1e-14
    assert _fd_check(bname, g.cross_entropy, z, labels) < 1e-7
    with g.Tape(bname) as tp:
        w = tp.param(z)
        with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
            g.cross_entropy(w, np.array([0, 4, 1, 1, 2, 3]))
        with pytest.raises(TypeError, match="expected int class labels"):
            g.cross_entropy(w, np.array([0.0, 1, 1, 1, 2, 3]))
