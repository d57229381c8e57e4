"""Learning-rate schedules: values against torch's schedulers, the optimizer following them
(bit-exact against a hand run with the same lr sequence), state round trip, refusals."""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam, AdamW, schedules
from gopt_testutil import problem, tape_loss
from gtensor.testing import bits_equal

BASE = 0.1
N = 60


def _ours(make, n: int = N) -> list[float]:
    """The lr the schedule sets at construction, then after each of ``n`` steps."""
    tp = g.Tape()
    opt = SGD(tp, lr=BASE)
    opt.add(tp.param(np.ones(2)))
    sched = make(opt)
    out = [opt.lr]
    for _ in range(n):
        sched.step()
        out.append(opt.lr)
    assert sched.get_last_lr() == [opt.lr] and sched.last_epoch == n
    return out


def _torch(make, n: int = N) -> list[float]:
    torch = pytest.importorskip("torch")
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([p], lr=BASE)
    sched = make(torch.optim.lr_scheduler, opt)
    out = [sched.get_last_lr()[0]]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


def _close(ours: list[float], theirs: list[float]) -> float:
    """The worst |ours - theirs| relative to the base lr (a decayed lr of 0 has no relative
    error of its own)."""
    assert len(ours) == len(theirs)
    return max(abs(a - b) for a, b in zip(ours, theirs)) / BASE


CASES = {
    "cosine": (lambda o: schedules.cosine(o, N),
               lambda s, o: s.CosineAnnealingLR(o, T_max=N)),
    "cosine_min": (lambda o: schedules.cosine(o, 40, min_lr=1e-3),
                   lambda s, o: s.CosineAnnealingLR(o, T_max=40, eta_min=1e-3)),
    "cosine_warmup": (lambda o: schedules.cosine(o, N, warmup_steps=7, min_lr=1e-4),
                      lambda s, o: s.SequentialLR(o, [
                          s.LinearLR(o, start_factor=1 / 8, end_factor=1.0, total_iters=7),
                          s.CosineAnnealingLR(o, T_max=N - 7, eta_min=1e-4)], milestones=[7])),
    "step": (lambda o: schedules.step(o, step_size=7, gamma=0.5),
             lambda s, o: s.StepLR(o, step_size=7, gamma=0.5)),
    "exponential": (lambda o: schedules.exponential(o, gamma=0.93),
                    lambda s, o: s.ExponentialLR(o, gamma=0.93)),
    "linear": (lambda o: schedules.linear_warmup(o, start_factor=0.25, total_iters=10),
               lambda s, o: s.LinearLR(o, start_factor=0.25, total_iters=10)),
    "linear_down": (lambda o: schedules.linear_warmup(o, 1.0, 0.1, 30),
                    lambda s, o: s.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                            total_iters=30)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_values_match_torch(name):
    ours_make, torch_make = CASES[name]
    n = 40 if name == "cosine_min" else N
    ours, theirs = _ours(ours_make, n), _torch(torch_make, n)
    assert _close(ours, theirs) <= 1e-12, (name, ours[:5], theirs[:5])


def test_step_and_exponential_are_torch_bit_for_bit():
    """torch's StepLR/ExponentialLR multiply the previous lr by gamma: so do we."""
    for name in ("step", "exponential"):
        ours_make, torch_make = CASES[name]
        assert _ours(ours_make) == _torch(torch_make), name


def test_cosine_reaches_min_lr_and_stays():
    lrs = _ours(lambda o: schedules.cosine(o, 10, min_lr=0.01), 15)
    assert lrs[0] == BASE and lrs[10:] == [0.01] * 6
    assert all(a > b for a, b in zip(lrs[:10], lrs[1:11]))


def test_warmup_values_exact():
    lrs = _ours(lambda o: schedules.cosine(o, 10, warmup_steps=3), 4)
    assert lrs[:4] == [BASE * 1 / 4, BASE * 2 / 4, BASE * 3 / 4, BASE]


@pytest.mark.parametrize("make_opt", [lambda tp: SGD(tp, lr=0.2),
                                      lambda tp: Adam(tp, lr=0.2),
                                      lambda tp: AdamW(tp, lr=0.2, weight_decay=0.1)],
                         ids=["sgd", "adam", "adamw"])
def test_scheduled_run_equals_run_with_lr_set_by_hand(bname, make_opt):
    """A scheduled run on the backend under test (recorded, replayed steps on kernel backends)
    is bitwise the numpy run with the same lr values set by hand before each step."""

    def run(backend, scheduled, lrs=None):
        inits, targets = problem()
        tp = g.Tape(backend)
        params = [tp.param(x) for x in inits]
        opt = make_opt(tp)
        opt.add(params)
        sched = schedules.cosine(opt, 8, warmup_steps=2, min_lr=0.01) if scheduled else None
        mark = tp.mark()
        seen, traj = [], []
        for t in range(10):
            if lrs is not None:
                opt.lr = lrs[t]
            seen.append(opt.lr)
            tp.backward(tape_loss(tp, params, targets))
            opt.step()
            if sched is not None:
                sched.step()
            tp.reset_to(mark)
            traj.append(np.concatenate([tp.backend.to_numpy(tp.value(p)).ravel()
                                        for p in params]))
        return seen, traj

    lrs, got = run(bname, True)
    assert len(set(lrs)) == 9  # warmup, decay, then min_lr twice
    _, want = run("numpy", False, lrs)
    for t, (a, b) in enumerate(zip(got, want)):
        assert bits_equal(a, b), f"step {t + 1}"


def test_schedule_state_round_trip():
    tp = g.Tape()
    opt = Adam(tp, lr=0.3)
    opt.add(tp.param(np.ones(2)))
    sched = schedules.cosine(opt, 20, warmup_steps=3)
    for _ in range(5):
        sched.step()
    state = sched.state_dict()
    after = [0.0] * 4
    for k in range(4):
        sched.step()
        after[k] = opt.lr
    opt2 = Adam(tp, lr=0.3)
    sched2 = schedules.cosine(opt2, 20, warmup_steps=3)
    sched2.load_state_dict(state)
    assert sched2.last_epoch == 5 and opt2.lr == float(state["lr"])
    for k in range(4):
        sched2.step()
        assert opt2.lr == after[k]
    e = schedules.exponential(opt2, 0.9)
    e.step()
    es = e.state_dict()
    e2 = schedules.exponential(Adam(tp, lr=0.3), 0.9)
    e2.load_state_dict(es)
    e.step()
    e2.step()
    assert e.get_last_lr() == e2.get_last_lr()


def test_schedule_refusals_change_nothing():
    tp = g.Tape()
    opt = SGD(tp, lr=0.3)
    opt.add(tp.param(np.ones(2)))
    with pytest.raises(TypeError, match="Cosine: opt is"):
        schedules.cosine("sgd", 10)
    with pytest.raises(ValueError, match=r"cosine: total_steps is 3 \(an int\); expected an "
                                         "int >= 4"):
        schedules.cosine(opt, 3, warmup_steps=3)
    with pytest.raises(TypeError, match="cosine: total_steps is"):
        schedules.cosine(opt, 10.0)
    with pytest.raises(ValueError, match="cosine: min_lr is"):
        schedules.cosine(opt, 10, min_lr=math.nan)
    with pytest.raises(ValueError, match="step: gamma is"):
        schedules.step(opt, 3, gamma=0.0)
    with pytest.raises(ValueError, match="step: step_size is"):
        schedules.step(opt, 0)
    with pytest.raises(ValueError, match="exponential: gamma is"):
        schedules.exponential(opt, -1.0)
    with pytest.raises(ValueError, match="linear_warmup: start_factor is"):
        schedules.linear_warmup(opt, start_factor=0.0)
    assert opt.lr == 0.3
    sched = schedules.cosine(opt, 10)
    sched.step()
    state = sched.state_dict()
    other = schedules.cosine(SGD(tp, lr=0.3), 12)
    with pytest.raises(ValueError, match="hyper.total_steps is"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="'cosine' schedule; expected 'exponential'"):
        schedules.exponential(SGD(tp, lr=0.3), 0.5).load_state_dict(state)
    bad = dict(state, lr=np.array(-1.0))
    before = other.state_dict()
    with pytest.raises(ValueError, match="lr is"):
        schedules.cosine(other.optimizer, 12).load_state_dict(dict(bad, **{
            "hyper.total_steps": np.array(12.0)}))
    assert {k: float(v) for k, v in before.items() if k != "kind"} == \
        {k: float(v) for k, v in other.state_dict().items() if k != "kind"}
