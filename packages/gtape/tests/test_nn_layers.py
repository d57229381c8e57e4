"""The gtape.nn layers of issue 21: torch's parameter names, shapes and initial values, the
forward against torch float64, train() / eval()."""

from __future__ import annotations

import math

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
    for bad in (0, (2, 0), 2.5, True, ()):  # (2, 3): the last two axes (issue 41)
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
    b = 1.0 / math.sqrt(7)
    wb = math.sqrt(3.0) * (math.sqrt(2.0 / 6.0) / math.sqrt(7))  # torch's kaiming expression
    assert lin.weight.shape == (3, 7) and lin.bias.shape == (3,)
    assert lin.weight.numpy().tobytes() == _philox_uniform(kw, (3, 7), wb).tobytes()
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
    gw = tp.backend.to_numpy(tp.grad(emb.weight))
    assert np.max(np.abs(gw - tm.weight.grad.numpy())) <= 1e-15
    with pytest.raises(ValueError, match=r"Embedding: ids must lie in \[0, 6\)"):
        emb(np.array([6]))
    with pytest.raises(TypeError, match="Embedding: ids have dtype float64"):
        emb(np.array([1.0]))


def test_normal_init_is_standard_normal_in_distribution():
    z = g.nn.normal_init(g.rng.key(0), (20000,))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03
    assert z.tobytes() == g.rng.normal(g.rng.key(0), (20000,)).tobytes()
    small = g.nn.normal_init(g.rng.key(0), (20000,), std=0.02)
    assert small.tobytes() == (0.02 * z).tobytes()


def test_conv2d_layer_is_torchs(bname):
    tp = g.Tape(bname)
    conv = g.nn.Conv2d(tp, 3, 8, 3, stride=2, padding=1, key=g.rng.key(5))
    tm = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1).double()
    assert [(k, v.shape) for k, v in conv.named_parameters()] == [
        (k, tuple(v.shape)) for k, v in tm.state_dict().items()]
    kw, kb = g.rng.key(5).split(2)
    # torch's bounds, fan_in 3*3*3: kaiming_uniform(a=sqrt 5)'s expression, and the bias's
    wb = math.sqrt(3.0) * (math.sqrt(2.0 / 6.0) / math.sqrt(27))
    bound = 1.0 / math.sqrt(27)
    assert conv.weight.numpy().tobytes() == _philox_uniform(kw, (8, 3, 3, 3), wb).tobytes()
    assert conv.bias.numpy().tobytes() == _philox_uniform(kb, (8,), bound).tobytes()
    tb = torch.nn.init._calculate_correct_fan(tm.weight, "fan_in")
    assert tb == 27 and np.abs(tm.weight.detach().numpy()).max() <= bound
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in conv.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 6))
    err = np.abs(conv(tp.const(x)).numpy() - _torch_out(tm, x)).max()
    assert err <= 1e-14
    assert g.nn.Conv2d(tp, 1, 2, (3, 3), bias=False).bias is None
    assert g.nn.Conv2d(tp, 1, 2, (3, 2), stride=(2, 1)).weight.shape == (2, 1, 3, 2)
    for bad, words in [(dict(kernel_size=(3, 2, 1)), "Conv2d: kernel_size is (3, 2, 1)"),
                       (dict(padding=-1), "Conv2d: padding is -1; expected an int >= 0"),
                       (dict(stride=0), "Conv2d: stride is 0")]:
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            g.nn.Conv2d(tp, 1, 2, **{"kernel_size": 3, **bad})


def test_max_pool_layer_is_torchs(bname):
    tp = g.Tape(bname)
    x = np.random.default_rng(1).normal(size=(2, 3, 6, 7))
    for k, s in [(2, None), (3, 2)]:
        got = g.nn.MaxPool2d(k, s)(tp.const(x)).numpy()
        want = _torch_out(torch.nn.MaxPool2d(k, s), x)
        assert got.tobytes() == want.tobytes()  # a selection: exact


def test_dropout_layer_fresh_key_per_training_forward(bname):
    tp = g.Tape(bname)
    x = tp.const(np.ones((4, 50)))
    drop = g.nn.Dropout(0.3, key=g.rng.key(9))
    a, b = drop(x).numpy(), drop(x).numpy()
    assert drop.calls == 2 and not np.array_equal(a, b)  # a fresh mask each step
    want = g.dropout(np.ones((4, 50)), 0.3, g.rng.key(9).fold(0))  # the numpy reference
    assert a.tobytes() == np.asarray(want).tobytes()
    assert set(np.unique(a)) <= {0.0, 1.0 / 0.7} and 0.1 < np.mean(a == 0) < 0.5
    n = len(tp)
    assert drop.eval()(x) is x and len(tp) == n and drop.calls == 2  # eval: the identity
    assert g.nn.Dropout(0.0)(x) is x
    for p in (1.0, -0.1, "0.5"):
        with pytest.raises(ValueError, match="Dropout: p is"):
            g.nn.Dropout(p)


def test_dropout_keys_are_key_fold_t_across_its_cache():
    from gtape.layers import FOLDS

    drop = g.nn.Dropout(0.5, key=g.rng.key(2**100 + 3))
    got = [drop.next_key() for _ in range(FOLDS + 3)]
    drop.calls = 7  # a resumed run: the count set back
    got.append(drop.next_key())
    want = [drop.key.fold(t) for t in range(FOLDS + 3)] + [drop.key.fold(7)]
    assert got == want


def test_lenet_names_follow_torch():
    tp = g.Tape()
    k = g.rng.key(0).split(4)
    ours = g.nn.Sequential(
        g.nn.Conv2d(tp, 1, 4, 3, padding=1, key=k[0]), g.nn.ReLU(), g.nn.MaxPool2d(2),
        g.nn.Flatten(), g.nn.Linear(tp, 64, 10, key=k[1]), g.nn.Dropout(0.5, key=k[2]),
        g.nn.LayerNorm(tp, 10), g.nn.Embedding(tp, 3, 10, key=k[3]))
    theirs = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10), torch.nn.Dropout(0.5),
        torch.nn.LayerNorm(10), torch.nn.Embedding(3, 10))
    assert [(k, v.shape) for k, v in ours.named_parameters()] == [
        (k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert "Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=True)" in \
        repr(ours)


def test_from_torch_rebuilds_a_cnn(bname):
    """A torch LeNet-style CNN (conv, pools, dropout, norms, a non-square strided conv) as
    gtape modules with torch's weights, names and mode: the same outputs (eval mode)."""
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=(1, 0)), nn.Tanh(),
                        nn.AvgPool2d(2, 1), nn.Flatten(), nn.LayerNorm(18), nn.Dropout(0.5),
                        nn.Linear(18, 5), nn.RMSNorm(5)).double().eval()
    tp = g.Tape(bname)
    model = g.nn.from_torch(net, tp)
    assert [(k, v.shape) for k, v in model.named_parameters()] == [
        (k, tuple(v.shape)) for k, v in net.state_dict().items()]
    assert not model.training and not model[8].training
    x = np.random.default_rng(0).normal(size=(3, 1, 8, 8))
    y = model(tp.const(x)).numpy()
    want = _torch_out(net, x)
    assert y.shape == want.shape == (3, 5)
    assert np.max(np.abs(y - want)) <= 1e-13
    emb = g.nn.from_torch(nn.Embedding(7, 3).double(), tp)
    assert emb(np.array([1, 6])).numpy().shape == (2, 3)


def test_kaiming_bound_is_torchs_expression():
    """torch.nn.init.kaiming_uniform_'s bound, operation for operation, for several a."""
    for fan_in, a in [(27, math.sqrt(5.0)), (7, 0.0), (100, 0.01), (3, 1.0)]:
        gain = math.sqrt(2.0 / (1 + a ** 2))  # torch's calculate_gain("leaky_relu", a)
        want = math.sqrt(3.0) * (gain / math.sqrt(fan_in))
        assert g.nn.kaiming_bound(fan_in, a) == want
