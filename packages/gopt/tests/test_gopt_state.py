"""Optimizer state: survives reset_to, saves and loads through numpy.savez (no pickle)."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam
from gopt_testutil import ALPHAS, problem, tape_loss
from gtensor.testing import bits_equal


def _setup(bname, make, clip=3.0):
    inits, targets = problem()
    tp = g.Tape(bname)
    params = [tp.param(x) for x in inits]
    opt = make(tp)
    for p, a in zip(params, ALPHAS):
        opt.add(p, alpha=a)
    opt.set_clip(clip)
    return tp, params, targets, opt


def _train(tp, params, targets, opt, steps):
    mark = tp.mark()
    for _ in range(steps):
        tp.backward(tape_loss(tp, params, targets))
        opt.step()
        tp.reset_to(mark)
    return [tp.backend.to_numpy(tp.value(p)) for p in params]


@pytest.mark.parametrize("make", [lambda tp: Adam(tp, lr=0.1), lambda tp: SGD(tp, lr=0.05)],
                         ids=["adam", "sgd"])
def test_save_load_resumes_bit_exactly(bname, make, tmp_path):
    tp, params, targets, opt = _setup(bname, make)
    _train(tp, params, targets, opt, 3)
    opt.save(tmp_path / "ckpt.npz")
    straight = _train(tp, params, targets, opt, 4)

    tp2, params2, targets2, opt2 = _setup(bname, make, clip=None)
    opt2.load(tmp_path / "ckpt.npz")  # restores params, moments, t, clip and hyperparameters
    assert opt2.t == 3 and opt2.max_norm == 3.0
    resumed = _train(tp2, params2, targets2, opt2, 4)
    assert all(bits_equal(a, b) for a, b in zip(straight, resumed))
    assert opt2.t == 7


def test_checkpoint_file_needs_no_pickle(bname, tmp_path):
    tp, params, targets, opt = _setup(bname, lambda tp: Adam(tp))
    _train(tp, params, targets, opt, 2)
    opt.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz", allow_pickle=False) as f:
        assert str(f["kind"]) == "adam" and int(f["t"]) == 2
        assert f["m.0"].shape == params[0].shape


def test_load_rejects_mismatches(bname, tmp_path):
    tp, params, targets, opt = _setup(bname, lambda tp: Adam(tp))
    opt.save(tmp_path / "c.npz")
    tp2 = g.Tape(bname)
    sgd = SGD(tp2, lr=0.1)
    sgd.add(tp2.param(np.zeros((3, 4))))
    with pytest.raises(ValueError, match="'adam' optimizer; expected 'sgd'"):
        sgd.load(tmp_path / "c.npz")
    adam = Adam(tp2)
    adam.add(tp2.param(np.zeros((3, 4))))
    with pytest.raises(ValueError, match="3 parameters"):
        adam.load(tmp_path / "c.npz")
    tp3 = g.Tape(bname)
    adam3 = Adam(tp3)
    for s in [(3, 4), (4,), (3, 2)]:
        adam3.add(tp3.param(np.zeros(s)))
    with pytest.raises(ValueError, match=r"m.2 has shape \(2, 3\)"):
        adam3.load(tmp_path / "c.npz")
    assert adam3.t == 0  # nothing was applied


def test_state_survives_reset_to(bname):
    tp, params, targets, opt = _setup(bname, lambda tp: Adam(tp, lr=0.1))
    _train(tp, params, targets, opt, 2)
    m = [tp.backend.to_numpy(s.state["m"]).copy() for s in opt._slots]
    tp.reset_to(tp.mark())
    assert all(bits_equal(a, tp.backend.to_numpy(s.state["m"])) for a, s in zip(m, opt._slots))
    assert opt.t == 2 and any(np.any(a != 0) for a in m)
