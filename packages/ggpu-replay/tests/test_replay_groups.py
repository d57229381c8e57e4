"""A captured program with two parameter groups following a schedule: bitwise the eager tape.

Each group has its own lr (a cosine schedule over both, each from its own base) and, for
AdamW, its own decoupled decay, changed part way by writing ``param_groups``; with
``rule="torch"`` clipping over both groups. The device optimizer's segment is recorded once:
per-group learning rates and decays reach it through per-group device buffers.
"""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import capture
from gopt import schedules
from gtensor.testing import bits_equal, first_difference
from replay_testutil import ae_loss, ae_problem

EPISODES = 8
OPTS = {
    "adamw": (gopt.AdamW, "adamw", {"lr": 2e-2}, [{"weight_decay": 0.1}, {"lr": 5e-2,
                                                                         "weight_decay": 0.0}]),
    "sgd": (gopt.SGD, "sgd", {"lr": 0.1}, [{"weight_decay": 1e-3}, {"lr": 0.05}]),
}
DECAY_AT = 4  # before this episode AdamW's first group's decay is written (buffers: no re-record)


def _groups(ps, opts):
    return [{"params": ps[0::2], **opts[0]}, {"params": ps[1::2], **opts[1]}]


def _sched(opt):
    return schedules.cosine(opt, EPISODES - 2, warmup_steps=2, min_lr=1e-3)


def _write(kind, opt, e):
    if kind == "adamw" and e == DECAY_AT:
        opt.param_groups[0]["weight_decay"] = 0.3


def _eager(kind: str):
    cls, _, kw, opts = OPTS[kind]
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    opt = cls(_groups(ps, opts), **kw)
    opt.set_clip(0.5, rule="torch")
    sched = _sched(opt)
    mark = tp.mark()
    losses, lrs = [], []
    for e in range(EPISODES):
        _write(kind, opt, e)
        loss = ae_loss(tp.const(data[e % len(data)]), ps)
        tp.backward(loss)
        lrs.append([grp["lr"] for grp in opt.param_groups])
        opt.step()
        sched.step()
        losses.append(float(tp.value(loss)))
        tp.reset_to(mark)
    return losses, [np.array(tp.value(p)) for p in ps], lrs


def _replayed(kind: str, device: str):
    _, method, kw, opts = OPTS[kind]
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    x = tp.const(data[0])
    prog = capture(tp, ae_loss(x, ps), backend=device)
    dopt = getattr(prog, method)(_groups(ps, opts), **kw)
    dopt.set_clip(0.5, rule="torch")
    sched = _sched(dopt)
    losses, segments = [], []
    for e in range(EPISODES):
        _write(kind, dopt, e)
        prog.set_input(x, data[e % len(data)])
        prog.step(dopt)
        sched.step()
        losses.append(prog.loss())
        segments.append(id(dopt.segment))
    prog.sync_params(tp)
    return losses, [np.array(tp.value(p)) for p in ps], segments


@pytest.mark.parametrize("kind", sorted(OPTS))
def test_captured_two_group_scheduled_run_is_bitwise_the_eager_tape(device, kind):
    want_losses, want, lrs = _eager(kind)
    # premises: the groups' lrs differ until both reach min_lr, and the schedule moved them
    assert all(a != b for a, b in lrs[:EPISODES - 2]) and lrs[-1][0] == lrs[-1][1]
    assert len({row[0] for row in lrs}) == EPISODES - 1
    got_losses, got, segments = _replayed(kind, device)
    assert bits_equal(np.array(got_losses), np.array(want_losses)), \
        first_difference(np.array(want_losses), np.array(got_losses))
    for k, (a, b) in enumerate(zip(want, got)):
        assert bits_equal(a, b), f"{kind} param {k}: {first_difference(a, b)}"
    assert len(set(segments)) == 1, "the optimizer's segment was re-recorded"


def test_device_optimizer_groups_api(device):
    init, data = ae_problem()
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    x = tp.const(data[0])
    prog = capture(tp, ae_loss(x, ps), backend=device)
    dopt = prog.adam(0.1)  # the learning rate in the params place, as before groups
    assert dopt.lr == 0.1 and dopt.param_groups[0]["params"] == []
    dopt.add(ps[0])
    dopt.add_param_group({"params": ps[1:], "lr": 0.01, "betas": (0.8, 0.9)})
    assert [grp["lr"] for grp in dopt.param_groups] == [0.1, 0.01]
    with pytest.raises(ValueError, match=r"Adam: param_groups\[0\]\['params'\]\[0\]: .*is a "
                                         "'const' node"):
        prog.adam([{"params": [x]}])
    with pytest.raises(TypeError, match="adam: the learning rate is given twice"):
        prog.adam(0.1, lr=0.2)
    with pytest.raises(TypeError, match="sgd: lr is missing"):
        prog.sgd(ps)
    with pytest.raises(ValueError, match=r"SGD: param_groups\[1\]\['lr'\] is -1.0"):
        prog.sgd([{"params": ps[:1]}, {"params": ps[1:], "lr": -1.0}], lr=0.1)
