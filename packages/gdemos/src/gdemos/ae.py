"""Rungs 1 and 2: train the autoencoder with Adam and the mark/reset minibatch loop.

Engine ``tape`` (rung 1): every step is recorded and differentiated on the tape. Engine
``replay`` (rung 2): one episode is recorded on a numpy tape and captured (ggpu-replay); every
step replays it on the device backend (sim or cuda), only the loss coming back. Engine
``fused`` (rung 4): the captured step fused into a few generated kernels (ggpu-fuse).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gtape as g
import numpy as np
from gopt import Adam

from . import data, model

# the bars rung 1 must reach (checked by the ladder and the tests)
MSE_BAR = 1e-4


@dataclass(frozen=True)
class AEConfig:
    """Everything that defines a run (the JSON summary repeats it)."""

    backend: str = "numpy"
    dtype: str = "float64"
    engine: str = "tape"  # "tape" (rung 1), "replay" (rung 2) or "fused" (rung 4): sim / cuda
    seed: int = 0
    epochs: int = 60
    n: int = data.N
    noise: float = data.NOISE
    batch: int = 200
    lr: float = 1e-3
    alpha: float = 1e-5  # L2 weight of every W (biases: 0)


@dataclass
class AEResult:
    """What a run produced: loss trace, per-epoch full-data MSE, timings, final weights."""

    config: AEConfig
    initial_mse: float
    final_mse: float
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)  # minibatch loss before each step
    epoch_mse: list[float] = field(default_factory=list)  # full-data MSE after each epoch
    params: list[np.ndarray] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The JSON-ready summary (no arrays)."""
        return {"rung": "ae", **asdict(self.config), "initial_mse": self.initial_mse,
                "final_mse": self.final_mse, "steps": self.steps,
                "seconds": round(self.seconds, 3), "mse_bar": MSE_BAR}


def full_mse(tp: g.Tape, params: list[g.Var], x: np.ndarray) -> float:
    """MSE of the whole data set through the current weights (recorded, then dropped)."""
    mark = tp.mark()
    xv = tp.const(x)
    loss = g.mse(model.forward(xv, params), xv)
    value = float(tp.backend.to_numpy(tp.value(loss)))
    tp.reset_to(mark)
    return value


def register(opt: Any, params: list[g.Var], cfg: AEConfig) -> None:
    """Weights carry L2 ``cfg.alpha``, biases none (a gopt or a device optimizer)."""
    for k, p in enumerate(params):
        opt.add(p, alpha=cfg.alpha if k % 2 == 0 else 0.0)


class TapeSteps:
    """Rung 1's step: record the episode, backward, Adam, reset."""

    def __init__(self, tp: g.Tape, params: list[g.Var], cfg: AEConfig) -> None:
        self.tp, self.params = tp, params
        self.opt = Adam(tp, lr=cfg.lr)
        register(self.opt, params, cfg)
        self.mark = tp.mark()

    def step(self, xb: np.ndarray) -> float:
        """One training step on minibatch ``xb``; returns its loss (before the update)."""
        tp = self.tp
        xv = tp.const(xb)
        loss = g.mse(model.forward(xv, self.params), xv)
        tp.backward(loss)
        self.opt.step()
        value = float(tp.backend.to_numpy(tp.value(loss)))
        tp.reset_to(self.mark)
        return value

    def sync(self) -> None:
        """The tape already holds the trained weights."""


def train(cfg: AEConfig, progress: Callable[[int, int], Any] | None = None) -> AEResult:
    """Run rung 1 or 2 under ``cfg``; ``progress(total_steps, epochs)`` may return a tqdm bar."""
    x = data.manifold(cfg.seed, cfg.n, cfg.noise)
    _, init_rng, order_rng = data.rngs(cfg.seed)
    if cfg.engine in ("replay", "fused"):
        from .replay_ae import ReplaySteps, check_replay_config

        check_replay_config(cfg)
        tp = g.Tape("numpy", cfg.dtype)  # records the episode; evaluates full-data MSE
    elif cfg.engine == "tape":
        tp = g.Tape(cfg.backend, cfg.dtype)
    else:
        raise ValueError(f"train: engine {cfg.engine!r}; expected 'tape', 'replay' or 'fused'")
    params = [tp.param(a) for a in model.init_params(init_rng, model.layer_sizes(x.shape[1]))]
    steps = (TapeSteps if cfg.engine == "tape" else ReplaySteps)(tp, params, cfg)
    initial = full_mse(tp, params, x)
    losses: list[float] = []
    epoch_mse: list[float] = []
    per_epoch = -(-cfg.n // cfg.batch)
    bar = progress(cfg.epochs * per_epoch, cfg.epochs) if progress else None
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        for idx in data.batch_order(order_rng, cfg.n, cfg.batch):
            losses.append(steps.step(x[idx]))
            if bar is not None:
                bar.set_postfix_str(f"loss {losses[-1]:.3e}", refresh=False)
                bar.update(1)
        steps.sync()
        epoch_mse.append(full_mse(tp, params, x))
        if bar is not None:
            bar.set_description(f"epoch {epoch + 1}/{cfg.epochs} mse {epoch_mse[-1]:.3e}")
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    final = epoch_mse[-1] if epoch_mse else initial
    weights = [np.array(tp.backend.to_numpy(tp.value(p))) for p in params]
    tp.close()
    return AEResult(cfg, initial, final, len(losses), seconds, losses, epoch_mse, weights)
