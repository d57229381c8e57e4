"""Rung 5's problem and its local reference: linear regression by full-batch gradient descent.

The per-example loss is ``mse(x @ w + b, y)`` for one example (x: (1, d), y: (1, 1)). One
iteration needs every example's loss and gradient; how they are computed is the engine's
business (the tape here, emitted C on a Dask cluster in ``swarm_dask``, emitted CUDA in
``swarm_gpu``). What is *not* the engine's business is the reduction: ``step`` sums the
per-example rows serially in example order (``np.add.accumulate``: row 0, then + row 1, ...),
divides by N and takes one SGD step, each operation rounded once. Every engine feeds the same
``step`` with per-example rows in example order, so the trained parameters are bitwise equal
whenever the per-example rows are, whatever the partitioning or the number of workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import gtape as g
import numpy as np
from gemit import emit_c


@dataclass(frozen=True)
class SwarmConfig:
    """The regression problem and its training schedule."""

    n: int = 10_000
    d: int = 16
    iterations: int = 12
    lr: float = 0.35
    seed: int = 0
    noise: float = 0.1
    dtype: str = "float64"

    def key(self) -> tuple:
        """What determines the data (workers cache it by this key)."""
        return (self.n, self.d, self.seed, self.noise, self.dtype)

    def as_dict(self) -> dict:
        """The config as JSON-ready values."""
        return asdict(self)


@dataclass
class History:
    """One training run: the parameters after every iteration and the mean loss before it."""

    engine: str
    params: list[np.ndarray] = field(default_factory=list)  # params[0]: the initial ones
    losses: list[float] = field(default_factory=list)  # mean loss at params[k], k < iterations
    seconds: list[float] = field(default_factory=list)  # per iteration: computing the rows
    extra: dict = field(default_factory=dict)

    @property
    def final(self) -> np.ndarray:
        """The trained parameter vector [w (d), b]."""
        return self.params[-1]


def make_data(cfg: SwarmConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(examples (n, d + 1) = [x | y], w_true (d,), b_true), seeded; rounded to cfg.dtype once."""
    rng = np.random.default_rng(cfg.seed)
    w_true = rng.normal(size=cfg.d)
    b_true = float(rng.normal())
    X = rng.normal(size=(cfg.n, cfg.d))
    y = X @ w_true + b_true + cfg.noise * rng.normal(size=cfg.n)
    ex = np.concatenate([X, y[:, None]], axis=1).astype(cfg.dtype)
    return ex, w_true, b_true


def loss_of(w: g.Var, b: g.Var, x: g.Var, y: g.Var) -> g.Var:
    """One example's loss: mse(x @ w + b, y) with w (d, 1), b (1,), x (1, d), y (1, 1)."""
    return g.mse(x @ w + b, y)


def initial_params(cfg: SwarmConfig) -> np.ndarray:
    """The starting vector [w (d), b]: zeros."""
    return np.zeros(cfg.d + 1, cfg.dtype)


def emit_source(cfg: SwarmConfig) -> str:
    """The emitted C of ``loss_of`` for one example (params [w, b], example [x, y])."""
    with g.Tape("numpy", cfg.dtype) as tp:
        w, b = tp.param(np.zeros((cfg.d, 1))), tp.param(np.zeros(1))
        x, y = tp.const(np.zeros((1, cfg.d))), tp.const(np.zeros((1, 1)))
        return emit_c(tp, loss_of(w, b, x, y), params=[w, b], inputs=[x, y], name="grad")


def step(params: np.ndarray, losses: np.ndarray, grads: np.ndarray,
         lr: float) -> tuple[np.ndarray, float]:
    """One full-batch GD step from per-example rows in example order: (new params, mean loss).

    The fixed reduction: serial sums in example order, then / n, then params - lr * mean.
    """
    n = losses.shape[0]
    dt = params.dtype.type
    total = np.add.accumulate(grads, axis=0)[-1]
    mean_g = total / dt(n)
    mean_loss = np.add.accumulate(losses)[-1] / dt(n)
    return params - dt(lr) * mean_g, float(mean_loss)


class TapeRows:
    """Per-example losses and gradients computed by the tape itself, one episode per example."""

    def __init__(self, cfg: SwarmConfig, backend: str = "numpy") -> None:
        self.cfg = cfg
        self.tp = g.Tape(backend, cfg.dtype)
        self.w = self.tp.param(np.zeros((cfg.d, 1)))
        self.b = self.tp.param(np.zeros(1))
        self.mark = self.tp.mark()

    def __call__(self, params: np.ndarray, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(losses (n,), grads (n, d + 1)) at ``params`` for the rows of ``examples``."""
        d, tp, be = self.cfg.d, self.tp, self.tp.backend
        tp.set_value(self.w, params[:d].reshape(d, 1))
        tp.set_value(self.b, params[d:])
        n = examples.shape[0]
        losses = np.empty(n, self.cfg.dtype)
        grads = np.empty((n, d + 1), self.cfg.dtype)
        for i in range(n):
            x = tp.const(examples[i:i + 1, :d])
            y = tp.const(examples[i:i + 1, d:])
            loss = loss_of(self.w, self.b, x, y)
            tp.backward(loss)
            losses[i] = be.to_numpy(tp.value(loss)).reshape(())
            grads[i, :d] = be.to_numpy(tp.grad(self.w)).ravel()
            grads[i, d:] = be.to_numpy(tp.grad(self.b)).ravel()
            tp.reset_to(self.mark)
        return losses, grads

    def close(self) -> None:
        """Release the tape."""
        self.tp.close()


Rows = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
Progress = Callable[[int, float, float], None]


def train(cfg: SwarmConfig, rows: Rows, engine: str,
          progress: Progress | None = None) -> History:
    """Full-batch GD: ``rows(params)`` gives every example's (losses, grads) in example order."""
    h = History(engine)
    params = initial_params(cfg)
    h.params.append(params)
    for it in range(cfg.iterations):
        t0 = time.perf_counter()
        losses, grads = rows(params)
        h.seconds.append(time.perf_counter() - t0)
        params, mean_loss = step(params, losses, grads, cfg.lr)
        h.params.append(params)
        h.losses.append(mean_loss)
        if progress is not None:
            progress(it, mean_loss, h.seconds[-1])
    return h


def train_local(cfg: SwarmConfig, progress: Progress | None = None,
                backend: str = "numpy") -> History:
    """The reference: the same training with every per-example row from the tape itself."""
    ex = make_data(cfg)[0]
    tape = TapeRows(cfg, backend)
    try:
        return train(cfg, lambda p: tape(p, ex), "tape", progress)
    finally:
        tape.close()


def same_bits(a: History, b: History) -> bool:
    """Whether two runs have bitwise equal parameters after every iteration (and losses)."""
    if len(a.params) != len(b.params):
        return False
    return all(x.tobytes() == y.tobytes() for x, y in zip(a.params, b.params)) and \
        np.array(a.losses).tobytes() == np.array(b.losses).tobytes()
