"""Trajectories with several parameters of the SAME shape, clipping and L2 on, bit-exact
against the plain-Python hand computation of gopt_testutil.Hand.

Parameters of distinct shapes cannot catch per-parameter buffers that are shared by shape
(a workspace keyed by shape alone): here every parameter has the shape (3, 4), each with its
own values, targets and L2 weight, so a step that reads another parameter's gradient, moment
or clipped copy changes bits at the first step.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam
from gopt_testutil import Hand
from gtensor.testing import bits_equal, first_difference

SHAPE = (3, 4)
N = 4
ALPHAS = [1e-2, 0.0, 3e-3, 1e-2]  # two parameters share an alpha too
DTYPES = ["float64", "float32"]
STEPS = 6


def _problem(seed: int = 3) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal(SHAPE) for _ in range(N)],
            [rng.standard_normal(SHAPE) * 0.5 for _ in range(N)])


def _tape_run(bname: str, dtype: str, make_opt, clip: float) -> dict:
    inits, targets = _problem()
    tp = g.Tape(bname, dtype)
    params = [tp.param(x) for x in inits]
    opt = make_opt(tp)
    for p, a in zip(params, ALPHAS):
        opt.add(p, alpha=a)
    opt.set_clip(clip)
    mark = tp.mark()
    be = tp.backend
    traj, norms = [], []
    for _ in range(STEPS):
        loss = None
        for p, c in zip(params, targets):
            d = p - tp.const(c)
            s = g.sum(d * d)
            loss = s if loss is None else loss + s
        tp.backward(loss)
        opt.step()
        norms.append(opt.last_norm)
        tp.reset_to(mark)
        traj.append([be.to_numpy(tp.value(p)) for p in params])
    return {"traj": traj, "norms": norms}


def _hand_run(hand: Hand, dtype: str) -> list:
    inits, targets = _problem()
    to = np.dtype(dtype)
    ps = [[float(x) for x in a.astype(to).ravel()] for a in inits]
    cs = [[float(x) for x in a.astype(to).ravel()] for a in targets]
    traj = []
    for _ in range(STEPS):
        gs = [hand.grad(p, c) for p, c in zip(ps, cs)]
        ps = hand.step(ps, gs)
        traj.append([np.array(pk, to).reshape(SHAPE) for pk in ps])
    return traj


OPTS = {
    "sgd": (lambda tp: SGD(tp, lr=0.05), dict(kind="sgd", lr=0.05)),
    "adam": (lambda tp: Adam(tp, lr=0.3), dict(kind="adam", lr=0.3)),
    "adam_betas": (lambda tp: Adam(tp, lr=0.1, betas=(0.8, 0.99), eps=1e-6),
                   dict(kind="adam", lr=0.1, betas=(0.8, 0.99), eps=1e-6)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(OPTS))
def test_same_shape_params_clip_l2_trajectory_bit_exact(bname, name, dtype):
    make, hand_kw = OPTS[name]
    clip = 3.0
    got = _tape_run(bname, dtype, make, clip)
    hand = Hand(**hand_kw, alphas=ALPHAS, clip=clip, dtype=dtype)
    want = _hand_run(hand, dtype)
    assert got["norms"][0] > clip, got["norms"]  # the clip is active (at least at first)
    for step, (ps, ws) in enumerate(zip(got["traj"], want)):
        for k, (a, b) in enumerate(zip(ps, ws)):
            assert bits_equal(a, b), f"{name} {dtype}: param {k} after step {step + 1}: " \
                                     f"{first_difference(a, b)}"
    finals = got["traj"][-1]
    assert not any(bits_equal(finals[i], finals[j]) for i in range(N) for j in range(i)), \
        "premise: the parameters must differ"


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_failed_step_leaves_the_optimizer_as_it_was(bname, name, monkeypatch):
    """A step that raises half way restores t and the host scalars (all-or-nothing steps)."""
    make, _ = OPTS[name]
    inits, targets = _problem()
    tp = g.Tape(bname, "float64")
    params = [tp.param(x) for x in inits]
    opt = make(tp)
    for p, a in zip(params, ALPHAS):
        opt.add(p, alpha=a)
    tp.backward(g.sum(params[0] * params[0]))  # one extra backward: backward count != t
    for _ in range(2):  # two good steps first, so the saved scalars are not the initial ones
        tp.backward(g.sum(params[0] * params[0]) + g.sum(params[1] * params[2]))
        opt.step()
    before = {k: np.array(v) for k, v in opt.state_dict().items()}
    tp.backward(g.sum(params[0] * params[0]))

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(opt, "device_step", boom)  # the device half, run eagerly (numpy)
    monkeypatch.setattr(opt, "_replayed_step", boom)  # or recorded and replayed (kernel backends)
    with pytest.raises(RuntimeError, match="injected"):
        opt.step()
    after = opt.state_dict()
    assert opt.t == 2
    for k, v in before.items():
        assert np.array_equal(np.asarray(after[k]), v) or (
            v.dtype.kind == "f" and bits_equal(np.asarray(after[k]), v)), k
    monkeypatch.undo()  # the same gradients, now the step goes through
    opt.step()
    assert opt.t == 3
