"""The gopt test problem and a hand computation of every optimizer in plain Python floats.

Problem: parameters p_k with targets c_k and loss sum_k sum((p_k - c_k) * (p_k - c_k)). The
tape's gradient of it is exactly d + d with d = p - c (the backward of mul(d, d) adds the two
contributions 1*d), which the hand computation reproduces element by element.
"""

from __future__ import annotations

import math
from typing import Any

import gtape as g
import numpy as np

SHAPES = [(3, 4), (4,), (2, 3)]
ALPHAS = [1e-2, 0.0, 3e-3]  # weights carry alpha, the "bias" (second) none


def f32(x: float) -> float:
    """Round a Python float to float32 (double rounding is innocuous for + - * / sqrt)."""
    return float(np.float32(x))


def problem(seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Initial parameter values and targets (float64)."""
    rng = np.random.default_rng(seed)
    inits = [rng.standard_normal(s) for s in SHAPES]
    targets = [rng.standard_normal(s) * 0.5 for s in SHAPES]
    return inits, targets


def tape_loss(tp: g.Tape, params: list[g.Var], targets: list[np.ndarray]) -> g.Var:
    """sum_k sum((p_k - c_k)^2), recorded on ``tp``."""
    loss = None
    for p, c in zip(params, targets):
        d = p - tp.const(c)
        s = g.sum(d * d)
        loss = s if loss is None else loss + s
    return loss


def run_tape(bname: str, dtype: str, make_opt, steps: int, alphas=None, clip=None,
             seed: int = 0) -> dict[str, Any]:
    """Train the problem on a tape with the mark/reset loop; params and grads after each step."""
    inits, targets = problem(seed)
    tp = g.Tape(bname, dtype)
    params = [tp.param(x) for x in inits]
    opt = make_opt(tp)
    for p, a in zip(params, alphas or [0.0] * len(params)):
        opt.add(p, alpha=a)
    if clip is not None:
        opt.set_clip(clip)
    mark = tp.mark()
    be = tp.backend
    traj, grads, norms = [], [], []
    for _ in range(steps):
        tp.backward(tape_loss(tp, params, targets))
        grads.append([be.to_numpy(tp.grad(p)) for p in params])
        opt.step()
        norms.append(opt.last_norm)
        tp.reset_to(mark)
        traj.append([be.to_numpy(tp.value(p)) for p in params])
    return {"traj": traj, "grads": grads, "norms": norms, "opt": opt, "tp": tp, "params": params}


# ---------------------------------------------------------------- the hand computation
class Hand:
    """One optimizer computed element by element in Python floats (``rnd`` rounds each op)."""

    def __init__(self, kind: str, lr: float, betas=(0.9, 0.999), eps=1e-8, alphas=None,
                 clip=None, dtype: str = "float64") -> None:
        self.kind, self.lr, self.b1, self.b2, self.eps = kind, lr, betas[0], betas[1], eps
        self.alphas, self.clip = alphas, clip
        self.rnd = f32 if dtype == "float32" else (lambda x: x)
        self.t, self.b1p, self.b2p = 0, 1.0, 1.0
        self.m: list[list[float]] | None = None
        self.v: list[list[float]] | None = None
        self.norm = None

    def grad(self, p: list[float], c: list[float]) -> list[float]:
        """The loss gradient d + d, d = p - c."""
        r = self.rnd
        out = []
        for pi, ci in zip(p, c):
            d = r(pi - ci)
            out.append(r(d + d))
        return out

    def clipped(self, gs: list[list[float]]) -> list[list[float]]:
        """The gradients scaled to the global norm ``clip`` (serial sums of squares, in
        order); the norm is kept in ``self.norm``."""
        r = self.rnd
        total = None
        for gk in gs:
            s = None
            for x in gk:
                sq = r(x * x)
                s = sq if s is None else r(s + sq)
            total = s if total is None else r(total + s)
        norm = r(math.sqrt(total))
        self.norm = norm
        mx = r(self.clip)
        scale = r(mx / norm) if norm > mx else 1.0
        return [[r(x * scale) for x in gk] for gk in gs]

    def step(self, ps: list[list[float]], gs: list[list[float]]) -> list[list[float]]:
        """New parameter values (flat lists, row-major) from values and gradients."""
        r = self.rnd
        self.t += 1
        if self.m is None:
            self.m = [[0.0] * len(p) for p in ps]
            self.v = [[0.0] * len(p) for p in ps]
        if self.clip is not None:
            gs = self.clipped(gs)
        if self.alphas is not None:
            gs = [[r(x + r(r(a) * pi)) if a != 0.0 else x for x, pi in zip(gk, pk)]
                  for gk, pk, a in zip(gs, ps, self.alphas)]
        if self.kind == "sgd":
            lr = r(self.lr)
            return [[r(pi - r(gi * lr)) for pi, gi in zip(pk, gk)] for pk, gk in zip(ps, gs)]
        self.b1p = self.b1p * self.b1
        self.b2p = self.b2p * self.b2
        lr_t = self.lr * math.sqrt(1.0 - self.b2p) / (1.0 - self.b1p)
        b1, b2 = r(self.b1), r(self.b2)
        c1, c2 = r(1.0 - self.b1), r(1.0 - self.b2)
        lr_t_r, eps = r(lr_t), r(self.eps)
        out = []
        for k, (pk, gk) in enumerate(zip(ps, gs)):
            mk, vk, new = self.m[k], self.v[k], []
            for j, (pi, gi) in enumerate(zip(pk, gk)):
                mk[j] = r(r(mk[j] * b1) + r(gi * c1))
                vk[j] = r(r(vk[j] * b2) + r(r(gi * gi) * c2))
                upd = r(r(mk[j] * lr_t_r) / r(r(math.sqrt(vk[j])) + eps))
                new.append(r(pi - upd))
            out.append(new)
        return out


def run_hand(hand: Hand, steps: int, seed: int = 0, dtype: str = "float64"):
    """The hand trajectory: parameter values (as arrays of ``dtype``) after each step."""
    inits, targets = problem(seed)
    to = np.dtype(dtype)
    ps = [[float(x) for x in a.astype(to).ravel()] for a in inits]
    cs = [[float(x) for x in a.astype(to).ravel()] for a in targets]
    traj, grads = [], []
    for _ in range(steps):
        gs = [hand.grad(p, c) for p, c in zip(ps, cs)]
        grads.append([np.array(gk, to).reshape(s) for gk, s in zip(gs, SHAPES)])
        ps = hand.step(ps, gs)
        traj.append([np.array(pk, to).reshape(s) for pk, s in zip(ps, SHAPES)])
    return traj, grads
