"""The ``example`` task: a 4-H-1 tanh regressor with dropout, trained with Adam on
minibatches -- the dispute protocol's small reference program (tests, docs).

Every random bit comes from ``gtape.rng.key(seed)`` split four ways: the data, the initial
weights, the batch order (step k: the rows sorted by the words of ``order.fold(k)``) and
dropout (step k: ``drop.fold(k)``), so step k depends on (config, k) and the state only.
"""

from __future__ import annotations

import math

import gopt
import gtape as g
import numpy as np

from .task import Session, Task, check_int, check_real


class ExampleTask(Task):
    """mse(dropout(tanh(x W1 + b1)) W2 + b2, y) on ``n`` points, ``batch`` a step."""

    NAME = "example"
    DEFAULTS = {"steps": 12, "dtype": "float64", "inner": "plain", "seed": 0, "n": 64,
                "batch": 16, "hidden": 8, "lr": 0.05, "dropout": 0.25}

    def check(self, cfg: dict) -> None:
        """n in [2, 65536], batch in [1, n], hidden in [1, 1024], lr in [0, 10], dropout in
        [0, 0.9]."""
        n = check_int(self.NAME, cfg, "n", 2, 65536)
        check_int(self.NAME, cfg, "batch", 1, n)
        check_int(self.NAME, cfg, "hidden", 1, 1024)
        check_real(self.NAME, cfg, "lr", 0.0, 10.0)
        check_real(self.NAME, cfg, "dropout", 0.0, 0.9)

    def new_session(self, backend: str) -> ExampleSession:
        """A session at step 0."""
        return ExampleSession(self, backend)


def _uniform(key: g.rng.Key, shape: tuple[int, ...], bound: float) -> np.ndarray:
    return -bound + (bound - -bound) * g.rng.uniform(key, shape)


class ExampleSession(Session):
    """The example's model, Adam and data on one tape."""

    def __init__(self, task: ExampleTask, backend: str) -> None:
        super().__init__(task, backend)
        cfg = task.config
        data, init, self.order, self.drop = g.rng.key(cfg["seed"]).split(4)
        x = 2.0 * g.rng.uniform(data, (cfg["n"], 4)) - 1.0
        self.x = x
        self.y = x[:, :1] * 0.5 - x[:, 1:2] * x[:, 2:3] + 0.25 * x[:, 3:4]  # + - * only
        h = cfg["hidden"]
        k1, k2 = init.split(2)
        tp = self.tp
        self.params = [tp.param(_uniform(k1, (4, h), math.sqrt(6.0 / (4 + h)))),
                       tp.param(np.zeros((1, h))),
                       tp.param(_uniform(k2, (h, 1), math.sqrt(6.0 / (h + 1)))),
                       tp.param(np.zeros((1, 1)))]
        opt = gopt.Adam(tp, lr=cfg["lr"])
        opt.add(self.params)
        self.ready(opt)

    def batch(self, k: int) -> list[tuple[str, np.ndarray]]:
        """Step k's rows: sorted by the words of ``order.fold(k)``, the first ``batch``."""
        cfg = self.task.config
        idx = np.argsort(g.rng.bits(self.order.fold(k), cfg["n"]), kind="stable")[:cfg["batch"]]
        return [("x", self.x[idx]), ("y", self.y[idx])]

    def forward(self, k: int) -> g.Var:
        """The step's loss on its batch."""
        (_, xb), (_, yb) = self.batch(k)
        w1, b1, w2, b2 = self.params
        h = g.tanh(self.tp.const(xb) @ w1 + b1)
        p = self.task.config["dropout"]
        if p > 0:
            h = g.dropout(h, p, self.drop.fold(k))
        return g.mse(h @ w2 + b2, self.tp.const(yb))
