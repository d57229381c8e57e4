"""AdamW: bit-pinned against a hand computation (every backend, float64 and float32, with L2,
clipping and an lr change part way), against torch.optim.AdamW, and its state round trip.

The hand computation follows docs/optimizers.md's AdamW lines in plain Python floats, one
rounding per operation (``HandW``, built on gopt_testutil's ``Hand``).
"""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gopt import AdamW
from gopt_testutil import ALPHAS, SHAPES, Hand, problem, run_tape, tape_loss
from gtensor.testing import bits_equal, first_difference

STEPS = 8


class HandW(Hand):
    """AdamW element by element: m, v as Adam; p <- p*D - (S*m) / (sqrt(v)/R + eps)."""

    def __init__(self, lr: float, wd: float, lrs: dict[int, float] | None = None,
                 **kw) -> None:
        super().__init__("adamw", lr, **kw)
        self.wd, self.lrs = wd, lrs or {}

    def step(self, ps, gs):
        r = self.rnd
        self.lr = self.lrs.get(self.t, self.lr)  # the lr set before step t + 1
        self.t += 1
        if self.m is None:
            self.m = [[0.0] * len(p) for p in ps]
            self.v = [[0.0] * len(p) for p in ps]
        if self.clip is not None:
            gs = self.clipped(gs)
        if self.alphas is not None:
            gs = [[r(x + r(r(a) * pi)) if a != 0.0 else x for x, pi in zip(gk, pk)]
                  for gk, pk, a in zip(gs, ps, self.alphas)]
        self.b1p = self.b1p * self.b1
        self.b2p = self.b2p * self.b2
        D = r(1.0 - self.lr * self.wd)
        S = r(self.lr / (1.0 - self.b1p))
        R = r(math.sqrt(1.0 - self.b2p))
        b1, b2, c1, c2 = r(self.b1), r(self.b2), r(1.0 - self.b1), r(1.0 - self.b2)
        eps = r(self.eps)
        out = []
        for k, (pk, gk) in enumerate(zip(ps, gs)):
            mk, vk, new = self.m[k], self.v[k], []
            for j, (pi, gi) in enumerate(zip(pk, gk)):
                mk[j] = r(r(mk[j] * b1) + r(gi * c1))
                vk[j] = r(r(vk[j] * b2) + r(r(gi * gi) * c2))
                den = r(r(r(math.sqrt(vk[j])) / R) + eps)
                q = r(r(mk[j] * S) / den)
                new.append(r(r(pi * D) - q))
            out.append(new)
        return out


def _hand_traj(hand: Hand, dtype: str, steps: int) -> list:
    inits, targets = problem()
    to = np.dtype(dtype)
    ps = [[float(x) for x in a.astype(to).ravel()] for a in inits]
    cs = [[float(x) for x in a.astype(to).ravel()] for a in targets]
    traj = []
    for _ in range(steps):
        ps = hand.step(ps, [hand.grad(p, c) for p, c in zip(ps, cs)])
        traj.append([np.array(pk, to).reshape(s) for pk, s in zip(ps, SHAPES)])
    return traj


def _run_with_lrs(bname, dtype, lrs, steps, alphas=None, clip=None, wd=0.1):
    """run_tape's loop, with ``opt.lr = lrs[t]`` set before step t + 1."""
    inits, targets = problem()
    tp = g.Tape(bname, dtype)
    params = [tp.param(x) for x in inits]
    opt = AdamW(tp, lr=0.2, betas=(0.8, 0.95), eps=1e-6, weight_decay=wd)
    for p, a in zip(params, alphas or [0.0] * len(params)):
        opt.add(p, alpha=a)
    if clip is not None:
        opt.set_clip(clip)
    mark = tp.mark()
    traj = []
    for t in range(steps):
        if t in lrs:
            opt.lr = lrs[t]
        tp.backward(tape_loss(tp, params, targets))
        opt.step()
        tp.reset_to(mark)
        traj.append([tp.backend.to_numpy(tp.value(p)) for p in params])
    return traj, opt


CASES = {
    "plain": dict(alphas=None, clip=None, lrs={}),
    "l2_clip": dict(alphas=ALPHAS, clip=3.0, lrs={}),
    "lr_changes": dict(alphas=ALPHAS, clip=None, lrs={3: 0.05, 5: 0.0, 6: 0.3}),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_adamw_trajectory_bit_exact_against_hand(bname, case, dtype):
    kw = CASES[case]
    got, _ = _run_with_lrs(bname, dtype, kw["lrs"], STEPS, kw["alphas"], kw["clip"])
    hand = HandW(0.2, 0.1, kw["lrs"], betas=(0.8, 0.95), eps=1e-6, alphas=kw["alphas"],
                 clip=kw["clip"], dtype=dtype)
    want = _hand_traj(hand, dtype, STEPS)
    for step, (ps, ws) in enumerate(zip(got, want)):
        for k, (a, b) in enumerate(zip(ps, ws)):
            assert bits_equal(a, b), f"{case} {dtype}: param {k} after step {step + 1}: " \
                                     f"{first_difference(a, b)}"


def test_lr_change_takes_effect_at_the_next_step_bitwise(bname):
    """The recorded step (kernel backends) follows an lr change: a run whose lr changes at
    step 4 differs from the constant run from step 4 on, and equals the hand run."""
    same, _ = _run_with_lrs(bname, "float64", {}, 6)
    changed, _ = _run_with_lrs(bname, "float64", {3: 0.01}, 6)
    for t in range(3):
        assert all(bits_equal(a, b) for a, b in zip(same[t], changed[t]))
    assert not any(bits_equal(a, b) for a, b in zip(same[3], changed[3]))


def test_adamw_matches_torch_adamw_20_steps(bname):
    torch = pytest.importorskip("torch")
    steps = 20
    ours = run_tape(bname, "float64", lambda tp: AdamW(tp, lr=0.05, weight_decay=0.1), steps)
    inits, targets = problem()
    ps = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inits]
    cs = [torch.tensor(c, dtype=torch.float64) for c in targets]
    opt = torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1)
    worst = 0.0
    for t in range(steps):
        opt.zero_grad()
        sum(((p - c) * (p - c)).sum() for p, c in zip(ps, cs)).backward()
        opt.step()
        for a, p in zip(ours["traj"][t], ps):
            b = p.detach().numpy()
            worst = max(worst, float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
    assert worst <= 1e-12, worst


def test_adamw_checkpoint_resumes_bit_exactly(bname, tmp_path):
    inits, targets = problem()
    def make():
        tp = g.Tape(bname, "float64")
        params = [tp.param(x) for x in inits]
        opt = AdamW(tp, lr=0.1, weight_decay=0.05)
        opt.add(params)
        return tp, params, opt

    def steps(tp, params, opt, n):
        mark = tp.mark()
        for _ in range(n):
            tp.backward(tape_loss(tp, params, targets))
            opt.step()
            tp.reset_to(mark)

    tp, params, opt = make()
    steps(tp, params, opt, 3)
    opt.lr = 0.07
    opt.save(tmp_path / "w.npz")
    steps(tp, params, opt, 3)
    want = [tp.backend.to_numpy(tp.value(p)) for p in params]
    tp2, params2, opt2 = make()
    opt2.load(tmp_path / "w.npz")
    assert opt2.lr == 0.07 and opt2.weight_decay == 0.05 and opt2.t == 3
    steps(tp2, params2, opt2, 3)
    for a, p in zip(want, params2):
        assert bits_equal(a, tp2.backend.to_numpy(tp2.value(p)))
    state = opt2.state_dict()
    state["hyper.weight_decay"] = np.array(-1.0)
    before = opt2.state_dict()
    with pytest.raises(ValueError, match="AdamW.load_state_dict: hyper.weight_decay is"):
        opt2.load_state_dict(state)
    assert all(bits_equal(np.asarray(before[k]), np.asarray(v))
               for k, v in opt2.state_dict().items() if np.asarray(v).dtype.kind == "f")
    sgd_state = dict(state, kind=np.array("adam"))
    with pytest.raises(ValueError, match="'adam' optimizer; expected 'adamw'"):
        opt2.load_state_dict(sgd_state)


@pytest.mark.parametrize("bad, error", [(-1e-3, ValueError), (math.nan, ValueError),
                                        (math.inf, ValueError), ("0.1", TypeError),
                                        (None, TypeError), (True, TypeError)])
def test_adamw_and_lr_setter_refuse_bad_values(bad, error):
    tp = g.Tape()
    w = tp.param(np.ones(3))
    with pytest.raises(error, match="AdamW: weight_decay is"):
        AdamW(tp, weight_decay=bad)
    with pytest.raises(error, match="AdamW: lr is"):
        AdamW(tp, lr=bad)
    opt = AdamW(tp, lr=0.1)
    opt.add(w)
    with pytest.raises(error, match=r"AdamW.lr: lr is .*; expected a finite real number >= 0"):
        opt.lr = bad
    assert opt.lr == 0.1
    with pytest.raises(TypeError, match="AdamW: betas is"):
        AdamW(tp, betas=0.9)
