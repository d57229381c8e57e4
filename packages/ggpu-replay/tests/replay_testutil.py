"""Shared pieces of the replay tests: a small autoencoder problem trained two ways."""

from __future__ import annotations

from typing import Any

import gopt
import gtape as g
import numpy as np
from ggpu_replay import capture

DIM, HIDDEN, BATCH = 6, (12, 5, 12), 16


def ae_problem(seed: int = 0, batches: int = 5) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Initial AE parameters [W1, b1, ...] and a cycle of minibatches (float64)."""
    rng = np.random.default_rng(seed)
    sizes = [DIM, *HIDDEN, DIM]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        params += [rng.uniform(-bound, bound, (fan_in, fan_out)), rng.normal(0, 0.1, (1, fan_out))]
    data = [rng.normal(size=(BATCH, DIM)) for _ in range(batches)]
    return params, data


def ae_loss(x: g.Var, ps: list[g.Var]) -> g.Var:
    """mse(AE(x), x): tanh/relu hidden layers, linear output."""
    h = x
    for k in range(len(ps) // 2):
        h = h @ ps[2 * k] + ps[2 * k + 1]
        if k < len(ps) // 2 - 1:
            h = g.tanh(h) if k % 2 == 0 else g.relu(h)
    return g.mse(h, x)


def make_opt(kind: str, owner: Any, clip: float | None) -> Any:
    """Adam or SGD on a tape (gopt) or a program (its device optimizer)."""
    if isinstance(owner, g.Tape):
        opt = gopt.Adam(owner, lr=1e-2) if kind == "adam" else gopt.SGD(owner, lr=0.05)
    else:
        opt = owner.adam(lr=1e-2) if kind == "adam" else owner.sgd(lr=0.05)
    return opt


def register(opt: Any, ps: list[g.Var], clip: float | None) -> None:
    """Weights carry L2 1e-3, biases none; optional global-norm clipping."""
    for k, p in enumerate(ps):
        opt.add(p, alpha=1e-3 if k % 2 == 0 else 0.0)
    if clip is not None:
        opt.set_clip(clip)


def train_tape(backend: str, dtype: str, kind: str, episodes: int, clip: float | None = 0.5,
               seed: int = 0, inner: str = "plain") -> tuple[list[float], list[np.ndarray]]:
    """The CPU reference: mark/reset minibatch loop with gopt; loss trace and final params."""
    init, data = ae_problem(seed)
    tp = g.Tape(backend, dtype, inner=inner)
    ps = [tp.param(a) for a in init]
    opt = make_opt(kind, tp, clip)
    register(opt, ps, clip)
    mark = tp.mark()
    losses = []
    for e in range(episodes):
        loss = ae_loss(tp.const(data[e % len(data)]), ps)
        tp.backward(loss)
        opt.step()
        losses.append(float(tp.backend.to_numpy(tp.value(loss))))
        tp.reset_to(mark)
    out = [np.array(tp.backend.to_numpy(tp.value(p))) for p in ps]
    tp.close()
    return losses, out


def train_replay(backend: str, device: str, dtype: str | None, kind: str, episodes: int,
                 clip: float | None = 0.5, seed: int = 0, whole_step: bool = True,
                 tape_dtype: str = "float64", inner: str = "plain"
                 ) -> tuple[list[float], list[np.ndarray]]:
    """Capture episode 0 on a ``backend`` tape, replay every episode on ``device``."""
    init, data = ae_problem(seed)
    tp = g.Tape(backend, tape_dtype, inner=inner)
    ps = [tp.param(a) for a in init]
    x = tp.const(data[0])
    prog = capture(tp, ae_loss(x, ps), backend=device, dtype=dtype)
    dopt = make_opt(kind, prog, clip)
    register(dopt, ps, clip)
    losses = []
    for e in range(episodes):
        prog.set_input(x, data[e % len(data)])
        if whole_step:
            prog.step(dopt)
        else:
            prog.forward()
            prog.backward()
            dopt.step()
        losses.append(prog.loss())
    prog.sync_params(tp)
    out = [np.array(tp.backend.to_numpy(tp.value(p))) for p in ps]
    tp.close()
    return losses, out
