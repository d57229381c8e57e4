"""Plain stochastic gradient descent: p <- p - lr * g, per parameter group.

The learning rate is a per-step host scalar: the host half of each step writes each group's
lr, rounded once to the dtype, into that group's 0-d backend buffer ``L``, and the update
multiplies by that buffer. So ``opt.lr = x``, ``opt.param_groups[k]["lr"] = x`` (or a
schedule) takes effect at the next step, also in a recorded or captured step, without
re-recording anything. ``weight_decay`` is torch's SGD one: coupled L2, each parameter's
``alpha`` (g + wd*p), a launch argument of the update (a change re-records it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gtensor.ops.updates import sgd_update

from .base import Optimizer, Slot, gkey
from .workspace import Workspace


class SGD(Optimizer):
    """``p <- p - lr * g`` (g after clipping and L2), in gtensor ops.

    ``params``: an iterable of parameters, a list of param-group dicts with keys ``params``,
    ``lr``, ``weight_decay`` (torch's), or a tape with parameters registered by ``add``.

    >>> import numpy as np
    >>> import gtape as g
    >>> from gopt import SGD
    >>> tp = g.Tape()
    >>> w, b = tp.param(np.array([1.0, -2.0])), tp.param(np.array([0.5]))
    >>> opt = SGD([{"params": [w], "weight_decay": 0.5}, {"params": [b], "lr": 0.5}], lr=0.25)
    >>> tp.backward(g.sum(w * w) + g.sum(b * b))
    >>> opt.step()
    >>> tp.value(w).tolist(), tp.value(b).tolist()
    ([0.375, -0.75], [0.0])
    """

    # lr reaches the device only through the per-step "sgd_lr" buffers: not baked in
    BAKED = ("clip", "alpha", "params")
    GROUP_KEYS = ("lr", "weight_decay")
    KIND = "sgd"

    def __init__(self, params: Any, lr: float, weight_decay: float = 0.0, *,
                 store: Any = None) -> None:
        super().__init__(params, store=store, lr=lr, weight_decay=weight_decay)

    def _begin_step(self) -> None:
        for k, grp in enumerate(self._groups):
            self._ws.put(gkey("sgd_lr", k), grp.hyper["lr"])

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        # in place: p - gk * L, gk = g (* scale) (+ p * alpha), L the group's 0-d "sgd_lr"
        # buffer read at run time: the bits of mul, muls, add, then sgd_p's p - (gk * L) * 1
        return sgd_update(be, p, g, scale, ws(gkey("sgd_lr", slot.group), ()),
                          alpha=slot.alpha, clip=clip)

    @property
    def weight_decay(self) -> float:
        """The L2 weight of every group (refused when groups differ: see ``param_groups``)."""
        return self._common("weight_decay")
