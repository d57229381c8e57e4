"""Plain stochastic gradient descent: p <- p - lr * g."""

from __future__ import annotations

from typing import Any

import gtape

from .base import Optimizer, Slot


class SGD(Optimizer):
    """``p <- p - lr * g`` (g after clipping and L2), in gtensor ops."""

    KIND = "sgd"

    def __init__(self, tp: gtape.Tape, lr: float) -> None:
        super().__init__(tp, lr)

    def _update(self, i: int, slot: Slot, p: Any, g: Any) -> tuple[Any, dict[str, Any]]:
        be, ws = self._be, self._ws
        step = be.muls(g, self._lr, out=ws(("sgd_step", i), slot.shape))
        return be.sub(p, step, out=ws(("new", i), slot.shape)), {}
