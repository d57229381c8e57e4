"""Configuration changed between steps (``opt.lr = x``, ``set_alpha``, ``set_clip``) reaches the
next step on every engine: eager numpy, and the recorded update replayed on cpu and sim. The
reference is a fresh optimizer per step, configured that way from the start and loaded with
the state so far (issue 24)."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam
from gtape.recording import Version
from gtensor.testing import bits_equal

OPTS = {"adam": lambda tp, lr: Adam(tp, lr=lr, betas=(0.8, 0.95), eps=1e-6),
        "sgd": lambda tp, lr: SGD(tp, lr=lr)}
LRS = [0.1, 0.05, 0.05, 0.02, 0.2, 0.0]  # a schedule: one lr per step, set with opt.lr = x


def _problem(bname: str):
    tp = g.Tape(bname)
    ps = [tp.param(np.array([[1.5, -2.0], [0.5, 3.0]])), tp.param(np.array([0.25, -1.0]))]
    return tp, ps


def _loss(ps):
    return g.sum((ps[0] * ps[1]) * (ps[0] * ps[1])) + g.sum(ps[1] * ps[1])


def _scheduled(bname: str, kind: str) -> list[np.ndarray]:
    """One optimizer whose lr, alpha and clip change between steps."""
    tp, ps = _problem(bname)
    opt = OPTS[kind](tp, LRS[0])
    opt.add(ps)
    mark = tp.mark()
    out = []
    for t, lr in enumerate(LRS):
        opt.lr = lr
        if t == 2:
            opt.set_alpha(ps[0], 0.1)
        if t == 3:
            opt.set_clip(0.5)
        tp.backward(_loss(ps))
        opt.step()
        out.append(np.concatenate([tp.backend.to_numpy(tp.value(p)).ravel() for p in ps]))
        tp.reset_to(mark)
    return out


def _fresh(kind: str) -> list[np.ndarray]:
    """Each step by a NEW numpy optimizer made with that step's configuration, loaded with the
    state (t, moments, running powers) the previous step left."""
    tp, ps = _problem("numpy")
    state, out = None, []
    mark = tp.mark()
    for t, lr in enumerate(LRS):
        opt = OPTS[kind](tp, lr)
        opt.add(ps[0], alpha=0.1 if t >= 2 else 0.0)
        opt.add(ps[1])
        if t >= 3:
            opt.set_clip(0.5)
        if state is not None:
            state = {**state, "hyper.lr": np.array(lr), "alpha": opt.state_dict()["alpha"],
                     "max_norm": opt.state_dict()["max_norm"]}
            opt.load_state_dict(state)
        tp.backward(_loss(ps))
        opt.step()
        state = opt.state_dict(params=False)
        out.append(np.concatenate([np.asarray(p.numpy()).ravel() for p in ps]))
        tp.reset_to(mark)
    return out


@pytest.mark.parametrize("kind", sorted(OPTS))
def test_lr_alpha_clip_changes_equal_a_fresh_optimizer(bname, kind):
    want = _fresh(kind)
    got = _scheduled(bname, kind)
    for t, (a, b) in enumerate(zip(got, want)):
        assert bits_equal(a, b), f"step {t + 1} (lr {LRS[t]}): parameters differ"


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", None, True])
def test_lr_setter_refuses_and_keeps_the_old_lr(bad):
    tp, ps = _problem("numpy")
    opt = SGD(tp, 0.1)
    before = opt.version("lr").version
    with pytest.raises((TypeError, ValueError), match=r"SGD\.lr: lr"):
        opt.lr = bad
    assert opt.lr == 0.1 and opt.version("lr").version == before


def test_every_change_bumps_its_version():
    tp, ps = _problem("numpy")
    opt = Adam(tp, 0.1)
    seen = {name: opt.version(name).version for name in ("lr", "clip", "alpha", "params")}
    opt.add(ps[0])
    opt.set_alpha(ps[0], 0.5)
    opt.set_clip(1.0)
    opt.lr = 0.2
    for name, v in seen.items():
        assert opt.version(name).version > v, name
    assert all(isinstance(d, Version) for d in opt.recorded_deps)
    assert opt.version("lr") not in opt.recorded_deps  # Adam's lr goes through lr_t's buffer
    assert SGD(tp, 0.1).version("lr").name == "SGD.lr"
    # SGD's lr also goes through a per-step buffer ("sgd_lr"), so no recording depends on it
    assert not any(d.name == "SGD.lr" for d in SGD(tp, 0.1).recorded_deps)


def test_set_alpha_refuses_an_unregistered_param():
    tp, ps = _problem("numpy")
    opt = SGD(tp, 0.1)
    opt.add(ps[0])
    with pytest.raises(ValueError, match="SGD.set_alpha: .* is not registered"):
        opt.set_alpha(ps[1], 0.1)
    with pytest.raises(ValueError, match="SGD.set_alpha: alpha"):
        opt.set_alpha(ps[0], -1.0)
