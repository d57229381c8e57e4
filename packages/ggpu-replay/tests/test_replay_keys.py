"""Capture that users get right: key inputs named by the module that owns them, one call
(``advance_keys``) refreshing them all with the eager run's keys, per-shape constants held, and
``set_input`` running the eager ops' own input checks (same messages)."""

from __future__ import annotations

import sys
from pathlib import Path

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import StaleInputError, capture
from gtensor.testing import bits_equal

STEPS = 10


class _Net(g.nn.Module):
    """Three Dropout layers (their keys from the tape's stream), one of them nested."""

    def __init__(self, tp: g.Tape) -> None:
        self.l1 = g.nn.Linear(tp, 4, 8)
        self.d1 = g.nn.Dropout(0.3)
        self.blocks = g.nn.ModuleDict({"mid": g.nn.Sequential(g.nn.Linear(tp, 8, 8),
                                                              g.nn.Dropout(0.2))})
        self.d2 = g.nn.Dropout(0.1)
        self.out = g.nn.Linear(tp, 8, 3)

    def forward(self, x):
        h = g.tanh(self.blocks["mid"](g.tanh(self.d1(self.l1(x)))))
        return self.out(self.d2(h))


NAMES = ["d1", "blocks.mid.1", "d2"]


def _build(tp: g.Tape) -> _Net:
    return _Net(tp)


def _drops(m: _Net) -> dict[str, g.nn.Dropout]:
    return dict(zip(NAMES, (m.d1, m.blocks["mid"].layers[1], m.d2)))


def _data(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(6, 4)), rng.integers(0, 3, 6)) for _ in range(steps)]


def _eager(data: list) -> tuple[list[float], list[np.ndarray]]:
    tp = g.Tape("numpy", seed=3)
    m = _build(tp)
    opt = gopt.Adam(m.parameters(), lr=1e-2)
    losses = []
    for x, y in data:
        with tp.episode():
            loss = g.cross_entropy(m(tp.const(x)), y)
            tp.backward(loss)
            opt.step()
            losses.append(loss.item())
    return losses, [p.numpy() for p in m.parameters()]


def _captured(device: str, data: list, reset: bool) -> tuple[list[float], list, object]:
    """The same run captured; ``reset``: the capture's forward is not a step (the layers'
    counters put back, every step advances), else step 0 reuses the captured keys."""
    tp = g.Tape("numpy", seed=3)
    m = _build(tp)
    drops = list(_drops(m).values())
    x = tp.const(data[0][0], name="x")
    loss = g.cross_entropy(m(x), data[0][1])
    if reset:
        for d in drops:
            d.calls = 0
    prog = capture(tp, loss, backend=device, model=m)
    dopt = prog.adam(m.parameters(), lr=1e-2)
    losses = []
    for s, (xb, yb) in enumerate(data):
        if s or reset:
            prog.advance_keys()
        prog.set_input("x", xb)
        prog.set_input("labels", yb)
        prog.step(dopt)
        losses.append(prog.loss())
    prog.sync_params(tp)
    assert [d.calls for d in drops] == [STEPS] * 3  # one counter: eager and program
    return losses, [p.numpy() for p in m.parameters()], prog


@pytest.mark.parametrize("reset", [False, True])
def test_three_dropout_layers_advanced_equal_the_eager_run(device, reset):
    data = _data()
    want_losses, want = _eager(data)
    got_losses, got, prog = _captured(device, data, reset)
    assert bits_equal(np.array(got_losses), np.array(want_losses))
    for a, b in zip(got, want):
        assert bits_equal(a, b)
    # named by the modules' paths; nothing else to refresh
    assert list(prog.inputs) == ["x", *NAMES, "labels"]
    assert set(prog.key_inputs) == set(NAMES)
    assert prog.constants == {}


def test_advance_keys_returns_each_layers_next_fold(device):
    data = _data(2)
    tp = g.Tape("numpy", seed=3)
    m = _build(tp)
    loss = g.cross_entropy(m(tp.const(data[0][0], name="x")), data[0][1])
    prog = capture(tp, loss, backend=device, model=m)
    drops = _drops(m)
    got = prog.advance_keys()
    assert got == {name: d.key.fold(1) for name, d in drops.items()}
    for name, d in drops.items():
        assert np.array_equal(prog.value(prog.inputs[name]), d.key.fold(1).array())


def test_a_hand_set_or_stale_key_is_refused(device):
    data = _data(3)
    tp = g.Tape("numpy", seed=3)
    m = _build(tp)
    loss = g.cross_entropy(m(tp.const(data[0][0], name="x")), data[0][1])
    prog = capture(tp, loss, backend=device, model=m)
    dopt = prog.adam(m.parameters(), lr=1e-2)
    before = prog.value(prog.inputs["d2"])
    right = m.d2.key.fold(1)
    for key in (g.rng.key(7), right):  # a wrong key, and even the right one: by hand, no
        with pytest.raises(ValueError, match=r"key input 'd2' belongs to the Dropout at 'd2': "
                                             r"prog.advance_keys\(\)"):
            prog.set_input("d2", key)
    assert bits_equal(prog.value(prog.inputs["d2"]), before)
    assert m.d2.calls == 1  # nothing drawn
    prog.set_input("x", data[0][0])
    prog.step(dopt)
    prog.set_input("x", data[1][0])
    with pytest.raises(StaleInputError, match=r"\['d1', 'blocks.mid.1', 'd2'\] were not "
                                              r"refreshed.*advance_keys"):
        prog.step(dopt)
    prog.hold_input("d2")  # reuse one layer's masks on purpose; the others advance
    prog.advance_keys()
    prog.step(dopt)
    assert bits_equal(prog.value(prog.inputs["d2"]), before)
    assert m.d1.calls == 2 and m.d2.calls == 1


def test_keys_without_a_model_keep_their_tape_names_and_still_advance(device):
    data = _data(2)
    tp = g.Tape("numpy", seed=3)
    m = _build(tp)
    loss = g.cross_entropy(m(tp.const(data[0][0], name="x")), data[0][1])
    prog = capture(tp, loss, backend=device)
    keys = [k for k in prog.inputs if k.startswith("rng_key")]
    assert len(keys) == 3 and set(prog.key_inputs) == set(keys)
    assert set(prog.advance_keys()) == set(keys)
    with pytest.raises(TypeError, match="capture: model is list"):
        capture(tp, loss, backend=device, model=[m])


def test_multihead_attention_dropout_is_named_and_advanced(device):
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(2, 5, 8)) for _ in range(4)]

    def run(captured: bool) -> list[float]:
        tp = g.Tape("numpy", seed=5)
        net = g.nn.ModuleDict({"attn": g.nn.MultiheadAttention(tp, 8, 2, dropout=0.25)})
        opt_params = list(net.parameters())
        x = tp.const(xs[0], name="x")

        def loss_of(v):
            out, _ = net["attn"](v, v, v, need_weights=False, is_causal=True)
            return g.mse(out, tp.const(np.zeros((2, 5, 8)), name="t"))

        if not captured:
            opt = gopt.SGD(opt_params, lr=0.1)
            got = []
            for xb in xs:
                with tp.episode():
                    loss = loss_of(tp.const(xb))
                    tp.backward(loss)
                    opt.step()
                    got.append(loss.item())
            return got
        prog = capture(tp, loss_of(x), backend=device, model=net)
        assert list(prog.inputs) == ["x", "attn", "t"]
        assert len(prog.constants) == 2  # the causal mask and its -inf fill
        prog.hold_input("t")
        dopt = prog.sgd(opt_params, lr=0.1)
        got = []
        for s, xb in enumerate(xs):
            if s:
                prog.advance_keys()
            prog.set_input("x", xb)
            prog.step(dopt)
            got.append(prog.loss())
        return got

    assert bits_equal(np.array(run(True)), np.array(run(False)))


# ---------------------------------------------------------------- the input checks
def _labels_program(device: str, ignore: int | None):
    rng = np.random.default_rng(2)
    tp = g.Tape("numpy")
    w = tp.param(rng.normal(size=(3, 4)))
    x = tp.const(rng.normal(size=(5, 3)), name="x")
    loss = g.cross_entropy(x @ w, np.array([0, 1, 2, 3, 1]), ignore_index=ignore)
    return tp, w, x, capture(tp, loss, backend=device)


@pytest.mark.parametrize("ignore", [None, -100])
def test_negative_labels_are_refused_as_eager_refuses_them(device, ignore):
    tp, w, x, prog = _labels_program(device, ignore)
    before = prog.value(prog.inputs["labels"])
    bad = np.array([0, 1, -1, 3, 1])
    with pytest.raises(ValueError) as eager:
        g.cross_entropy(x @ w, bad, ignore_index=ignore)
    with pytest.raises(ValueError) as replay:
        prog.set_input("labels", bad)
    assert str(replay.value).endswith(str(eager.value))  # the one check, its message
    assert "cross_entropy: labels must lie in [0, 4)" in str(eager.value)
    assert bits_equal(prog.value(prog.inputs["labels"]), before)


def test_ignore_index_is_honoured_by_the_program(device):
    tp, w, x, prog = _labels_program(device, -100)
    X = np.random.default_rng(3).normal(size=(5, 3))
    labels = np.array([2, -100, 0, -100, 3])
    prog.set_input("x", X)
    prog.set_input("labels", labels)
    prog.forward()
    prog.backward()
    fresh = g.Tape("numpy")
    fw = fresh.param(w.numpy())
    ref = g.cross_entropy(fresh.const(X) @ fw, labels, ignore_index=-100)
    fresh.backward(ref)
    assert prog.loss() == ref.item()
    assert bits_equal(prog.grad(w), fresh.grad(fw))
    with pytest.raises(ValueError, match=r"must lie in \[0, 4\) or equal ignore_index -100; "
                                         r"got \[-1, 3\]"):
        prog.set_input("labels", np.array([2, -1, 0, -100, 3]))


def test_negative_and_large_embedding_ids_are_refused_as_eager_refuses_them(device):
    tp = g.Tape("numpy")
    emb = g.nn.Embedding(tp, 6, 3, key=g.rng.key(0))
    loss = g.sum(emb(np.array([[0, 5], [2, 1]])))
    prog = capture(tp, loss, backend=device)
    before = prog.value(prog.inputs["ids"])
    for bad in (np.array([[0, -1], [2, 1]]), np.array([[0, 6], [2, 1]])):
        with pytest.raises(ValueError) as eager:
            emb(bad)
        with pytest.raises(ValueError) as replay:
            prog.set_input("ids", bad)
        assert "Embedding: ids must lie in [0, 6)" in str(eager.value)
        assert str(replay.value).endswith(str(eager.value))
    assert bits_equal(prog.value(prog.inputs["ids"]), before)
    # the functional form has the same rule; g.take keeps numpy's [-n, n)
    w = tp.param(np.arange(12.0).reshape(6, 2))
    with pytest.raises(ValueError, match=r"embedding: ids must lie in \[0, 6\); got \[-1, 2\]"):
        g.embedding(w, np.array([2, -1]))
    assert g.take(w, np.array([-1]), 0).numpy().tolist() == [[10.0, 11.0]]


# ---------------------------------------------------------------- a ported GPT with dropout
def _gpt():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gtape" / "tests"))
    from torch_gpt import GPT, GPTConfig

    torch.manual_seed(1)
    return GPT(GPTConfig(dropout=0.2, bias=False)).double()


def _gpt_batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        tgt = rng.integers(0, 11, (3, 7))
        tgt[0, :2] = -1  # nanoGPT's ignore_index
        out.append((rng.integers(0, 11, (3, 7)), tgt))
    return out


def test_a_ported_gpt_with_dropout_captured_trains_bitwise_as_eager(device):
    steps = 6
    batches = _gpt_batches(steps)
    with g.Tape("numpy") as tp:
        gm = g.nn.from_torch(_gpt(), tp)
        opt = gopt.AdamW(gm.parameters(), lr=3e-2)
        want = []
        for idx, tgt in batches:
            with tp.episode():
                _, loss = gm(idx, tgt)
                tp.backward(loss)
                opt.step()
                want.append(loss.item())
        want_params = [p.numpy() for p in gm.parameters()]
    with g.Tape("numpy") as tp:
        gm = g.nn.from_torch(_gpt(), tp)
        _, loss = gm(*batches[0])
        prog = capture(tp, loss, backend=device, model=gm)
        drops = ["transformer.drop"] + [f"transformer.h.{i}.{m}" for i in range(2) for m in
                                         ("attn.attn_dropout", "attn.resid_dropout",
                                          "mlp.dropout")]
        # the token ids, the labels and the keys; positions, masks and -inf are held
        assert list(prog.inputs) == ["ids", *drops, "labels"], list(prog.inputs)
        # the position ids; per block the mask and its -inf (the LayerNorms' 1 / sd is inside
        # their ln_normalize op since 2026-12-05: no 1.0 constants)
        assert len(prog.constants) == 5, list(prog.constants)
        dopt = prog.adamw(gm.parameters(), lr=3e-2)
        got = []
        for s, (idx, tgt) in enumerate(batches):
            if s:
                prog.advance_keys()
            prog.set_input("ids", idx)
            prog.set_input("labels", tgt.reshape(-1, 1))
            prog.step(dopt)
            got.append(prog.loss())
        prog.sync_params(tp)
        got_params = [p.numpy() for p in gm.parameters()]
    assert bits_equal(np.array(got), np.array(want))
    for a, b in zip(got_params, want_params):
        assert bits_equal(a, b)


def test_a_ported_modules_functional_keys_are_named_path_hash_j(device):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return F.dropout(F.dropout(self.lin(x), 0.3), 0.2)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Twice()

        def forward(self, x):
            return (self.body(x) ** 2).mean()

    torch.manual_seed(0)
    net = Net().double()
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(3, 4)) for _ in range(4)]
    eager = []
    with g.Tape("numpy") as tp:
        gm = g.nn.from_torch(net, tp)
        opt = gopt.SGD(gm.parameters(), lr=0.1)
        for xb in xs:
            with tp.episode():
                loss = gm(xb)
                tp.backward(loss)
                opt.step()
                eager.append(loss.item())
    with g.Tape("numpy") as tp:
        gm = g.nn.from_torch(net, tp)
        x = tp.const(xs[0], name="x")
        prog = capture(tp, gm(x), backend=device, model=gm)
        assert list(prog.inputs) == ["x", "body#0", "body#1"]
        dopt = prog.sgd(gm.parameters(), lr=0.1)
        got = []
        for s, xb in enumerate(xs):
            if s:
                prog.advance_keys()
            prog.set_input("x", xb)
            prog.step(dopt)
            got.append(prog.loss())
    assert bits_equal(np.array(got), np.array(eager))
