"""A small reference training program wired for verification (the docs' and tests' example,
and a runner for ``gverify replay``): a 4-H-1 tanh regressor trained with Adam on minibatches
drawn by a seeded generator, logged, checkpointed and resumable on any engine.

``train(cfg, ...)`` runs ``cfg.steps`` steps (engine "tape": the eager tape on ``cfg.backend``;
engine "replay": the step captured once with ggpu-replay on sim/cpu/cuda). ``probe`` (an object
with any of ``forward(step, tp, loss)``, ``backward(step, tp, loss)``, ``update(step, tp,
opt)``) is called inside each tape step: drills and traces hook in there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gopt
import gtape as g
import numpy as np

from .checkpoint import load_checkpoint, read_checkpoint
from .runlog import RunLog

RUNNER = "gverify.example:replay_runner"


@dataclass(frozen=True)
class Config:
    """Everything that defines a run of the example."""

    backend: str = "numpy"
    engine: str = "tape"  # "tape" or "replay"
    dtype: str = "float64"
    seed: int = 0
    steps: int = 12
    n: int = 64
    batch: int = 16
    hidden: int = 8
    lr: float = 0.05


def _data(cfg: Config) -> tuple[np.ndarray, np.ndarray, np.random.Generator, np.random.Generator]:
    data, init, order = (np.random.default_rng(s)
                         for s in np.random.SeedSequence(cfg.seed).spawn(3))
    x = data.uniform(-1.0, 1.0, size=(cfg.n, 4))
    y = x[:, :1] * 0.5 - x[:, 1:2] * x[:, 2:3] + 0.25 * x[:, 3:4]  # + - * only: same bits
    return x, y, init, order


def _params(tp: g.Tape, cfg: Config, init: np.random.Generator) -> list[g.Var]:
    b1, b2 = math.sqrt(6.0 / (4 + cfg.hidden)), math.sqrt(6.0 / (cfg.hidden + 1))
    return [tp.param(init.uniform(-b1, b1, (4, cfg.hidden))), tp.param(np.zeros((1, cfg.hidden))),
            tp.param(init.uniform(-b2, b2, (cfg.hidden, 1))), tp.param(np.zeros((1, 1)))]


def loss_of(params: list[g.Var], xv: g.Var, yv: g.Var) -> g.Var:
    """mse(tanh(x W1 + b1) W2 + b2, y)."""
    w1, b1, w2, b2 = params
    return g.mse(g.tanh(xv @ w1 + b1) @ w2 + b2, yv)


def train(cfg: Config, log: Any = None, checkpoint_every: int = 0, checkpoint_dir: Any = None,
          resume: Any = None, probe: Any = None) -> list[float]:
    """Run ``cfg`` (from ``resume``, a checkpoint directory, if given) to step ``cfg.steps``;
    returns the losses of the steps run. ``log`` is a RunLog path (checkpoints every
    ``checkpoint_every`` steps into ``checkpoint_dir``)."""
    if cfg.engine not in ("tape", "replay"):
        raise ValueError(f"train: engine is {cfg.engine!r}; expected 'tape' or 'replay'")
    x, y, init, order = _data(cfg)
    tp = g.Tape("numpy" if cfg.engine == "replay" else cfg.backend, cfg.dtype)
    params = _params(tp, cfg, init)
    mark = tp.mark()
    if cfg.engine == "replay":
        from ggpu_replay import capture

        xv, yv = tp.const(np.zeros((cfg.batch, 4))), tp.const(np.zeros((cfg.batch, 1)))
        prog = capture(tp, loss_of(params, xv, yv), backend=cfg.backend)
        opt: Any = prog.adam(lr=cfg.lr)
        store: Any = prog
    else:
        opt, store = gopt.Adam(tp, lr=cfg.lr), tp
    opt.add(params)
    start = 0
    if resume is not None:
        start = load_checkpoint(resume, store, opt, rng=order).step
    meta = {"runner": RUNNER, "config": asdict(cfg)}
    rlog = None
    if log is not None:
        rlog = RunLog(log, checkpoint_every=checkpoint_every, checkpoint_dir=checkpoint_dir,
                      meta=meta, resume_at=start if resume is not None and Path(log).exists()
                      and _has_step(log, start) else None)
    losses = []
    try:
        for step in range(start + 1, cfg.steps + 1):
            idx = order.permutation(cfg.n)[:cfg.batch]
            if cfg.engine == "replay":
                prog.set_input(xv, x[idx])
                prog.set_input(yv, y[idx])
                prog.step(opt)
                loss: Any = prog.loss()
            else:
                loss = loss_of(params, tp.const(x[idx]), tp.const(y[idx]))
                _call(probe, "forward", step, tp, loss)
                tp.backward(loss)
                _call(probe, "backward", step, tp, loss)
                opt.step()
                _call(probe, "update", step, tp, opt)
            losses.append(float(loss) if cfg.engine == "replay" else loss.item())
            if rlog is not None:
                rlog.record(step, store, opt, loss=loss, rng=order)
            if cfg.engine == "tape":
                tp.reset_to(mark)
    finally:
        if rlog is not None:
            rlog.close()
    return losses


def _has_step(log: Any, step: int) -> bool:
    from .runlog import read_log

    try:
        return step == 0 or any(ln["step"] == step for ln in read_log(log)[1])
    except ValueError:
        return False


def _call(probe: Any, name: str, *args: Any) -> None:
    fn = getattr(probe, name, None)
    if fn is not None:
        fn(*args)


def replay_runner(checkpoint: Any, steps: int, backend: str, log: Any) -> None:
    """``gverify replay``'s runner: resume the example from ``checkpoint`` on ``backend`` and
    write ``steps`` more steps to the RunLog ``log``."""
    ck = read_checkpoint(checkpoint)
    cfg = Config(**ck.meta["config"])
    engine = cfg.engine if backend in ("sim", "cpu", "cuda") else "tape"
    cfg = replace(cfg, backend=backend, engine=engine, steps=ck.step + steps)
    train(cfg, log=log, resume=ck.path)
