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
