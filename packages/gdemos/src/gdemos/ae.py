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
from pathlib import Path
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
    inner: str = "plain"  # the inner-product contract ("plain" or "fma": gtape.Tape's inner)
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


@dataclass(frozen=True)
class Control:
    """Verification hooks of a run (gverify): a run log, checkpoints, resume, an early stop,
    and a probe called inside each tape step (drills and traces)."""

    log: Path | None = None  # a gverify RunLog: one line per step
    checkpoint_every: int = 0  # a checkpoint every K steps (needs checkpoint_dir)
    checkpoint_dir: Path | None = None
    resume: Path | None = None  # a checkpoint directory to continue from
    stop: int | None = None  # the last step to run (default: every epoch)
    # an object with any of forward(step, tp, loss), backward(step, tp, loss),
    # update(step, tp, opt): called inside each step of the tape engine
    probe: Any = None


RUNNER = "gdemos.rung_verify:replay_runner"  # what `gverify replay` resumes a checkpoint with


class TapeSteps:
    """Rung 1's step: record the episode, backward, Adam, reset."""

    def __init__(self, tp: g.Tape, params: list[g.Var], cfg: AEConfig) -> None:
        self.tp, self.params = tp, params
        self.opt = Adam(tp, lr=cfg.lr)
        register(self.opt, params, cfg)
        self.mark = tp.mark()
        self.store = tp  # what gverify digests and checkpoints (with self.opt)
        self.probe: Any = None

    def step(self, xb: np.ndarray) -> float:
        """One training step on minibatch ``xb``; returns its loss (before the update)."""
        tp, probe, k = self.tp, self.probe, self.opt.t + 1
        xv = tp.const(xb)
        loss = g.mse(model.forward(xv, self.params), xv)
        _call(probe, "forward", k, tp, loss)
        tp.backward(loss)
        _call(probe, "backward", k, tp, loss)
        self.opt.step()
        _call(probe, "update", k, tp, self.opt)
        value = float(tp.backend.to_numpy(tp.value(loss)))
        tp.reset_to(self.mark)
        return value

    def sync(self) -> None:
        """The tape already holds the trained weights."""


def _call(probe: Any, name: str, *args: Any) -> None:
    fn = getattr(probe, name, None)
    if fn is not None:
        fn(*args)


def train(cfg: AEConfig, progress: Callable[[int, int], Any] | None = None,
          ctl: Control | None = None) -> AEResult:
    """Run rung 1 or 2 under ``cfg``; ``progress(total_steps, epochs)`` may return a tqdm bar.

    ``ctl`` adds verification (gverify): a run log, checkpoints every K steps (parameters, Adam
    state, the minibatch order's RNG state at the start of the step's epoch, the step), a
    resume from one of them (bit-identical to the uninterrupted run), an early stop, a probe.
    """
    ctl = ctl or Control()
    x = data.manifold(cfg.seed, cfg.n, cfg.noise)
    _, init_rng, order_rng = data.rngs(cfg.seed)
    if cfg.engine in ("replay", "fused"):
        from .replay_ae import ReplaySteps, check_replay_config

        check_replay_config(cfg)
        tp = g.Tape("numpy", cfg.dtype, inner=cfg.inner)  # records the episode; full-data MSE
    elif cfg.engine == "tape":
        tp = g.Tape(cfg.backend, cfg.dtype, inner=cfg.inner)
    else:
        raise ValueError(f"train: engine {cfg.engine!r}; expected 'tape', 'replay' or 'fused'")
    params = [tp.param(a) for a in model.init_params(init_rng, model.layer_sizes(x.shape[1]))]
    steps = (TapeSteps if cfg.engine == "tape" else ReplaySteps)(tp, params, cfg)
    if ctl.probe is not None:
        if cfg.engine != "tape":
            raise ValueError("train: a probe runs inside tape steps; engine is "
                             f"{cfg.engine!r}")
        steps.probe = ctl.probe
    per_epoch = -(-cfg.n // cfg.batch)
    done = 0  # steps already taken (resume)
    if ctl.resume is not None:
        from gverify import load_checkpoint

        done = load_checkpoint(ctl.resume, steps.store, steps.opt, rng=order_rng).step
        steps.sync()
    rlog = _run_log(cfg, ctl, done)
    initial = full_mse(tp, params, x)
    losses: list[float] = []
    epoch_mse: list[float] = []
    last = cfg.epochs * per_epoch if ctl.stop is None else min(ctl.stop, cfg.epochs * per_epoch)
    bar = progress(last - done, cfg.epochs) if progress else None
    start = time.perf_counter()
    first_epoch = (done - 1) // per_epoch if done else 0  # the epoch of the resumed step
    step = first_epoch * per_epoch
    try:
        for epoch in range(first_epoch, cfg.epochs):
            order_state = order_rng.bit_generator.state  # checkpoints resume from here
            for idx in data.batch_order(order_rng, cfg.n, cfg.batch):
                step += 1
                if step <= done:
                    continue
                if step > last:
                    break
                losses.append(steps.step(x[idx]))
                if rlog is not None:
                    rlog.record(step, steps.store, steps.opt, loss=losses[-1], rng=order_state)
                if bar is not None:
                    bar.set_postfix_str(f"loss {losses[-1]:.3e}", refresh=False)
                    bar.update(1)
            if step > last or (epoch + 1) * per_epoch > last:
                break
            steps.sync()
            epoch_mse.append(full_mse(tp, params, x))
            if bar is not None:
                bar.set_description(f"epoch {epoch + 1}/{cfg.epochs} mse {epoch_mse[-1]:.3e}")
    finally:
        if rlog is not None:
            rlog.close()
    steps.sync()
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    final = epoch_mse[-1] if epoch_mse else initial
    weights = [np.array(tp.backend.to_numpy(tp.value(p))) for p in params]
    tp.close()
    return AEResult(cfg, initial, final, len(losses), seconds, losses, epoch_mse, weights)


def _run_log(cfg: AEConfig, ctl: Control, done: int) -> Any:
    """The gverify RunLog ``ctl`` asks for (appending after step ``done`` on a resume)."""
    if ctl.log is None:
        if ctl.checkpoint_every:
            raise ValueError("train: checkpoints are named in the run log; set Control.log")
        return None
    from gverify import RunLog

    resume_at = done if ctl.resume is not None and Path(ctl.log).exists() else None
    if resume_at is not None:
        from gverify import read_log

        try:
            if not any(ln["step"] == done for ln in read_log(ctl.log)[1]):
                resume_at = None  # another run's log, or one that never reached the step
        except ValueError:
            resume_at = None
    return RunLog(ctl.log, checkpoint_every=ctl.checkpoint_every,
                  checkpoint_dir=ctl.checkpoint_dir,
                  meta={"runner": RUNNER, "config": asdict(cfg)}, resume_at=resume_at)
