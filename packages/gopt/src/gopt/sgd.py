"""Plain stochastic gradient descent: p <- p - lr * g.

The learning rate is a per-step host scalar: the host half of each step writes it, rounded
once to the dtype, into a 0-d backend buffer ``L``, and the update multiplies by that buffer.
So ``opt.lr = x`` (or a schedule) takes effect at the next step, also in a recorded or captured
step, without re-recording anything.
"""

from __future__ import annotations

from typing import Any

import gtape

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
                clip: bool) -> tuple[Any, dict[str, Any]]:
        shape = slot.shape
        gk = g
        if clip:  # gk = g * scale
            gk = be.mul(g, scale, out=ws(("sgd_gk", i), shape))
        if slot.alpha != 0.0:  # gk = gk + p * alpha
            a = be.muls(p, slot.alpha, out=ws(("sgd_l2", i), shape))
            gk = be.add(gk, a, out=ws(("sgd_gl", i), shape))
        # p - (gk * L) * 1: sgd_p's clip variant with the 0-d buffer L as its "scale" and the
        # op scalar lr = 1 (x * 1 == x for every x, -0.0 and NaN included): one kernel computing
        # exactly p - fl(gk * fl(lr)), with fl(lr) read from the buffer at run time
        out = be.sgd_p(p, gk, p, ws("sgd_lr", ()), 1.0, 0.0, True, out=ws(("new", i), shape))
        return out, {}
