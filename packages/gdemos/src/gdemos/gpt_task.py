"""Rung 9's GPT as a gverify task (``gpt``): the run ``gdemos gpt`` trains, step by step, so
the dispute protocol can commit to it, audit it and recompute any one of its steps.

Step k (1-based) is rung 9's step k exactly (``gdemos.gpt``, the eager engine): the windows
``batch_starts(data key, k-1, ...)`` of the training text, every dropout layer keyed
``key.fold(k-1)`` (its ``calls``), AdamW with two parameter groups, torch's global-norm
clipping and the cosine schedule with warmup over ``total`` steps. Resuming after step k sets
every dropout layer's count and the schedule's to k (the groups' learning rates are the
optimizer's, restored with the state). The text is the built-in plays (a commitment names no
file). Declared under the entry-point group ``gverify.tasks`` in gdemos' pyproject.
"""

from __future__ import annotations

from typing import Any

import gtape as g
import numpy as np
from gverify.task import Session, Task, TaskError, check_choice, check_int, check_real

from . import gpt
from . import gpt_model as M


class GPTTask(Task):
    """Rung 9's character GPT on the plays (``steps``: a prefix of a ``total``-step run)."""

    NAME = "gpt"
    DEFAULTS: dict[str, Any] = {
        "steps": gpt.SIZES[gpt.DEFAULT_SIZE][5], "dtype": "float64", "inner": "plain",
        "seed": 0, "size": gpt.DEFAULT_SIZE, "total": None, "batch": None, "lr": 1e-2,
        "warmup": 30, "weight_decay": 0.1, "betas": [0.9, 0.99], "clip": 1.0, "dropout": 0.1}

    def check(self, cfg: dict) -> None:
        """size one of gdemos.gpt.SIZES; total (null: the size's) and batch (null: the
        size's) ints in [1, 10**6] and [1, 4096]; lr in [0, 10], warmup in [0, 10**6],
        weight_decay in [0, 10], betas two numbers in [0, 1), clip in (0, 10**6], dropout in
        [0, 0.9]; steps at most the run's total."""
        check_choice(self.NAME, cfg, "size", tuple(gpt.SIZES))
        for key, high in (("total", 10 ** 6), ("batch", 4096)):
            if cfg[key] is not None:
                check_int(self.NAME, cfg, key, 1, high)
        check_real(self.NAME, cfg, "lr", 0.0, 10.0)
        check_int(self.NAME, cfg, "warmup", 0, 10 ** 6)
        check_real(self.NAME, cfg, "weight_decay", 0.0, 10.0)
        check_real(self.NAME, cfg, "clip", 1e-12, 1e6)
        check_real(self.NAME, cfg, "dropout", 0.0, 0.9)
        b = cfg["betas"]
        if not isinstance(b, list) or len(b) != 2 or any(
                isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < 1
                for x in b):
            raise TaskError(f"task gpt: config betas is {b!r}; expected two numbers in [0, 1)")
        total = cfg["total"] or gpt.SIZES[cfg["size"]][5]
        if cfg["steps"] > total:
            raise TaskError(f"task gpt: config steps is {cfg['steps']}; the run has {total} "
                            f"(config total, or the {cfg['size']!r} size's)")

    def gpt_run(self, backend: str) -> gpt.GPTRun:
        """The ``gdemos.gpt`` definition of this task on ``backend`` (the eager engine)."""
        c = self.config
        return gpt.GPTRun(size=c["size"], steps=c["total"], batch=c["batch"], lr=c["lr"],
                          warmup=c["warmup"], weight_decay=c["weight_decay"],
                          betas=(float(c["betas"][0]), float(c["betas"][1])), clip=c["clip"],
                          dropout=c["dropout"], seed=c["seed"], backend=backend,
                          dtype=c["dtype"], engine="tape", eval_every=0)

    def new_session(self, backend: str) -> GPTSession:
        """A session at step 0."""
        return GPTSession(self, backend)


class GPTSession(Session):
    """The GPT, AdamW (two groups, torch's clipping) and its schedule on one tape."""

    def __init__(self, task: GPTTask, backend: str) -> None:
        super().__init__(task, backend)  # the tape's key stream: the config's seed
        run = self.run = task.gpt_run(backend)
        self.corpus, cfg = gpt.load(run)
        self.k_data = gpt.keys(run.seed)[0]
        self.model = M.GPT(self.tp, cfg)  # weights and dropout keys from the stream
        self.drops = [m for m in self.model.modules() if isinstance(m, g.nn.Dropout)]
        opt, self.sched = gpt.eager_optimizer(self.model, run)
        self.ready(opt)

    def batch(self, k: int) -> list[tuple[str, np.ndarray]]:
        """Step k's input ids and target ids (rung 9's windows)."""
        x, y = gpt.train_batch(self.corpus, self.k_data, k - 1, self.run.rows,
                               self.model.cfg.block)
        return [("ids", x), ("targets", y)]

    def forward(self, k: int) -> g.Var:
        """The mean cross-entropy of the model on step k's windows."""
        (_, x), (_, y) = self.batch(k)
        return self.model(x, y)[1]

    def position(self, k: int) -> None:
        """The next step is k + 1: every dropout layer's count and the schedule's at k."""
        for d in self.drops:
            d.calls = k
        if self.sched.last_epoch != k:
            state = self.sched.state_dict()
            lrs = [grp["lr"] for grp in self.opt.param_groups]
            state.update({"n": np.array(k, np.int64), "lr": np.array(lrs, np.float64)})
            self.sched.load_state_dict(state)

    def after_step(self, k: int) -> None:
        """The schedule's step (the learning rates of step k + 1)."""
        self.sched.step()
