"""AdamW: Adam with decoupled weight decay, in the operation order of ``torch.optim.AdamW``.

Per step, on the host in float64 (running powers, no libm ``pow``)::

    D  = 1 - lr * weight_decay            # the decay factor
    S  = lr / (1 - b1^t)                  # torch's step_size
    R  = sqrt(1 - b2^t)                   # torch's bias_correction2_sqrt

each written, rounded once to the dtype, into a 0-d backend buffer. Per parameter, one in-place
kernel (``gtensor.updates.adamw_update``) computing per element, in this order::

    m <- b1*m + (1-b1)*gk                 # adam_m, as Adam
    v <- b2*v + (1-b2)*(gk*gk)            # adam_v, as Adam
    den = sqrt(v)/R + eps                 # sqrt, div, adds
    q   = (m*S) / den                     # mul, div
    p  <- p*D - q                         # mul, sub

which is torch's ``p.mul_(1 - lr*wd); p.addcdiv_(m, den, value=-S)`` (``-(S*m)/den`` added is
``(S*m)/den`` subtracted, exactly). Every per-step number (D, S, R) lives in a buffer, so a
learning-rate change or a schedule reaches a recorded or captured step without re-recording.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gtape
from gtensor.updates import adamw_update

from . import checks
from .adam import Adam
from .base import Slot
from .workspace import Workspace


class AdamW(Adam):
    """AdamW: ``p <- p*(1 - lr*wd) - (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``.

    >>> import numpy as np
    >>> import gtape as g
    >>> from gopt import AdamW
    >>> tp = g.Tape()
    >>> w = tp.param(np.array([1.0, -2.0]))
    >>> opt = AdamW(tp, lr=0.1, weight_decay=0.5)
    >>> _ = opt.add(w)
    >>> tp.backward(g.sum(w * w))
    >>> opt.step()
    >>> [round(x, 6) for x in tp.value(w).tolist()]
    [0.85, -1.8]
    """

    KIND = "adamw"

    def __init__(self, tp: gtape.Tape, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
        super().__init__(tp, lr=lr, betas=betas, eps=eps)
        self._wd = checks.real("AdamW", "weight_decay", weight_decay, low=0.0,
                               expected="a finite real number >= 0")

    @property
    def weight_decay(self) -> float:
        """The decoupled weight decay (each step multiplies p by 1 - lr*weight_decay)."""
        return self._wd

    def _begin_step(self) -> None:
        self._b1_pow = self._b1_pow * self._b1
        self._b2_pow = self._b2_pow * self._b2
        self._lr_t = self._lr / (1.0 - self._b1_pow)  # torch's step_size
        self._ws.put("adamw_decay", 1.0 - self._lr * self._wd)
        self._ws.put("adamw_step", self._lr_t)
        self._ws.put("adamw_bc2", math.sqrt(1.0 - self._b2_pow))

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        m, v = slot.state["m"], slot.state["v"]
        return adamw_update(be, m, v, p, g, scale, ws("adamw_step", ()), ws("adamw_bc2", ()),
                            ws("adamw_decay", ()), beta1=self._b1, beta2=self._b2,
                            eps=self._eps, alpha=slot.alpha, clip=clip)

    @property
    def lr_t(self) -> float:
        """The step size ``lr / (1 - b1^t)`` of the last step (NaN before the first)."""
        return self._lr_t

    def _hyper(self) -> dict[str, float]:
        return {**super()._hyper(), "weight_decay": self._wd}

    def _set_hyper(self, hyper: dict[str, float]) -> None:
        super()._set_hyper(hyper)
        self._wd = hyper["weight_decay"]

    def _check_hyper(self, where: str, hyper: dict[str, float]) -> dict[str, float]:
        super()._check_hyper(where, hyper)
        checks.real(where, "hyper.weight_decay", hyper["weight_decay"], low=0.0,
                    expected="a finite real number >= 0")
        return hyper

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", weight_decay={self._wd}>"
