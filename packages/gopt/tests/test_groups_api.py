"""Parameter groups as torch's: reading and writing ``param_groups``, ``add_param_group``, the
one-group form equal to the tape form (bits and state keys), state round trips, and a
recorded device half that follows per-group lr and AdamW decay writes without re-recording.

Reference for per-group behaviour: without clipping, groups are independent, so a two-group
optimizer is bitwise two one-group optimizers (the API before groups), each given the same
configuration changes.
"""

from __future__ import annotations

import gopt.base
import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam, AdamW
from gopt_testutil import problem, tape_loss
from gtensor.recording import recordable
from gtensor.testing import bits_equal

KINDS = {"sgd": (SGD, {"lr": 0.1}), "adam": (Adam, {"lr": 0.05, "betas": (0.8, 0.95)}),
         "adamw": (AdamW, {"lr": 0.05, "weight_decay": 0.02})}
# per-step writes: (step before which, group, key, value)
WRITES = [(1, 1, "lr", 0.02), (2, 0, "weight_decay", 0.05), (3, 0, "lr", 0.2),
          (3, 1, "weight_decay", 0.0)]
STEPS = 5


def _params(bname: str):
    inits, targets = problem()
    tp = g.Tape(bname)
    return tp, [tp.param(x) for x in inits], targets


def _train(tp, ps, targets, opts, writes, steps=STEPS):
    """The mark/reset loop; ``writes(t)`` applies the configuration changes before step t+1."""
    mark = tp.mark()
    out = []
    for t in range(steps):
        writes(t)
        tp.backward(tape_loss(tp, ps, targets))
        for opt in opts:
            opt.step()
        tp.reset_to(mark)
        out.append([tp.backend.to_numpy(tp.value(p)).copy() for p in ps])
    return out


def _grouped(bname: str, kind: str):
    cls, kw = KINDS[kind]
    tp, ps, targets = _params(bname)
    opt = cls([{"params": [ps[0], ps[2]]}, {"params": [ps[1]], "weight_decay": 0.01}], **kw)

    def writes(t):
        for at, k, key, value in WRITES:
            if at == t:
                opt.param_groups[k][key] = value

    return _train(tp, ps, targets, [opt], writes), opt


def _split(bname: str, kind: str):
    """The reference: one optimizer per group, made the old way (tape + add)."""
    cls, kw = KINDS[kind]
    tp, ps, targets = _params(bname)
    a, b = cls(tp, **kw), cls(tp, **kw)
    a.add([ps[0], ps[2]])
    if kind == "adamw":  # decoupled: the optimizer's own decay
        b.param_groups[0]["weight_decay"] = 0.01
        b.add(ps[1])
    else:  # coupled: the parameter's L2 weight
        b.add(ps[1], 0.01)
    opts = [a, b]

    def writes(t):
        for at, k, key, value in WRITES:
            if at == t:
                if key == "lr":
                    opts[k].lr = value
                elif kind == "adamw":
                    opts[k].param_groups[0]["weight_decay"] = value
                else:  # coupled L2: every parameter's alpha
                    for p in opts[k].params:
                        opts[k].set_alpha(p, value)

    return _train(tp, ps, targets, opts, writes)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_two_groups_with_writes_are_two_optimizers(bname, kind):
    got, _ = _grouped(bname, kind)
    want = _split("numpy", kind)
    for t, (a, b) in enumerate(zip(got, want)):
        for k, (x, y) in enumerate(zip(a, b)):
            assert bits_equal(x, y), f"{kind} step {t + 1} param {k}"


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_recorded_step_follows_lr_and_decay_writes_without_re_record(bname, kind, monkeypatch):
    """On a kernel backend the device half is recorded once: per-group lr writes (and AdamW's
    per-group decay) reach it through buffers. SGD's weight_decay is coupled L2 (a launch
    argument): its writes re-record, as an alpha change always did."""
    real, calls = gopt.base.record, []

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(gopt.base, "record", counted)
    got, opt = _grouped(bname, kind)
    want, _ = _grouped("numpy", kind)
    assert all(bits_equal(x, y) for a, b in zip(got, want) for x, y in zip(a, b))
    if recordable(opt.tape.backend):
        decay_writes = sum(1 for w in WRITES if w[2] == "weight_decay")
        assert len(calls) == (1 if kind == "adamw" else 1 + decay_writes), calls


def test_param_groups_read_as_torch():
    tp, ps, _ = _params("numpy")
    opt = AdamW([{"params": [ps[0]], "weight_decay": 0.1},
                 {"params": iter([ps[1], ps[2]]), "lr": 3e-3, "betas": [0.8, 0.9]}],
                lr=1e-3, eps=1e-7)
    g0, g1 = opt.param_groups
    assert list(g0) == ["params", "lr", "betas", "eps", "weight_decay"] and len(g1) == 5
    assert (g0["lr"], g0["betas"], g0["eps"], g0["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-7,
                                                                       0.1)
    assert (g1["lr"], g1["betas"], g1["eps"], g1["weight_decay"]) == (3e-3, (0.8, 0.9), 1e-7,
                                                                      1e-2)
    assert [p.index for p in g1["params"]] == [ps[1].index, ps[2].index]
    assert [p.index for p in opt.params] == [p.index for p in ps]
    assert "lr" in g0 and "momentum" not in g0 and g0 != g1 and g0 == opt.param_groups[0]
    for grp in opt.param_groups:  # torch's idiom
        grp["lr"] *= 0.5
    assert [grp["lr"] for grp in opt.param_groups] == [5e-4, 1.5e-3]
    assert opt.eps == 1e-7 and "2 groups" in repr(opt)
    with pytest.raises(ValueError, match="AdamW.betas: the 2 parameter groups have different"):
        _ = opt.betas
    sgd = SGD(ps, lr=0.1)
    assert list(sgd.param_groups[0]) == ["params", "lr", "weight_decay"]
    assert sgd.lr == 0.1 and sgd.weight_decay == 0.0


def test_sgd_and_adam_weight_decay_is_each_parameters_alpha():
    tp, ps, _ = _params("numpy")
    opt = Adam([{"params": [ps[0], ps[1]], "weight_decay": 0.1}, {"params": [ps[2]]}])
    assert opt.state_dict()["alpha"].tolist() == [0.1, 0.1, 0.0]
    opt.param_groups[1]["weight_decay"] = 0.3
    assert opt.state_dict()["alpha"].tolist() == [0.1, 0.1, 0.3]
    opt.set_alpha(ps[0], 0.0)  # a per-parameter override, as before groups
    assert opt.state_dict()["alpha"].tolist() == [0.0, 0.1, 0.3]
    assert opt.param_groups[0]["weight_decay"] == 0.1
    legacy = Adam(g.Tape(), weight_decay=0.2)
    w = legacy.tape.param(np.ones(2))
    legacy.add(w)  # add's alpha defaults to the first group's weight_decay
    assert legacy.state_dict()["alpha"].tolist() == [0.2]


def test_new_betas_take_their_powers_after_t_steps():
    tp, ps, targets = _params("numpy")
    opt = Adam([ps[0]], lr=0.1)
    _train(tp, [ps[0]], targets[:1], [opt], lambda t: None, steps=3)
    opt.param_groups[0]["betas"] = (0.5, 0.75)
    state = opt.state_dict()
    assert float(state["host.b1_pow"]) == 0.5 * 0.5 * 0.5
    assert float(state["host.b2_pow"]) == 0.75 * 0.75 * 0.75


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_group_is_the_tape_form_bits_and_state(bname, kind):
    """``cls(params)`` and ``cls(tp); add(params)`` step to the same bits and save the same
    state, key for key (so gverify digests and checkpoints do not move)."""
    cls, kw = KINDS[kind]
    runs = []
    for form in ("params", "tape"):
        tp, ps, targets = _params(bname)
        if form == "params":
            opt = cls(iter(ps), **kw)
        else:
            opt = cls(tp, **kw)
            opt.add(ps)
        opt.set_clip(3.0)
        traj = _train(tp, ps, targets, [opt], lambda t: None, steps=3)
        runs.append((traj, opt.state_dict()))
    (ta, sa), (tb, sb) = runs
    assert sorted(sa) == sorted(sb)
    for k in sa:
        a, b = np.asarray(sa[k]), np.asarray(sb[k])
        assert (a == b) if a.dtype.kind == "U" else bits_equal(a, b), k
    assert all(bits_equal(x, y) for a, b in zip(ta, tb) for x, y in zip(a, b))
    assert not any(k.startswith("group.") or k in ("param_group", "clip_rule") for k in sa)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_group_state_round_trip(bname, kind, tmp_path):
    cls, kw = KINDS[kind]

    def make(lrs):
        tp, ps, targets = _params(bname)
        opt = cls([{"params": [ps[0], ps[2]], "lr": lrs[0], "weight_decay": 0.03},
                   {"params": [ps[1]], "lr": lrs[1]}], **kw)
        opt.set_clip(2.5, rule="torch")
        return tp, ps, targets, opt

    tp, ps, targets, opt = make((0.05, 0.1))
    _train(tp, ps, targets, [opt], lambda t: None, steps=2)
    opt.param_groups[1]["lr"] = 0.07
    opt.save(tmp_path / "c.npz")
    straight = _train(tp, ps, targets, [opt], lambda t: None, steps=3)
    with np.load(tmp_path / "c.npz", allow_pickle=False) as f:
        assert f["param_group"].tolist() == [0, 0, 1] and float(f["group.1.hyper.lr"]) == 0.07
    tp2, ps2, targets2, opt2 = make((0.5, 0.5))
    opt2.set_clip(None)
    opt2.load(tmp_path / "c.npz")
    assert [grp["lr"] for grp in opt2.param_groups] == [0.05, 0.07] and opt2.t == 2
    assert opt2.clip_rule == "torch" and opt2.max_norm == 2.5
    resumed = _train(tp2, ps2, targets2, [opt2], lambda t: None, steps=3)
    assert all(bits_equal(x, y) for a, b in zip(straight, resumed) for x, y in zip(a, b))


def test_add_param_group_on_the_tape_form(bname):
    tp, ps, targets = _params(bname)
    opt = SGD(tp, lr=0.1)
    opt.add(ps[0])
    opt.add_param_group({"params": ps[1], "lr": 0.02})  # one Var, as torch takes it
    opt.add_param_group({"params": [ps[2]], "weight_decay": 0.5})
    assert [(grp["lr"], grp["weight_decay"]) for grp in opt.param_groups] == \
        [(0.1, 0.0), (0.02, 0.0), (0.1, 0.5)]
    got = _train(tp, ps, targets, [opt], lambda t: None, steps=2)
    tp2, ps2, targets2 = _params("numpy")
    ref = [SGD([ps2[0]], lr=0.1), SGD([ps2[1]], lr=0.02), SGD([ps2[2]], lr=0.1,
                                                               weight_decay=0.5)]
    want = _train(tp2, ps2, targets2, ref, lambda t: None, steps=2)
    assert all(bits_equal(x, y) for a, b in zip(got, want) for x, y in zip(a, b))
