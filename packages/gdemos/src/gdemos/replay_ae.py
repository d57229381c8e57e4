"""Rungs 2 and 4: the autoencoder's training step captured once and replayed on a device.

One episode is recorded on a numpy tape and captured with ggpu-replay; every minibatch is then
copied into the captured input buffer and the whole step (forward, backward, Adam with L2) runs
on the device -- one CUDA graph on cuda, the same launch list on sim. Only the loss comes back.
Rung 4 (engine ``fused``) runs the same step as ggpu-fuse's few generated kernels.
"""

from __future__ import annotations

import gtape as g
import numpy as np

from . import model
from .ae import AEConfig, register

DEVICES = ("sim", "cuda", "cpu")  # cpu: the captured step as one native call


def check_replay_config(cfg: AEConfig) -> None:
    """Refuse what a captured step cannot do (before any work)."""
    if cfg.backend not in DEVICES or (cfg.engine == "fused" and cfg.backend == "cpu"):
        raise ValueError(f"engine {cfg.engine}: backend {cfg.backend!r} runs no kernels; "
                         f"expected one of {DEVICES}")
    if cfg.n % cfg.batch:
        raise ValueError(f"engine {cfg.engine}: n={cfg.n} is not a multiple of batch="
                         f"{cfg.batch}; a captured step has one fixed minibatch shape")


class ReplaySteps:
    """The training step as a captured program (same interface as ``ae.TapeSteps``)."""

    def __init__(self, tp: g.Tape, params: list[g.Var], cfg: AEConfig) -> None:
        from ggpu_replay import capture

        mark = tp.mark()
        self.x = tp.const(np.zeros((cfg.batch, _dim(params))))
        loss = g.mse(model.forward(self.x, params), self.x)
        self.prog = capture(tp, loss, backend=cfg.backend)
        if cfg.engine == "fused":
            from ggpu_fuse import fuse

            self.prog = fuse(self.prog)
        tp.reset_to(mark)  # the program keeps the episode; the tape goes on evaluating
        self.tp = tp
        self.opt = self.prog.adam(lr=cfg.lr)
        register(self.opt, params, cfg)
        self.store = self.prog  # what gverify digests and checkpoints (with self.opt)

    def step(self, xb: np.ndarray) -> float:
        """One replayed training step on minibatch ``xb``; returns its loss."""
        self.prog.set_input(self.x, xb)
        self.prog.step(self.opt)
        return self.prog.loss()

    def sync(self) -> None:
        """Copy the device's weights back into the tape (for the per-epoch evaluation)."""
        self.prog.sync_params(self.tp)


def _dim(params: list[g.Var]) -> int:
    """The data dimension: rows of the first weight."""
    return params[0].shape[0]
