"""AdamW: Adam with decoupled weight decay, in the operation order of ``torch.optim.AdamW``.

Per step and parameter group, on the host in float64 (running powers, no libm ``pow``)::

    D  = 1 - lr * weight_decay            # the decay factor
    S  = lr / (1 - b1^t)                  # torch's step_size
    R  = sqrt(1 - b2^t)                   # torch's bias_correction2_sqrt

each written, rounded once to the dtype, into the group's 0-d backend buffers. Per parameter,
one in-place kernel (``gtensor.ops.updates.adamw_update``) computing per element, in this order::

    m <- b1*m + (1-b1)*gk                 # adam_m, as Adam
    v <- b2*v + (1-b2)*(gk*gk)            # adam_v, as Adam
    den = sqrt(v)/R + eps                 # sqrt, div, adds
    q   = (m*S) / den                     # mul, div
    p  <- p*D - q                         # mul, sub

which is torch's ``p.mul_(1 - lr*wd); p.addcdiv_(m, den, value=-S)`` (``-(S*m)/den`` added is
``(S*m)/den`` subtracted, exactly). Every per-step number (D, S, R) lives in a buffer per
group, so a learning-rate or weight-decay change (``opt.param_groups[k]["lr"] = x``, a
schedule) reaches a recorded or captured step without re-recording.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gtensor.ops.updates import adamw_update

from .adam import Adam
from .base import Slot, gkey
from .workspace import Workspace


class AdamW(Adam):
    """AdamW: ``p <- p*(1 - lr*wd) - (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``.

    ``params``: an iterable of parameters, a list of param-group dicts with keys ``params``,
    ``lr``, ``betas``, ``eps``, ``weight_decay`` (torch's; each group's decay is decoupled:
    ``D = 1 - lr*wd`` of that group), or a tape with parameters registered by ``add``
    (whose ``alpha`` stays a coupled L2 term on top).

    >>> import numpy as np
    >>> import gtape as g
    >>> from gopt import AdamW
    >>> tp = g.Tape()
    >>> w, b = tp.param(np.array([1.0, -2.0])), tp.param(np.array([0.5]))
    >>> opt = AdamW([{"params": [w], "weight_decay": 0.5},
    ...              {"params": [b], "weight_decay": 0.0}], lr=0.1)
    >>> tp.backward(g.sum(w * w) + g.sum(b * b))
    >>> opt.step()
    >>> [round(x, 6) for x in tp.value(w).tolist()], [round(x, 6) for x in tp.value(b).tolist()]
    ([0.85, -1.8], [0.4])
    """

    KIND = "adamw"
    COUPLED_DECAY = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, store: Any = None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         store=store)

    @property
    def weight_decay(self) -> float:
        """The decoupled weight decay (each step multiplies p by 1 - lr*weight_decay; of every
        group, refused when groups differ: see ``param_groups``)."""
        return self._common("weight_decay")

    def _begin_step(self) -> None:
        for k, grp in enumerate(self._groups):
            h, y = grp.host, grp.hyper
            h["b1_pow"] = h["b1_pow"] * y["beta1"]
            h["b2_pow"] = h["b2_pow"] * y["beta2"]
            h["lr_t"] = y["lr"] / (1.0 - h["b1_pow"])  # torch's step_size
            self._ws.put(gkey("adamw_decay", k), 1.0 - y["lr"] * y["weight_decay"])
            self._ws.put(gkey("adamw_step", k), h["lr_t"])
            self._ws.put(gkey("adamw_bc2", k), math.sqrt(1.0 - h["b2_pow"]))

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        m, v = slot.state["m"], slot.state["v"]
        k, y = slot.group, self._groups[slot.group].hyper
        return adamw_update(be, m, v, p, g, scale, ws(gkey("adamw_step", k), ()),
                            ws(gkey("adamw_bc2", k), ()), ws(gkey("adamw_decay", k), ()),
                            beta1=y["beta1"], beta2=y["beta2"], eps=y["eps"], alpha=slot.alpha,
                            clip=clip)

    @property
    def lr_t(self) -> float:
        """The step size ``lr / (1 - b1^t)`` of the last step (NaN before the first; of every
        group, refused when groups differ)."""
        return super().lr_t

    def __repr__(self) -> str:
        if len(self._groups) > 1:
            return super().__repr__()
        return super().__repr__()[:-1] + f", weight_decay={self._groups[0].hyper['weight_decay']}>"
