"""Rung 8's CNN as a gverify task (``cnn``): the run ``gdemos cnn`` trains, step by step, so
the dispute protocol can commit to it, audit it and recompute any one of its steps.

Step k (1-based) is rung 8's step k exactly (``gdemos.cnn``): epoch ``(k-1) // 44``'s batch
``(k-1) % 44`` of the stratified split, dropout keyed ``drop.fold(k-1)``, Adam with the cosine
schedule over the run's epochs. Resuming after step k sets the dropout layer's count to k and
the schedule's to k (its learning rate is the optimizer's, restored with the state). Declared
under the entry-point group ``gverify.tasks`` in gdemos' pyproject.
"""

from __future__ import annotations

import gtape as g
import numpy as np
from gopt import Adam, schedules
from gverify.task import Session, Task, TaskError, check_int, check_real

from . import cnn


class CNNTask(Task):
    """Rung 8's LeNet-style CNN on sklearn's digits (``steps``: a prefix of the run)."""

    NAME = "cnn"
    DEFAULTS = {"steps": 880, "dtype": "float64", "inner": "plain", "seed": 0, "epochs": 20,
                "batch": 32, "lr": 5e-3, "channels": [16, 32], "hidden": 128, "dropout": 0.25}

    def check(self, cfg: dict) -> None:
        """epochs in [1, 1000], batch in [1, 1437], channels two ints in [1, 256], hidden in
        [1, 4096], lr in [0, 10], dropout in [0, 0.9]; steps at most the run's."""
        check_int(self.NAME, cfg, "epochs", 1, 1000)
        check_int(self.NAME, cfg, "batch", 1, 1437)
        check_int(self.NAME, cfg, "hidden", 1, 4096)
        check_real(self.NAME, cfg, "lr", 0.0, 10.0)
        check_real(self.NAME, cfg, "dropout", 0.0, 0.9)
        ch = cfg["channels"]
        if not isinstance(ch, list) or len(ch) != 2 or any(
                isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 256 for c in ch):
            raise TaskError(f"task cnn: config channels is {ch!r}; expected two ints in "
                            "[1, 256]")
        total = cfg["epochs"] * (1437 // cfg["batch"])
        if cfg["steps"] > total:
            raise TaskError(f"task cnn: config steps is {cfg['steps']}; the run has {total} "
                            f"({cfg['epochs']} epochs of {1437 // cfg['batch']} batches)")

    def cnn_config(self, backend: str) -> cnn.CNNConfig:
        """The ``gdemos.cnn`` configuration of this task on ``backend``."""
        c = self.config
        return cnn.CNNConfig(backend=backend, dtype=c["dtype"], seed=c["seed"],
                             epochs=c["epochs"], batch=c["batch"], lr=c["lr"],
                             channels=tuple(c["channels"]), hidden=c["hidden"],
                             dropout=c["dropout"])

    def new_session(self, backend: str) -> CNNSession:
        """A session at step 0."""
        return CNNSession(self, backend)


class CNNSession(Session):
    """The CNN, Adam and its cosine schedule on one tape."""

    def __init__(self, task: CNNTask, backend: str) -> None:
        super().__init__(task, backend)
        cfg = self.cfg = task.cnn_config(backend)
        self.x, self.y = cnn.digits(cfg.seed)[:2]
        k_init, self.order, k_drop = cnn.keys(cfg.seed)
        self.model = cnn.build(self.tp, cfg, k_init, k_drop)
        self.drop = next(m for m in self.model if isinstance(m, g.nn.Dropout))
        self.per_epoch = len(self.y) // cfg.batch
        self._epoch: tuple[int, list[np.ndarray]] | None = None
        opt = Adam(self.tp, lr=cfg.lr)
        opt.add(self.model.parameters())
        self.sched = schedules.cosine(opt, total_steps=cnn.total_steps(cfg))
        self.ready(opt)

    def batch(self, k: int) -> list[tuple[str, np.ndarray]]:
        """Step k's images and labels (rung 8's batch order)."""
        epoch, i = divmod(k - 1, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = (epoch, cnn.batch_order(self.order, epoch, len(self.y),
                                                  self.cfg.batch))
        idx = self._epoch[1][i]
        return [("images", self.x[idx]), ("labels", self.y[idx])]

    def forward(self, k: int) -> g.Var:
        """Cross-entropy of the model on step k's batch."""
        (_, xb), (_, yb) = self.batch(k)
        return g.cross_entropy(self.model(self.tp.const(xb)), yb)

    def position(self, k: int) -> None:
        """The next step is k + 1: dropout's count and the schedule's at k."""
        self.drop.calls = k
        if self.sched.last_epoch != k:
            state = self.sched.state_dict()
            state.update({"n": np.array(k, np.int64), "lr": np.array(self.opt.lr)})
            self.sched.load_state_dict(state)

    def after_step(self, k: int) -> None:
        """The schedule's step (the learning rate of step k + 1)."""
        self.sched.step()
