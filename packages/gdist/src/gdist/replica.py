"""One replica: the model, its optimizer and schedule, resident data, and its recent history.

``Local`` holds one replica in-process; ``DataParallel`` one per worker. A replica computes
the microbatches given to it (``leaf``), adds tree nodes (``add``), and applies the reduced
gradient of a step with its own optimizer (``apply``): every replica applies the same root,
so they all land on the same bits and the parameters never travel. For recovery it keeps a
checkpoint of its state every ``checkpoint_every`` steps and the roots it applied since (the
*log*): a replica rebuilt elsewhere loads the checkpoint and re-applies the logged roots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import checkpoint, optim, stats
from .definition import Definition
from .digest import params_digest
from .model import Model, Result
from .store import GradStore


def add(left: Result, right: Result, out: Result | None = None) -> Result:
    """``left + right`` of two (loss, gradients) results: numpy's float add, the IEEE addition
    that gtensor's ``add`` is on every backend (the numpy backend runs exactly this). ``out``:
    ``left`` or ``right`` itself, a result the caller owns and no longer needs, whose gradient
    arrays then receive the sums (no new arrays; the operands' order, so every bit, as
    without)."""
    return np.add(left[0], right[0]), {
        n: np.add(g, right[1][n], out=None if out is None else out[1][n])
        for n, g in left[1].items()}


class Replica:
    """The model and optimizer of one replica (see the module docstring)."""

    def __init__(self, defn: Definition, checkpoint_every: int = 0) -> None:
        where = "gdist: building a replica"
        self.defn = defn
        self.model = Model(defn)
        self.store = GradStore(self.model)
        self.opt = optim.build(where, defn, self.store)
        self.sched = defn.schedule(self.opt) if defn.schedule is not None else None
        self.stepper = optim.Stepper(self.opt, self.store)
        self.steps = 0  # steps applied
        self.last_loss: float | None = None  # the batch loss of the last step applied
        self.microbatches = 0  # microbatches in those steps: the next step's first serial
        self.data: dict[str, np.ndarray] | None = None  # resident rows (load_data)
        self.checkpoint_every = checkpoint_every
        self.saved: dict[str, np.ndarray] | None = None  # the last checkpoint (its state)
        self.log: list[tuple[Result, int, list[float]]] = []  # applied since: root, k, lrs
        if checkpoint_every:
            self.saved = self.state_dict()

    # ---------------------------------------------------------------- a step's parts
    def rows(self, part: Mapping[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
        """A microbatch's rows: given, or picked by row index from the resident data."""
        if isinstance(part, Mapping):
            return dict(part)
        if self.data is None:
            raise RuntimeError("gdist: a step by row indices before load_data")
        return {k: a[part] for k, a in self.data.items()}

    def leaf(self, serial: int, part: Mapping[str, np.ndarray] | np.ndarray) -> Result:
        """Microbatch ``serial`` of the run: its loss and gradient at the current params."""
        return self.model.leaf(serial, self.rows(part))

    def add(self, left: Result, right: Result, out: Result | None = None) -> Result:
        """One tree node: ``left + right``, the loss and every gradient, element by element
        (gtensor's ``add``: one IEEE addition, rounded once, on the host arrays); ``out``: an
        operand the caller owns, reused for the sums (``gdist.replica.add``)."""
        stats.count("adds")
        return add(left, right, out)

    def apply(self, root: Result, k: int, lrs: Sequence[float] | None = None) -> float:
        """Apply a step: the root of the tree over its ``k`` microbatches (sums) divided by k
        (``reduce="mean"``), the optimizer's step, the schedule's; returns the batch loss.
        ``lrs`` (one per group) are set first (a driver's ``set_lr``)."""
        if lrs is not None:
            for g, lr in zip(self.opt.param_groups, lrs):
                g["lr"] = lr
        mean = self.defn.reduce == "mean"
        used = [g["lr"] for g in self.opt.param_groups]
        self.store.set_grads(root[1], k if mean else None)
        self.stepper.step()
        if self.sched is not None:
            self.sched.step()
        self.steps += 1
        self.microbatches += k
        stats.count("steps")
        if self.checkpoint_every:
            self.log.append((root, k, used))
            if self.steps % self.checkpoint_every == 0:
                self.take_checkpoint()
        loss = np.asarray(root[0], self.store.dtype)
        if mean:  # one IEEE division, as gtensor's div (and mean) round it
            loss = np.divide(loss, np.asarray(k, self.store.dtype))
        self.last_loss = float(loss)
        return self.last_loss

    # ---------------------------------------------------------------- state
    def digest(self) -> str:
        """sha256 of the current params (``gdist.params_digest``)."""
        return params_digest(self.model.values())

    def state_dict(self) -> dict[str, np.ndarray]:
        """Params, optimizer and schedule state and the counters (``gdist.checkpoint``)."""
        return checkpoint.state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state (checked first; a refused state changes nothing); a new checkpoint
        is taken, since the log no longer leads to the state."""
        checkpoint.load_state_dict(self, state)
        if self.checkpoint_every:
            self.take_checkpoint()

    def set_values(self, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite every parameter (checked host arrays); a new checkpoint follows."""
        self.model.set_values(values)
        if self.checkpoint_every:
            self.take_checkpoint()

    def take_checkpoint(self) -> None:
        """Remember the state now; the log restarts."""
        self.saved, self.log = self.state_dict(), []

    def history(self) -> tuple[dict[str, np.ndarray], list[tuple[Result, int, list[float]]]]:
        """The last checkpoint and the roots applied since (what a rebuilt replica needs)."""
        if self.saved is None:
            raise RuntimeError("gdist: this replica keeps no checkpoints (checkpoint_every=0)")
        return self.saved, list(self.log)

    def replay(self, saved: Mapping[str, Any], log: list[tuple[Result, int, list[float]]]
               ) -> None:
        """Become the replica whose history this is: load the checkpoint, re-apply the log."""
        checkpoint.load_state_dict(self, saved)
        self.saved, self.log = dict(saved), []
        for root, k, lrs in log:
            self.apply(root, k, lrs)
