"""The recorded device half of a step (kernel backends): replaying it gives the eager bits,
and every change of configuration is seen (set_clip, load_state_dict re-record).

The reference is the numpy backend, whose steps always run op by op: a run that changes the
clip threshold, turns clipping off and loads an earlier state part way must land on the same
bits on every backend, each step of it.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam
from gtensor.testing import bits_equal

OPTS = {"adam": lambda tp: Adam(tp, lr=0.05, betas=(0.8, 0.95), eps=1e-6),
        "sgd": lambda tp: SGD(tp, lr=0.1)}


def _schedule_run(bname: str, dtype: str, kind: str) -> list[np.ndarray]:
    """Nine steps with a clip change, clip off, and a state load (new lr and L2 weights)
    part way; every step's parameters (host copies) in order."""
    rng = np.random.default_rng(11)
    inits = [rng.standard_normal((3, 4)), rng.standard_normal((1, 4)), rng.standard_normal(4)]
    tp = g.Tape(bname, dtype)
    ps = [tp.param(x) for x in inits]
    opt = OPTS[kind](tp)
    opt.add(ps[0], alpha=1e-2)
    opt.add(ps[1:], alpha=0.0)
    opt.set_clip(2.0)
    mark = tp.mark()
    seen, saved = [], None
    for t in range(9):
        if t == 3:
            opt.set_clip(0.25)  # a tighter clip: the recorded update must not keep 2.0
            saved = opt.state_dict()
        if t == 5:
            opt.set_clip(None)
        if t == 7:
            # back to step 3's state (clip 0.25, its moments), with other hyperparameters
            # and L2 weights: the recorded update baked the old ones in
            saved["alpha"] = np.array([3e-2, 1e-3, 0.0])
            saved["hyper.lr"] = np.array(0.02)
            opt.load_state_dict(saved)
        loss = g.sum((ps[0] * ps[1]) * (ps[0] * ps[1])) + g.sum(ps[2] * ps[2]) * 3.0
        tp.backward(loss)
        opt.step()
        seen.append(np.concatenate([tp.backend.to_numpy(tp.value(p)).ravel() for p in ps]))
        tp.reset_to(mark)
    return seen


@pytest.mark.parametrize("kind", sorted(OPTS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_reconfigured_run_is_bit_equal_to_numpy(bname, kind, dtype):
    want = _schedule_run("numpy", dtype, kind)
    got = _schedule_run(bname, dtype, kind)
    for t, (a, b) in enumerate(zip(got, want)):
        assert bits_equal(a, b), f"step {t + 1}: parameters differ from the numpy reference"


def test_later_steps_replay_the_recording(bname, monkeypatch):
    """After the first step the update ops are not dispatched again: on cpu the device half
    is one native call (the parameters are updated in place: no copy into the tape)."""
    if bname == "numpy":
        pytest.skip("the numpy backend runs every step op by op (no kernels to record)")
    tp = g.Tape(bname)
    ps = [tp.param(np.arange(6.0).reshape(2, 3)), tp.param(np.ones(3))]
    opt = Adam(tp)
    opt.add(ps)
    mark = tp.mark()

    def step():
        tp.backward(g.sum(ps[0] * ps[1]))
        opt.step()
        tp.reset_to(mark)

    step()
    updates = []
    real_update = opt._update
    monkeypatch.setattr(opt, "_update", lambda *a, **k: updates.append(1) or real_update(*a, **k))
    calls = []
    if bname == "cpu":
        module = tp.backend.module
        real_run = module.run
        monkeypatch.setattr(module, "run", lambda *a: calls.append(a) or real_run(*a))
    tp.backward(g.sum(ps[0] * ps[1]))
    calls.clear()
    opt.step()
    assert updates == [], "the update ops ran op by op instead of replaying"
    if bname == "cpu":
        assert len(calls) == 1, f"{len(calls)} native calls for one step"
    tp.reset_to(mark)
    opt.set_clip(1.0)  # re-records: the update ops run once more, then replay again
    step()
    assert len(updates) == len(ps)
    step()
    assert len(updates) == len(ps)
