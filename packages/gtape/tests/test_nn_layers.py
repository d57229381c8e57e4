"""The gtape.nn layers of issue 21: torch's parameter names, shapes and initial values, the
forward against torch float64, train() / eval()."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest

torch = pytest.importorskip("torch")


def _torch_out(module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("affine,bias", [(True, True), (True, False), (False, False)])
def test_layer_norm_layer_is_torchs(bname, affine, bias):
    tm = torch.nn.LayerNorm(6, eps=1e-5, elementwise_affine=affine, bias=bias).double()
    tp = g.Tape(bname)
    ours = g.nn.LayerNorm(tp, 6, elementwise_affine=affine, bias=bias)
    want = {k: v.numpy() for k, v in tm.state_dict().items()}
    got = ours.state_dict()
    assert list(got) == list(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)  # ones / zeros, as torch
    rng = np.random.default_rng(0)
    if affine:  # trained values: load torch's, compare the forward
        with torch.no_grad():
            for p in tm.parameters():
                p.copy_(torch.from_numpy(rng.normal(size=p.shape)))
        ours.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    x = rng.normal(1.0, 2.0, (3, 4, 6))
    y = ours(tp.const(x)).numpy()
    assert np.max(np.abs(y - _torch_out(tm, x))) <= 1e-14 * max(1.0, np.max(np.abs(y)))


def test_rms_norm_layer_is_torchs(bname):
    tm = torch.nn.RMSNorm(5, eps=1e-6).double()
    tp = g.Tape(bname)
    ours = g.nn.RMSNorm(tp, (5,))
    assert [(k, v.shape) for k, v in ours.named_parameters()] == [("weight", (5,))]
    assert np.array_equal(ours.weight.numpy(), tm.weight.detach().numpy())
    rng = np.random.default_rng(1)
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(rng.normal(size=5)))
    ours.load_state_dict({"weight": tm.weight.detach().numpy()})
    x = rng.normal(size=(7, 5))
    assert np.max(np.abs(ours(tp.const(x)).numpy() - _torch_out(tm, x))) <= 1e-14
    assert g.nn.RMSNorm(tp, 3, elementwise_affine=False).parameters() == []


def test_norm_layer_refusals():
    tp = g.Tape()
    for bad in (0, (2, 3), 2.5, True):
        with pytest.raises(ValueError, match="LayerNorm: normalized_shape is"):
            g.nn.LayerNorm(tp, bad)
    with pytest.raises(ValueError, match="RMSNorm: eps is -1"):
        g.nn.RMSNorm(tp, 3, eps=-1)
    n = len(tp)
    with pytest.raises(ValueError, match=r"layer_norm: weight has shape \(3,\); expected \(4,\)"):
        g.nn.LayerNorm(tp, 3)(tp.const(np.ones((2, 4))))
    assert len(tp) == n + 3  # the two params and the const; nothing else recorded


def test_train_and_eval_reach_every_child():
    tp = g.Tape()
    model = g.nn.Sequential(g.nn.Linear(tp, 3, 4), g.nn.LayerNorm(tp, 4),
                            g.nn.Sequential(g.nn.ReLU(), g.nn.RMSNorm(tp, 4)))
    assert model.training and model[2][1].training
    assert model.eval() is model
    assert not model.training and not model[1].training and not model[2][1].training
    model.train()
    assert model[2][1].training
    with pytest.raises(TypeError, match="Sequential.train: mode is"):
        model.train("no")


def _philox_uniform(key: g.rng.Key, shape, b: float) -> np.ndarray:
    """numpy's own U(-b, b) from Philox(key): what uniform_init promises bit for bit."""
    return np.random.Generator(np.random.Philox(key=key.seed)).uniform(-b, b, shape)


def test_linear_with_a_key_draws_torchs_init_from_gtape_rng():
    tp = g.Tape()
    lin = g.nn.Linear(tp, 7, 3, key=g.rng.key(11))
    kw, kb = g.rng.key(11).split(2)
    b = 1.0 / np.sqrt(7)
    assert lin.weight.shape == (3, 7) and lin.bias.shape == (3,)
    assert lin.weight.numpy().tobytes() == _philox_uniform(kw, (3, 7), b).tobytes()
    assert lin.bias.numpy().tobytes() == _philox_uniform(kb, (3,), b).tobytes()
    same = g.nn.Linear(g.Tape("numpy", "float32"), 7, 3, key=11)  # an int seed is a key
    assert same.weight.numpy().tobytes() == lin.weight.numpy().astype(np.float32).tobytes()
    with pytest.raises(TypeError, match="Linear: key is"):
        g.nn.Linear(tp, 2, 2, key="0")


def test_embedding_is_torchs(bname):
    tp = g.Tape(bname)
    emb = g.nn.Embedding(tp, 6, 3, key=g.rng.key(2))
    (kw,) = g.rng.key(2).split(1)
    assert emb.weight.numpy().tobytes() == g.rng.normal(kw, (6, 3)).tobytes()
    tm = torch.nn.Embedding(6, 3).double()
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(emb.weight.numpy()))
    ids = np.array([[0, 5, 5], [2, 0, 5]])
    gy = np.random.default_rng(0).normal(size=(2, 3, 3))
    y = emb(ids)
    tp.backward(g.sum(y * gy))
    ty = tm(torch.from_numpy(ids))
    (ty * torch.from_numpy(gy)).sum().backward()
    assert y.numpy().tobytes() == ty.detach().numpy().tobytes()  # a gather: exact
    assert np.max(np.abs(tp.grad(emb.weight) - tm.weight.grad.numpy())) <= 1e-15
    with pytest.raises(ValueError, match=r"Embedding: ids must lie in \[0, 6\)"):
        emb(np.array([6]))
    with pytest.raises(TypeError, match="Embedding: ids have dtype float64"):
        emb(np.array([1.0]))


def test_normal_init_is_standard_normal_in_distribution():
    z = g.nn.normal_init(g.rng.key(0), (20000,))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03
