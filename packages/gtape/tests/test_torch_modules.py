"""torch's module habits on gtape (issue 35): the tape's key stream (default layers never share
weights or masks), containers, apply, buffers, tied weights, ``to``, ``no_grad``, ``nn.init``,
``multinomial``, tensor methods, and ``from_torch`` of a whole GPT (a user's module tree whose
forward runs on Vars)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host, rel_err, report

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_gpt import GPT, GPTConfig  # noqa: E402


# ---------------------------------------------------------------- the key stream
def _weights(layer) -> list[np.ndarray]:
    return [p.numpy() for p in layer.parameters()]


def test_two_default_layers_differ_and_a_rerun_gives_the_same_bits(bname):
    def build(seed):
        with g.Tape(bname, seed=seed) as tp:
            a, b = g.nn.Linear(tp, 4, 4), g.nn.Linear(tp, 4, 4)
            e1, e2 = g.nn.Embedding(tp, 5, 3), g.nn.Embedding(tp, 5, 3)
            c1, c2 = g.nn.Conv2d(tp, 1, 2, 3), g.nn.Conv2d(tp, 1, 2, 3)
            d1, d2 = g.nn.Dropout(0.5, tp=tp), g.nn.Dropout(0.5, tp=tp)
            x = tp.const(np.ones((4, 6)))
            masks = [d1(x).numpy(), d2(x).numpy()]
            return [_weights(m) for m in (a, b, e1, e2, c1, c2)] + [masks], tp.keys_drawn

    first, drawn = build(0)
    again, _ = build(0)
    other, _ = build(1)
    assert drawn == 8
    for pair in ((0, 1), (2, 3), (4, 5)):
        assert not np.array_equal(first[pair[0]][0], first[pair[1]][0])
    assert not np.array_equal(*first[6])  # two dropout layers: two masks
    for x, y in zip(first, again):
        for u, v in zip(x, y):
            assert bits_equal(u, v)
    assert not np.array_equal(first[0][0], other[0][0])  # the seed is part of the identity


def test_the_stream_is_documented_philox_blocks_and_explicit_keys_win():
    tp = g.Tape(seed=7)
    # the n-th stream key: words 0, 1 of the block of key(7) at counter (n, 0, 0, 3)
    from gtensor import philox
    for n in range(3):
        b = philox.block(g.rng.key(7).words, np.array([[n, 0, 0, 3]], np.uint64))
        assert tp.next_key() == g.rng.Key(int(b[0, 0]), int(b[0, 1]))
    k = g.rng.key(11)
    lin = g.nn.Linear(tp, 3, 2, key=k)
    assert tp.keys_drawn == 3  # an explicit key takes nothing from the stream
    want = g.nn.uniform_init(k.split(2)[0], (2, 3), g.nn.kaiming_bound(3))
    assert bits_equal(lin.weight.numpy(), want)
    with pytest.raises(TypeError, match="both key and seed were given"):
        g.nn.Linear(tp, 3, 2, key=k, seed=1)
    with pytest.raises(TypeError, match="seed is"):
        g.Tape(seed=-1)


def test_dropout_key_assignment_takes_effect_at_the_next_forward():
    with g.Tape() as tp:
        x = tp.const(np.ones((8, 8)))
        d = g.nn.Dropout(0.5, key=1)
        d(x)
        d.key = g.rng.key(2)  # the old key's cached folds must not be used
        got = d(x).numpy()
        want = g.dropout(x, 0.5, g.rng.key(2).fold(1)).numpy()
        assert bits_equal(got, want)
        lazy = g.nn.Dropout(0.5)  # no key, no tape: the input tape's next key at first use
        assert not lazy.bound
        n = tp.keys_drawn
        lazy(x)
        assert lazy.bound and tp.keys_drawn == n + 1


def test_from_torch_gives_each_dropout_its_own_key():
    net = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Dropout(0.5)).double()
    with g.Tape() as tp:
        m = g.nn.from_torch(net, tp)
        assert m[0].key != m[1].key and tp.keys_drawn == 2
        x = tp.const(np.ones((6, 6)))
        assert not np.array_equal(m[0](x).numpy(), m[1](x).numpy())


def test_nn_init_draws_from_the_stream_in_torchs_formulas():
    with g.Tape(seed=3) as tp:
        w = tp.param(np.zeros((4, 6)))
        key = tp.next_key()
        tp2 = g.Tape(seed=3)
        tp2.next_key()
        g.nn.init.xavier_uniform_(w, key=key)
        want = g.nn.uniform_init(key, (4, 6), math.sqrt(3.0) * math.sqrt(2.0 / 10.0))
        assert bits_equal(w.numpy(), want)
        g.nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # the tape's next key (key 1)
        k1 = tp2.next_key()
        assert bits_equal(w.numpy(), g.nn.uniform_init(k1, (4, 6), g.nn.kaiming_bound(6)))
        g.nn.init.normal_(w, mean=1.0, std=0.5, key=4)
        assert bits_equal(w.numpy(), 0.5 * g.rng.normal(g.rng.key(4), (4, 6)) + 1.0)
        g.nn.init.trunc_normal_(w, std=1.0, a=-0.5, b=0.5, key=5)
        assert np.abs(w.numpy()).max() <= 0.5
        g.nn.init.zeros_(w)
        assert not w.numpy().any()
        with pytest.raises(TypeError, match="expected a param Var"):
            g.nn.init.normal_(tp.const(np.ones(2)))
        with pytest.raises(ValueError, match="at least 2 dims"):
            g.nn.init.xavier_uniform_(tp.param(np.ones(3)))


# ---------------------------------------------------------------- containers and structure
class Net(g.nn.Module):
    def __init__(self, tp):
        self.blocks = g.nn.ModuleList([g.nn.Linear(tp, 3, 3) for _ in range(2)])
        self.heads = g.nn.ModuleDict({"a": g.nn.Linear(tp, 3, 1), "b": g.nn.Linear(tp, 3, 2)})
        self.register_buffer("scale", np.array([2.0]))
        self.register_buffer("tmp", np.zeros(1), persistent=False)

    def forward(self, x, which="a"):
        for block in self.blocks:
            x = g.relu(block(x))
        return self.heads[which](x) * self.scale[0]


def test_containers_apply_buffers_and_names():
    with g.Tape() as tp:
        net = Net(tp)
        names = [n for n, _ in net.named_parameters()]
        assert names == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                         "heads.a.weight", "heads.a.bias", "heads.b.weight", "heads.b.bias"]
        assert list(net.state_dict()) == ["scale", *names]  # torch's order; tmp not persistent
        assert [n for n, _ in net.named_modules()] == ["", "blocks", "blocks.0", "blocks.1",
                                                        "heads", "heads.a", "heads.b"]
        seen = []
        net.apply(lambda m: seen.append(type(m).__name__))
        assert seen == ["Linear", "Linear", "ModuleList", "Linear", "Linear", "ModuleDict", "Net"]
        assert net(tp.const(np.ones((2, 3))), which="b").shape == (2, 2)
        sd = net.state_dict()
        sd["scale"] = np.array([3.0])
        net.load_state_dict(sd)
        assert net.scale.tolist() == [3.0]
        with pytest.raises(NotImplementedError, match="iterate it"):
            net.blocks(tp.const(np.ones(3)))


def test_tied_weights_stay_one_param_and_load_consistently():
    with g.Tape() as tp:
        emb = g.nn.Embedding(tp, 5, 3)
        head = g.nn.Linear(tp, 3, 5, bias=False)

        class Tied(g.nn.Module):
            def __init__(self):
                self.emb, self.head = emb, head
                self.head.weight = self.emb.weight

        m = Tied()
        assert [n for n, _ in m.named_parameters()] == ["emb.weight"]
        sd = m.state_dict()
        assert list(sd) == ["emb.weight", "head.weight"]
        sd = {k: v + 1 for k, v in sd.items()}
        m.load_state_dict(sd)
        assert bits_equal(m.head.weight.numpy(), sd["emb.weight"])
        sd["head.weight"] = sd["head.weight"] + 1
        before = m.emb.weight.numpy()
        with pytest.raises(ValueError, match="one tied param but the state gives them different"):
            m.load_state_dict(sd)
        assert bits_equal(m.emb.weight.numpy(), before)


def test_to_float32_copies_onto_a_new_tape_and_keeps_ties_and_keys():
    with g.Tape("numpy", seed=4) as tp:
        net = Net(tp)
        drop = g.nn.Sequential(g.nn.Linear(tp, 3, 3), g.nn.Dropout(0.5, tp=tp))
        m32 = net.to("float32")
        assert m32.tape.dtype == np.float32 and m32.tape.seed == 4 and net.tape is tp
        for (n1, p1), (n2, p2) in zip(net.named_parameters(), m32.named_parameters()):
            assert n1 == n2 and bits_equal(p2.numpy(), p1.numpy().astype(np.float32))
        d32 = drop.to(m32.tape)
        assert d32[1].key == drop[1].key and d32.tape is m32.tape
        with pytest.raises(TypeError, match="expected a dtype"):
            net.to("float16")


def test_no_grad_records_nothing_for_backward_and_does_not_grow():
    with g.Tape() as tp:
        lin = g.nn.Linear(tp, 3, 2)
        x = tp.const(np.ones((4, 3)))
        with tp.no_grad():
            y = lin(x)
            with pytest.raises(RuntimeError, match="inside tp.no_grad"):
                tp.backward(g.sum(y))
        assert not y.requires_grad
        n = len(tp)
        for _ in range(3):
            with tp.no_grad():
                z = g.softmax(lin(x), dim=-1)
            assert len(tp) == n and z.alive
        assert not y.alive
        loss = g.sum(lin(x))  # recording after the block: the block is kept
        tp.backward(loss)
        assert np.array_equal(tp.grad(lin.bias), [4.0, 4.0])


def test_multinomial_follows_its_written_rule():
    probs = np.array([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]])
    key = g.rng.key(3)
    got = g.multinomial(probs, 5, replacement=True, key=key)
    u = g.rng.uniform(key, (2, 5))
    for r in range(2):
        cum = np.cumsum(probs[r])
        for j in range(5):
            assert got[r, j] == int(np.nonzero(cum > u[r, j] * cum[-1])[0][0])
    assert (got[1] == 2).all() and (got != 1).all()
    picks = g.multinomial(probs[0], 3, key=key)  # without replacement: distinct
    assert sorted(picks.tolist()) == [0, 2, 3]
    with pytest.raises(ValueError, match="only 1 categories"):
        g.multinomial(probs, 2, key=key)
    with pytest.raises(ValueError, match="sums to 0"):
        g.multinomial(np.zeros(3), 1, key=key)


def test_tensor_methods_match_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    with g.Tape() as tp:
        x = tp.const(a)
        assert bits_equal(x.transpose(0, 2).numpy(), a.transpose(2, 1, 0))
        assert bits_equal(x.permute(1, 2, 0).numpy(), a.transpose(1, 2, 0))
        assert bits_equal(x.view(4, -1).numpy(), a.reshape(4, -1))
        assert x.unsqueeze(-1).shape == (2, 3, 4, 1) and x.unsqueeze(1).squeeze(1).shape == a.shape
        assert bits_equal(x.flatten(1).numpy(), a.reshape(2, 12))
        assert [p.shape for p in x.chunk(3, dim=-1)] == [(2, 3, 2), (2, 3, 2)]
        assert bits_equal(x.sum(dim=1, keepdim=True).numpy(), a.sum(1, keepdims=True))
        assert bits_equal(g.cat([x, x], dim=-1).numpy(), np.concatenate([a, a], -1))
        assert bits_equal(g.stack([x, x], dim=1).numpy(), np.stack([a, a], 1))
        assert x.size() == (2, 3, 4) and x.size(-1) == 4 and x.dim() == 3 and x.numel() == 24
        assert bits_equal(x.expand(5, -1, -1, -1).numpy(), np.broadcast_to(a, (5, 2, 3, 4)))
        for key in [(slice(None), [-1], slice(None)), (1, [0, 2]), (slice(None), 2, [1, 3]),
                    (slice(0, 1), slice(None), np.array([[1, 2], [3, 0]]))]:
            assert bits_equal(x[key].numpy(), a[key]), key  # one index array among slices
        with pytest.raises(TypeError, match="separated by a slice"):
            x[0, 1:3, [2]]


def test_an_index_array_among_slices_differentiates_as_take():
    with g.Tape() as tp:
        w = tp.param(np.arange(12.0).reshape(3, 4))
        tp.backward(g.sum(w[:, [-1, 0, -1]] * 2.0))
        assert tp.grad(w).tolist() == [[2.0, 0.0, 0.0, 4.0]] * 3


# ---------------------------------------------------------------- a whole GPT, ported
def _gpt(dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(dropout=dropout)).double()


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 11, (3, 7)), rng.integers(0, 11, (3, 7))


def test_from_torch_runs_a_users_gpt_as_is(bname):
    tm = _gpt()
    idx, tgt = _batch()
    with g.Tape(bname) as tp:
        gm = g.nn.from_torch(tm, tp)
        assert [n for n, _ in gm.named_parameters()] == [n for n, _ in tm.named_parameters()]
        assert list(gm.state_dict()) == list(tm.state_dict())  # buffers and both tied names
        assert gm.transformer.wte.weight is gm.lm_head.weight  # tied: one param
        logits, loss = gm(idx, tgt)
        tp.backward(loss)
        ours = [host(tp, tp.grad(p)) for p in gm.parameters()]
        got_loss = loss.item()
    tl, tloss = tm(torch.from_numpy(idx), torch.from_numpy(tgt))
    tloss.backward()
    err = rel_err(got_loss, tloss.item())
    gerr = max(rel_err(a, p.grad.numpy()) for a, p in zip(ours, tm.parameters()))
    report("ported GPT vs torch", f"loss[{bname}]", err)
    report("ported GPT vs torch", f"grads[{bname}]", gerr)
    assert err <= 1e-14 and gerr <= 1e-12


def test_ported_gpt_dropout_draws_from_each_modules_keys_and_reruns_bitwise(bname):
    def run():
        tm = _gpt(dropout=0.2)
        with g.Tape(bname) as tp:
            gm = g.nn.from_torch(tm, tp)
            idx, tgt = _batch(1)
            out = []
            for _ in range(2):
                with tp.episode():
                    _, loss = gm(idx, tgt)
                    tp.backward(loss)
                    out.append((loss.item(), host(tp, tp.grad(gm.lm_head.weight))))
            return out

    a, b = run(), run()
    assert a[0][0] != a[1][0]  # a fresh mask each step
    for (la, ga), (lb, gb) in zip(a, b):
        assert la == lb and bits_equal(ga, gb)


def test_from_torch_refuses_an_unsupported_leaf_by_path_and_registers_nothing():
    tm = _gpt()
    tm.transformer.h[1].mlp.act = torch.nn.Mish()
    with g.Tape() as tp:
        with pytest.raises(TypeError, match=r"layer 'transformer.h.1.mlp.act' is "
                                            r"torch.nn.Mish, which is not supported"):
            g.nn.from_torch(tm, tp)
        assert len(tp) == 0 and tp.keys_drawn == 0


def test_torch_functions_outside_the_table_name_themselves():
    with g.Tape() as tp:
        x = tp.param(np.ones((2, 3)))
        with pytest.raises(NotImplementedError, match="torch.cumsum"):
            torch.cumsum(x, 0)
        with pytest.raises(ValueError, match="no key is at hand"):
            torch.nn.functional.dropout(x, 0.5)
