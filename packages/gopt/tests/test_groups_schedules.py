"""Schedules over parameter groups: every group keeps its own base lr, as torch's schedulers.

Each group's lr is pinned bit for bit at the boundaries (the last warmup step, the warmup
milestone, the step after, the last steps) against a hand computation in the order
docs/optimizers.md writes (left to right, float64). The bases and warmup length are chosen
so the rounding at the boundary is visible: the milestone's ``min + (base - min)`` is not
``base`` (a warmup one step longer would give exactly ``base`` there), and ``base*w/(w+1)`` is
not ``base*(w/(w+1))``. The premises are asserted, and a schedule whose warmup is shifted by one
step fails the pins (checked on the hand computation itself).
"""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gopt import SGD, AdamW, schedules
from gtensor.scalar.trig import COS_F64

BASES = (0.0094, 0.0135)
W, TOTAL, MIN = 5, 12, 1e-3
S, N = 0.3, 6  # linear warmup: 0.3 + (1 - 0.3) * 6/6 is 0.9999999999999998, not 1


def _cos(x: float) -> float:
    return float(COS_F64.eval(np.array(x, np.float64)))


def hand_cosine(n: int, b: float, w: int = W) -> float:
    """docs/optimizers.md: base*(n+1)/(w+1) for n < w; then min + (base - min)*(1 + cos(pi*k/T))/2
    (k = n - w, T = total - w), each operation left to right; min from n = total on."""
    if n < w:
        return (b * (n + 1)) / (w + 1)
    if n >= TOTAL:
        return MIN
    x = (math.pi * (n - w)) / (TOTAL - w)
    return MIN + ((b - MIN) * (1.0 + _cos(x))) / 2.0


def hand_linear(n: int, b: float, iters: int = N) -> float:
    """base * (s + (e - s)*min(n, N)/N), e = 1."""
    return b * (S + ((1.0 - S) * min(n, iters)) / iters)


def _two_groups(kind=AdamW):
    tp = g.Tape()
    w, b = tp.param(np.ones((2, 2))), tp.param(np.ones(2))
    opt = kind([{"params": [w], "lr": BASES[0]}, {"params": [b], "lr": BASES[1]}], lr=1.0)
    return tp, opt


def _lrs(opt, make, steps: int) -> list[list[float]]:
    """Each group's lr at construction, then after each of ``steps`` sched.step() calls."""
    sched = make(opt)
    out = [[grp["lr"] for grp in opt.param_groups]]
    for _ in range(steps):
        sched.step()
        out.append([grp["lr"] for grp in opt.param_groups])
        assert sched.get_last_lr() == out[-1]
    return out


def test_cosine_boundaries_pinned_per_group():
    _, opt = _two_groups()
    got = _lrs(opt, lambda o: schedules.cosine(o, TOTAL, warmup_steps=W, min_lr=MIN), TOTAL + 2)
    pins = [W - 1, W, W + 1, TOTAL - 1, TOTAL, TOTAL + 1]
    for k, b in enumerate(BASES):
        # premises: the boundary's rounding is visible for this base
        assert hand_cosine(W - 1, b) != b * (W / (W + 1))
        assert hand_cosine(W, b) != b  # a warmup through n = W would give exactly b here
        for n in pins:
            assert got[n][k] == hand_cosine(n, b), (k, n, got[n][k], hand_cosine(n, b))
        # a warmup shifted by one step either way fails these pins
        for w in (W - 1, W + 1):
            assert any(hand_cosine(n, b, w) != hand_cosine(n, b) for n in pins[:3]), w
    assert got[0] == [hand_cosine(0, b) for b in BASES]


def test_linear_warmup_boundaries_pinned_per_group():
    _, opt = _two_groups(SGD)
    got = _lrs(opt, lambda o: schedules.linear_warmup(o, start_factor=S, total_iters=N), N + 3)
    for k, b in enumerate(BASES):
        assert hand_linear(N, b) != b  # premise: the end factor's rounding is visible
        for n in (0, N - 1, N, N + 1, N + 3):
            assert got[n][k] == hand_linear(n, b), (k, n)
        for iters in (N - 1, N + 1):
            assert any(hand_linear(n, b, iters) != hand_linear(n, b) for n in (N - 1, N))


def test_step_and_exponential_chain_each_groups_own_lr():
    _, opt = _two_groups()
    got = _lrs(opt, lambda o: schedules.step(o, step_size=3, gamma=0.3), 7)
    for k, b in enumerate(BASES):
        assert [row[k] for row in got] == [b, b, b, b * 0.3, b * 0.3, b * 0.3,
                                           b * 0.3 * 0.3, b * 0.3 * 0.3]
    _, opt = _two_groups()
    got = _lrs(opt, lambda o: schedules.exponential(o, gamma=0.9), 3)
    for k, b in enumerate(BASES):
        assert [row[k] for row in got] == [b, b * 0.9, b * 0.9 * 0.9, b * 0.9 * 0.9 * 0.9]


def test_group_schedules_match_torch():
    torch = pytest.importorskip("torch")
    sch = torch.optim.lr_scheduler
    ps = [torch.zeros(2, dtype=torch.float64, requires_grad=True) for _ in BASES]
    topt = torch.optim.AdamW([{"params": [p], "lr": b} for p, b in zip(ps, BASES)], lr=1.0)
    tsched = sch.SequentialLR(topt, [
        sch.LinearLR(topt, start_factor=1 / (W + 1), end_factor=1.0, total_iters=W),
        sch.CosineAnnealingLR(topt, T_max=TOTAL - W, eta_min=MIN)], milestones=[W])
    theirs = [tsched.get_last_lr()]
    for _ in range(TOTAL):
        topt.step()
        tsched.step()
        theirs.append(tsched.get_last_lr())
    _, opt = _two_groups()
    ours = _lrs(opt, lambda o: schedules.cosine(o, TOTAL, warmup_steps=W, min_lr=MIN), TOTAL)
    for k, b in enumerate(BASES):
        assert max(abs(a[k] - t[k]) for a, t in zip(ours, theirs)) <= 1e-12 * b


def test_schedule_state_with_groups_and_refusals():
    _, opt = _two_groups()
    sched = schedules.cosine(opt, TOTAL, warmup_steps=W, min_lr=MIN)
    for _ in range(3):
        sched.step()
    state = sched.state_dict()
    assert state["lr"].shape == (2,) and state["base_lr"].tolist() == list(BASES)
    assert sched.base_lrs == list(BASES)
    with pytest.raises(ValueError, match="Cosine.base_lr: the 2 groups have different base"):
        _ = sched.base_lr
    with pytest.raises(ValueError, match=r"AdamW.lr: the 2 parameter groups have different "
                                         r"values .*param_groups\[k\]\['lr'\]"):
        _ = opt.lr
    _, opt2 = _two_groups()
    sched2 = schedules.cosine(opt2, TOTAL, warmup_steps=W, min_lr=MIN)
    sched2.load_state_dict(state)
    assert [grp["lr"] for grp in opt2.param_groups] == sched.get_last_lr()
    sched.step()
    sched2.step()
    assert sched2.get_last_lr() == sched.get_last_lr()
    # a one-group schedule refuses a two-group state, and changes nothing
    tp = g.Tape()
    one = SGD([tp.param(np.ones(2))], lr=0.5)
    sched1 = schedules.cosine(one, TOTAL, warmup_steps=W, min_lr=MIN)
    before = one.lr
    with pytest.raises(ValueError, match=r"lr has shape \(2,\) .*1 group\(s\), expected shape"):
        sched1.load_state_dict(state)
    assert one.lr == before == 0.5 / (W + 1) and sched1.last_epoch == 0
    # a group added after the schedule was made: its step refuses, naming both counts
    tp3 = g.Tape()
    opt3 = SGD(tp3, lr=0.1)
    opt3.add(tp3.param(np.ones(2)))
    sched3 = schedules.step(opt3, 2)
    opt3.add_param_group({"params": [tp3.param(np.ones(2))], "lr": 0.2})
    with pytest.raises(ValueError, match="has 2 parameter groups; this schedule was made for 1"):
        sched3.step()
    assert [grp["lr"] for grp in opt3.param_groups] == [0.1, 0.2]


def test_opt_lr_set_applies_to_every_group():
    _, opt = _two_groups()
    opt.lr = 0.25
    assert [grp["lr"] for grp in opt.param_groups] == [0.25, 0.25] and opt.lr == 0.25
