"""A captured program following a learning-rate schedule (and AdamW): bitwise the eager run.

The schedule sets ``dopt.lr`` on the host after each step; the device optimizer's host half
writes what derives from it into device buffers, so the recorded segment (and, on cuda, the
CUDA graph of the whole step) is recorded once and never goes stale.
"""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import capture
from gopt import schedules
from gtensor.testing import bits_equal, first_difference
from replay_testutil import ae_loss, ae_problem, register

EPISODES = 16
OPTS = {
    "adamw": (lambda tp: gopt.AdamW(tp, lr=2e-2, weight_decay=0.05),
              lambda prog: prog.adamw(lr=2e-2, weight_decay=0.05)),
    "adam": (lambda tp: gopt.Adam(tp, lr=2e-2), lambda prog: prog.adam(lr=2e-2)),
    "sgd": (lambda tp: gopt.SGD(tp, lr=0.1), lambda prog: prog.sgd(lr=0.1)),
}


def _sched(opt):
    return schedules.cosine(opt, EPISODES - 4, warmup_steps=3, min_lr=1e-3)


def _eager(kind: str, clip: float | None, scheduled: bool = True):
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    opt = OPTS[kind][0](tp)
    register(opt, ps, clip)
    sched = _sched(opt) if scheduled else None
    mark = tp.mark()
    losses, lrs = [], []
    for e in range(EPISODES):
        loss = ae_loss(tp.const(data[e % len(data)]), ps)
        tp.backward(loss)
        lrs.append(opt.lr)
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(float(tp.value(loss)))
        tp.reset_to(mark)
    return losses, [np.array(tp.value(p)) for p in ps], lrs


def _replayed(kind: str, device: str, clip: float | None, whole_step: bool = True):
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    x = tp.const(data[0])
    prog = capture(tp, ae_loss(x, ps), backend=device)
    dopt = OPTS[kind][1](prog)
    register(dopt, ps, clip)
    sched = _sched(dopt)
    losses, segments = [], []
    for e in range(EPISODES):
        prog.set_input(x, data[e % len(data)])
        if whole_step:
            prog.step(dopt)
        else:
            prog.forward()
            prog.backward()
            dopt.step()
        sched.step()
        losses.append(prog.loss())
        segments.append(id(dopt.segment))
    prog.sync_params(tp)
    return losses, [np.array(tp.value(p)) for p in ps], segments, prog


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("kind", list(OPTS))
def test_captured_scheduled_run_is_bitwise_the_eager_run(device, kind, clip):
    want_losses, want, lrs = _eager(kind, clip)
    assert len(set(lrs)) == EPISODES - 3  # the lr really changed (min_lr for the last steps)
    got_losses, got, segments, _ = _replayed(kind, device, clip)
    assert bits_equal(np.array(got_losses), np.array(want_losses)), \
        first_difference(np.array(want_losses), np.array(got_losses))
    for k, (a, b) in enumerate(zip(want, got)):
        assert bits_equal(a, b), f"{kind} param {k}: {first_difference(a, b)}"
    assert len(set(segments)) == 1, "the optimizer's segment was re-recorded"
    # and the schedule mattered: without it the run lands elsewhere
    _, unscheduled, _ = _eager(kind, clip, scheduled=False)
    assert not bits_equal(unscheduled[0], want[0])


def test_split_calls_follow_the_schedule_too(device):
    want_losses, want, _ = _eager("adamw", 0.5)
    got_losses, got, _, _ = _replayed("adamw", device, 0.5, whole_step=False)
    assert bits_equal(np.array(got_losses), np.array(want_losses))
    assert all(bits_equal(a, b) for a, b in zip(want, got))


def test_device_lr_setter_refuses_bad_values(device):
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    prog = capture(tp, ae_loss(tp.const(data[0]), ps), backend=device)
    dopt = prog.adamw(lr=1e-2)
    with pytest.raises(ValueError, match="AdamW.lr: lr is -1.0"):
        dopt.lr = -1.0
    with pytest.raises(TypeError, match="AdamW.lr: lr is"):
        dopt.lr = "fast"
    assert dopt.lr == 1e-2
    dopt.lr = 3e-4
    assert dopt.lr == 3e-4 and dopt.optimizer.lr == 3e-4
