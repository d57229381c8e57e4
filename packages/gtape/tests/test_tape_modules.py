"""Modules: torch's names and layout, state dicts, safetensors files, from_torch."""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gtape_testutil import host

torch = pytest.importorskip("torch")
X = np.linspace(-1.5, 1.5, 40).reshape(8, 5)


def _model(tp, seed=0):
    return g.nn.Sequential(g.nn.Linear(tp, 5, 7, seed=seed), g.nn.Tanh(),
                           g.nn.Linear(tp, 7, 3, seed=seed + 1), g.nn.ReLU(),
                           g.nn.Linear(tp, 3, 1, seed=seed + 2))


def _sgd(tp, params, lr=0.05):
    """A plain host-side step (gtape's tests do not depend on gopt): p <- p - lr * grad."""
    for p in params:
        tp.set_value(p, host(tp, tp.value(p)) - lr * host(tp, tp.grad(p)))


def _values(tp, params):
    return [host(tp, tp.value(p)).tobytes() for p in params]


def test_linear_is_the_old_layout_transposed_bit_for_bit(bname):
    """Training through Linear's (out, in) weight gives the bits of the former (in, out)
    layout (x @ W + b, b of shape (1, out)), the weight transposed: the documented change.
    (gopt's Adam is elementwise too; the README example checks it end to end.)"""
    ys = np.sin(X[:, :1])
    with g.Tape(bname) as tp, g.Tape(bname) as old:
        lin = g.nn.Linear(tp, 5, 3, seed=4)
        head = g.nn.Linear(tp, 3, 1, seed=5)
        rng4, rng5 = np.random.default_rng(4), np.random.default_rng(5)
        w1 = old.param(g.nn.kaiming_uniform(5, 3, rng4))
        b1 = old.param(rng4.uniform(-1 / math.sqrt(5), 1 / math.sqrt(5), (1, 3)))
        w2 = old.param(g.nn.kaiming_uniform(3, 1, rng5))
        b2 = old.param(rng5.uniform(-1 / math.sqrt(3), 1 / math.sqrt(3), (1, 1)))
        for _ in range(5):
            with tp.episode(), old.episode():
                loss = g.mse(head(g.tanh(lin(tp.const(X)))), ys)
                loss.backward()
                _sgd(tp, tp.params())
                h = g.tanh(old.const(X) @ w1 + b1)
                loss_old = g.mse(h @ w2 + b2, ys)
                loss_old.backward()
                _sgd(old, old.params())
                assert loss.numpy().tobytes() == loss_old.numpy().tobytes()
        for new, was in ((lin.weight, w1), (head.weight, w2)):
            assert new.numpy().tobytes() == np.ascontiguousarray(was.numpy().T).tobytes()
        for new, was in ((lin.bias, b1), (head.bias, b2)):
            assert new.numpy().tobytes() == was.numpy().reshape(-1).tobytes()


def test_names_and_shapes_follow_torch(bname):
    with g.Tape(bname) as tp:
        model = _model(tp)
        net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3),
                                  torch.nn.ReLU(), torch.nn.Linear(3, 1))
        ours = [(k, p.shape) for k, p in model.named_parameters()]
        assert ours == [(k, tuple(v.shape)) for k, v in net.state_dict().items()]
        assert [p.index for p in model.parameters()] == [p.index for p in tp.params()]
        assert list(model.state_dict()) == [k for k, _ in ours]
        mlp = g.nn.MLP(tp, [2, 4, 1])
        assert [k for k, _ in mlp.named_parameters()] == [
            "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
        shared = model[0]
        twice = g.nn.Sequential(shared, g.nn.Tanh(), shared)
        assert [k for k, _ in twice.named_parameters()] == ["0.weight", "0.bias"]
        assert len(model) == 5 and "(1): Tanh()" in repr(model)


def test_state_dict_round_trip_through_a_safetensors_file(bname, tmp_path):
    from safetensors.numpy import load_file

    with g.Tape(bname) as tp:
        model = _model(tp, seed=3)
        sd = model.state_dict()
        path = tmp_path / "m.safetensors"
        assert g.nn.save(model, path) == path
        back = load_file(path)
        assert set(back) == set(sd)
        for k, v in sd.items():
            assert back[k].dtype == v.dtype and back[k].tobytes() == v.tobytes()
        fresh = _model(tp, seed=9)
        x = tp.const(X)
        assert fresh(x).numpy().tobytes() != model(x).numpy().tobytes()
        g.nn.load(fresh, path)
        assert _values(tp, fresh.parameters()) == _values(tp, model.parameters())
        assert fresh(x).numpy().tobytes() == model(x).numpy().tobytes()


def test_a_torch_state_dict_loads_and_gives_torch_outputs(bname):
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3),
                              torch.nn.ReLU(), torch.nn.Linear(3, 1))
    want = net.double()(torch.from_numpy(X)).detach().numpy()
    with g.Tape(bname) as tp:
        model = _model(tp)
        model.load_state_dict({k: v.numpy() for k, v in net.state_dict().items()})
        got = model(tp.const(X)).numpy()
        assert np.max(np.abs(got - want)) <= 1e-15 * np.max(np.abs(want)) * 8
        model.load_state_dict(net.float().state_dict())  # float32 tensors: widened exactly
        w32 = net.state_dict()["0.weight"].numpy()
        assert model[0].weight.numpy().tobytes() == w32.astype(np.float64).tobytes()


@pytest.mark.parametrize("act", ["ReLU", "Tanh", "Sigmoid"])
def test_from_torch_forward_and_gradients_match_torch(bname, act):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 8), getattr(torch.nn, act)(),
                              torch.nn.Sequential(torch.nn.Linear(8, 2), torch.nn.Identity()),
                              torch.nn.Sigmoid()).double()
    x = np.linspace(-2, 2, 24).reshape(4, 2, 3)
    tx = torch.from_numpy(x)
    want = net(tx)
    want.sum().backward()
    with g.Tape(bname) as tp:
        model = g.nn.from_torch(net, tp)
        assert list(model.state_dict()) == list(net.state_dict())
        with tp.episode():
            out = model(tp.const(x))
            assert np.max(np.abs(out.numpy() - want.detach().numpy())) <= 4e-16
            out.sum().backward()
            for (k, p), (tk, tparam) in zip(model.named_parameters(), net.named_parameters()):
                assert k == tk
                ref = tparam.grad.numpy()
                assert np.max(np.abs(host(tp, p.grad) - ref)) <= 1e-14 * np.max(np.abs(ref))


def test_from_torch_refuses_what_it_cannot_rebuild(bname):
    with g.Tape(bname) as tp:
        tp.param(np.ones(2))
        net = torch.nn.Sequential(torch.nn.Linear(3, 3),
                                  torch.nn.Conv2d(2, 2, 3, padding="same"))
        with pytest.raises(TypeError, match=r"layer '1' is torch.nn.Conv2d with "
                           r"padding='same', padding_mode='zeros', which gtape.nn.Conv2d does "
                           r"not support"):
            g.nn.from_torch(net, tp)
        net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.InstanceNorm1d(3))
        with pytest.raises(TypeError, match=r"layer '1' is torch.nn.InstanceNorm1d, which is "
                           r"not supported; supported torch layers: Sequential, ModuleList, "
                           r"ModuleDict, Linear, ReLU"):
            g.nn.from_torch(net, tp)
        for bad, words in [(torch.nn.MaxPool2d(2, return_indices=True), "return_indices=True"),
                           (torch.nn.Embedding(4, 2, padding_idx=0), "padding_idx=0"),
                           (torch.nn.RMSNorm((2, 3)), r"normalized_shape=\(2, 3\)")]:
            with pytest.raises(TypeError, match=words):
                g.nn.from_torch(bad, tp)
        with pytest.raises(TypeError, match="the module is torch.nn.LSTM"):
            g.nn.from_torch(torch.nn.LSTM(2, 2), tp)
        with pytest.raises(TypeError, match="expected a torch.nn.Module"):
            g.nn.from_torch([1, 2], tp)
        assert len(tp) == 1  # nothing registered


def test_load_state_dict_refuses_bad_input_and_changes_nothing(bname):
    with g.Tape(bname) as tp:
        model = _model(tp)
        before = _values(tp, model.parameters())
        sd = model.state_dict()
        good = {k: v * 2 for k, v in sd.items()}
        cases = [
            ({k: v for k, v in good.items() if k != "2.bias"}, ValueError,
             r"missing key\(s\) '2.bias'; the model's keys are '0.weight'"),
            ({**good, "5.weight": np.ones(3)}, ValueError, r"unexpected key\(s\) '5.weight'"),
            ({**good, "0.weight": good["0.weight"].T}, ValueError,
             r"'0.weight' has shape \(5, 7\); the model's param has shape \(7, 5\)"),
            ({**good, "4.bias": np.ones(1, dtype=np.int64)}, TypeError,
             "'4.bias' has dtype int64; expected floating point"),
            ({**good, "4.bias": object()}, TypeError, "'4.bias' has dtype object"),
            ([1, 2], TypeError, "expected a mapping"),
        ]
        for bad, exc, msg in cases:
            with pytest.raises(exc, match=msg):
                model.load_state_dict(bad)
            assert _values(tp, model.parameters()) == before  # all or nothing
        keys = model.load_state_dict({"0.bias": good["0.bias"], "x": np.ones(1)}, strict=False)
        assert keys.missing_keys == [k for k in sd if k != "0.bias"]
        assert keys.unexpected_keys == ["x"]
        assert model[0].bias.numpy().tobytes() == good["0.bias"].tobytes()
    with g.Tape(bname, dtype="float32") as tp32:
        m32 = g.nn.Sequential(g.nn.Linear(tp32, 2, 1))
        with pytest.raises(TypeError, match="'0.weight' is float64 but the tape is float32: "
                           "loading would round"):
            m32.load_state_dict({"0.weight": np.ones((1, 2)), "0.bias": np.ones(1)})


def test_file_errors(bname, tmp_path):
    with g.Tape(bname) as tp:
        model = _model(tp)
        with pytest.raises(FileNotFoundError, match="load: .* is not a file"):
            g.nn.load(model, tmp_path / "nope.safetensors")
        junk = tmp_path / "junk.safetensors"
        junk.write_bytes(b"not a safetensors file at all")
        with pytest.raises(ValueError, match="is not a readable safetensors file"):
            g.nn.load(model, junk)
        with pytest.raises(TypeError, match="save: model is .*expected a gtape.nn Module"):
            g.nn.save({"a": np.ones(1)}, tmp_path / "x.safetensors")
        with pytest.raises(ValueError, match="no parameters"):
            g.nn.save(g.nn.Sequential(g.nn.ReLU()), tmp_path / "x.safetensors")
        assert not (tmp_path / "x.safetensors").exists()
        with pytest.raises(TypeError, match="Sequential: layer 1 is"):
            g.nn.Sequential(g.nn.ReLU(), 3)
        with pytest.raises(ValueError, match="Flatten: start_dim 2"):
            g.nn.Flatten(2)(tp.const(np.ones((2, 2))))
