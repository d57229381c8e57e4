"""A fused program following a learning-rate schedule with AdamW: bitwise the eager tape (the
schedule's values reach the fused kernels through the optimizer's 0-d buffers)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
from fuse_testutil import model, problem, register
from ggpu_fuse import fuse
from ggpu_replay import capture
from gopt import schedules
from gtensor.testing import bits_equal, first_difference

EPISODES = 12


def _sched(opt):
    return schedules.cosine(opt, EPISODES, warmup_steps=2, min_lr=1e-3)


def test_fused_adamw_on_a_cosine_schedule_is_bitwise_the_tape(device):
    init, data = problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    opt = gopt.AdamW(tp, lr=2e-2, weight_decay=0.05)
    register(opt, ps)
    sched = _sched(opt)
    mark = tp.mark()
    want = []
    for e in range(EPISODES):
        loss = model(tp.const(data[e % len(data)]), ps)
        tp.backward(loss)
        opt.step()
        sched.step()
        want.append(loss.item())
        tp.reset_to(mark)
    want_p = [p.numpy() for p in ps]

    tp2 = g.Tape("numpy")
    ps2 = [tp2.param(a) for a in init]
    x = tp2.const(data[0])
    prog = fuse(capture(tp2, model(x, ps2), backend=device))
    dopt = prog.adamw(lr=2e-2, weight_decay=0.05)
    register(dopt, ps2)
    sched2 = _sched(dopt)
    got = []
    for e in range(EPISODES):
        prog.set_input(x, data[e % len(data)])
        prog.step(dopt)
        sched2.step()
        got.append(prog.loss())
    prog.sync_params(tp2)
    assert bits_equal(np.array(got), np.array(want)), \
        first_difference(np.array(want), np.array(got))
    for k, (a, p) in enumerate(zip(want_p, ps2)):
        assert bits_equal(a, p.numpy()), f"param {k}: {first_difference(a, p.numpy())}"
