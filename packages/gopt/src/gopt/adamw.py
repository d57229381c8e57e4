"""AdamW: Adam with decoupled weight decay, in the operation order of ``torch.optim.AdamW``.

Per step, on the host in float64 (running powers, no libm ``pow``)::

    D  = 1 - lr * weight_decay            # the decay factor
    S  = lr / (1 - b1^t)                  # torch's step_size
    R  = sqrt(1 - b2^t)                   # torch's bias_correction2_sqrt

each written, rounded once to the dtype, into a 0-d backend buffer. Per parameter, gtensor ops::

    m <- adam_m(m, g)                     # b1*m + (1-b1)*gk, as Adam
    v <- adam_v(v, g)                     # b2*v + (1-b2)*(gk*gk), as Adam
    den = adds(div(sqrt(v), R), eps)      # sqrt(v)/R + eps
    q   = div(mul(m, S), den)             # (S*m) / den
    p  <- sub(mul(p, D), q)               # p*D - q

which is torch's ``p.mul_(1 - lr*wd); p.addcdiv_(m, den, value=-S)`` (``-(S*m)/den`` added is
``(S*m)/den`` subtracted, exactly). Every per-step number (D, S, R) lives in a buffer, so a
learning-rate change or a schedule reaches a recorded or captured step without re-recording.
"""

from __future__ import annotations

import math
from typing import Any

import gtape

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
                clip: bool) -> tuple[Any, dict[str, Any]]:
        shape, a = slot.shape, slot.alpha
        m, v = slot.state["m"], slot.state["v"]
        m_new = be.adam_m(m, g, p, scale, self._b1, a, clip, out=ws(("adam_m", i), shape))
        v_new = be.adam_v(v, g, p, scale, self._b2, a, clip, out=ws(("adam_v", i), shape))
        # three scratch buffers per parameter, reused along the chain
        s1, s2, s3 = (ws((f"adamw_{k}", i), shape) for k in "abc")
        be.sqrt(v_new, out=s1)
        be.div(s1, ws("adamw_bc2", ()), out=s2)
        den = be.adds(s2, self._eps, out=s1)
        num = be.mul(m_new, ws("adamw_step", ()), out=s2)
        q = be.div(num, den, out=s3)
        decayed = be.mul(p, ws("adamw_decay", ()), out=s1)
        p_new = be.sub(decayed, q, out=ws(("new", i), shape))
        return p_new, {"m": m_new, "v": v_new}

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
