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

    def _update(self, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> tuple[Any, dict[str, Any]]:
        # p <- p - lr*gk, gk = g (* scale) (+ alpha*p): one fused op
        out = self._be.sgd_p(p, g, p, scale, self._lr, slot.alpha, clip,
                             out=self._ws(("new", i), slot.shape))
        return out, {}
