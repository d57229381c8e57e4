"""Plain stochastic gradient descent: p <- p - lr * g.

The learning rate is a per-step host scalar: the host half of each step writes it, rounded
once to the dtype, into a 0-d backend buffer ``L``, and the update multiplies by that buffer.
So ``opt.lr = x`` (or a schedule) takes effect at the next step, also in a recorded or captured
step, without re-recording anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gtape
from gtensor.updates import sgd_update

from .base import Optimizer, Slot
from .workspace import Workspace


class SGD(Optimizer):
    """``p <- p - lr * g`` (g after clipping and L2), in gtensor ops."""

    # lr reaches the device only through the per-step "sgd_lr" buffer: not baked in
    BAKED = ("clip", "alpha", "params")

    KIND = "sgd"

    def __init__(self, tp: gtape.Tape, lr: float) -> None:
        super().__init__(tp, lr)

    def _begin_step(self) -> None:
        self._ws.put("sgd_lr", self._lr)

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        # in place: p - gk * L, gk = g (* scale) (+ p * alpha), L the 0-d "sgd_lr" buffer read
        # at run time: the bits of mul, muls, add, then sgd_p's p - (gk * L) * 1
        return sgd_update(be, p, g, scale, ws("sgd_lr", ()), alpha=slot.alpha, clip=clip)
