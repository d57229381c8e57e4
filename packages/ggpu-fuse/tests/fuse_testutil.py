"""The rung-1 autoencoder step (Adam + L2 + clip) trained per node, fused, and on the tape."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
from ggpu_fuse import fuse
from ggpu_replay import capture

SIZES = [6, 32, 16, 32, 6]
BATCH = 40


def problem(seed: int = 0, batches: int = 5) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Initial [W1, b1, ...] and a cycle of minibatches (float64)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = np.sqrt(6.0 / (fan_in + fan_out)) * 0.5
        params += [rng.uniform(-bound, bound, (fan_in, fan_out)), np.zeros((1, fan_out))]
    return params, [rng.normal(size=(BATCH, SIZES[0])) for _ in range(batches)]


def model(x: g.Var, ps: list[g.Var]) -> g.Var:
    """relu hidden layers, linear output, mse against the input."""
    h = x
    for k in range(len(ps) // 2):
        h = h @ ps[2 * k] + ps[2 * k + 1]
        if k < len(ps) // 2 - 1:
            h = g.relu(h)
    return g.mse(h, x)


def register(opt, ps) -> None:
    for k, p in enumerate(ps):
        opt.add(p, alpha=1e-4 if k % 2 == 0 else 0.0)
    opt.set_clip(0.5)


def train(engine: str, device: str, episodes: int, dtype: str = "float64",
          inner: str = "plain"):
    """Loss trace and final parameters of ``episodes`` steps: engine tape / replay / fused."""
    init, data = problem()
    tp = g.Tape("numpy", dtype, inner=inner)
    ps = [tp.param(a) for a in init]
    if engine == "tape":
        opt = gopt.Adam(tp, lr=1e-2)
        register(opt, ps)
        mark = tp.mark()
        losses = []
        for e in range(episodes):
            loss = model(tp.const(data[e % len(data)]), ps)
            tp.backward(loss)
            opt.step()
            losses.append(loss.item())
            tp.reset_to(mark)
        return losses, [p.numpy() for p in ps], None
    x = tp.const(data[0])
    prog = capture(tp, model(x, ps), backend=device)
    if engine == "fused":
        prog = fuse(prog)
    opt = prog.adam(lr=1e-2)
    register(opt, ps)
    losses = []
    for e in range(episodes):
        prog.set_input(x, data[e % len(data)])
        prog.step(opt)
        losses.append(prog.loss())
    prog.sync_params(tp)
    return losses, [p.numpy() for p in ps], prog
