"""Adam with the bias correction folded into a host-side float64 step size.

The step size ``lr_t`` changes every step: it is computed on the host in float64 and written,
rounded once to the tape's dtype, into a 0-d backend buffer that the update multiplies by
(``mul`` with a 0-d operand: the same arithmetic as ``muls`` with the scalar).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gtensor.ops.updates import adam_update

from . import checks
from .base import Optimizer, Slot, gkey
from .workspace import Workspace


def adam_lr_t(lr: float, b1_pow: float, b2_pow: float) -> float:
    """lr * sqrt(1 - b2**t) / (1 - b1**t) in float64, from the running powers b1**t, b2**t."""
    return lr * math.sqrt(1.0 - b2_pow) / (1.0 - b1_pow)


class Adam(Optimizer):
    """Adam: m, v moments on the backend; ``p <- p - lr_t * m / (sqrt(v) + eps)``.

    ``params``: an iterable of parameters, a list of param-group dicts with keys ``params``,
    ``lr``, ``betas``, ``eps``, ``weight_decay`` (torch's; weight_decay is coupled L2, as
    torch's Adam), or a tape with parameters registered by ``add``. Each group has its own
    ``lr_t`` buffer and running powers of its betas.
    """

    KIND = "adam"
    STATE = ("m", "v")
    GROUP_KEYS = ("lr", "betas", "eps", "weight_decay")
    # lr reaches the device only through the per-step lr_t buffers: a new lr needs no re-record
    BAKED = ("betas", "eps", "clip", "alpha", "params")

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, *, store: Any = None) -> None:
        super().__init__(params, store=store, lr=lr, betas=betas, eps=eps,
                         weight_decay=weight_decay)

    def _more_config(self) -> tuple[str, ...]:
        return ("betas", "eps")

    def _new_host(self, hyper: dict[str, float]) -> dict[str, float]:
        # b1**t, b2**t as running products (portable: no libm pow); lr_t NaN before a step
        return {"b1_pow": 1.0, "b2_pow": 1.0, "lr_t": math.nan}

    def _group_changed(self, k: int, key: str) -> None:
        if key == "betas":  # the powers of the new betas after t steps, as running products
            grp = self._groups[k]
            b1p = b2p = 1.0
            for _ in range(self._t):
                b1p, b2p = b1p * grp.hyper["beta1"], b2p * grp.hyper["beta2"]
            grp.host["b1_pow"], grp.host["b2_pow"] = b1p, b2p

    @property
    def betas(self) -> tuple[float, float]:
        """(beta1, beta2) of every group (refused when groups differ: see ``param_groups``)."""
        return self._common("betas")

    @property
    def eps(self) -> float:
        """The denominator's epsilon (of every group, refused when groups differ)."""
        return self._common("eps")

    @property
    def weight_decay(self) -> float:
        """The weight decay of every group (refused when groups differ)."""
        return self._common("weight_decay")

    @property
    def lr_t(self) -> float:
        """The bias-corrected step size of the last step (NaN before the first; of every
        group, refused when groups differ)."""
        values = [grp.host["lr_t"] for grp in self._groups]
        if any(not (v == values[0] or (math.isnan(v) and math.isnan(values[0])))
               for v in values[1:]):
            raise ValueError(f"{type(self).__name__}.lr_t: the {len(values)} parameter groups "
                             f"have different step sizes {values}")
        return values[0]

    def _begin_step(self) -> None:
        for k, grp in enumerate(self._groups):
            h, y = grp.host, grp.hyper
            h["b1_pow"] = h["b1_pow"] * y["beta1"]
            h["b2_pow"] = h["b2_pow"] * y["beta2"]
            h["lr_t"] = adam_lr_t(y["lr"], h["b1_pow"], h["b2_pow"])
            self._ws.put(gkey("adam_lr_t", k), h["lr_t"])

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        # in place, per element: m <- b1*m + (1-b1)*gk; v <- b2*v + (1-b2)*(gk*gk);
        # p <- p - (lr_t*m) / (sqrt(v) + eps), gk = g (* scale) (+ alpha*p), from the old p
        m, v = slot.state["m"], slot.state["v"]
        y = self._groups[slot.group].hyper
        return adam_update(be, m, v, p, g, scale, ws(gkey("adam_lr_t", slot.group), ()),
                           beta1=y["beta1"], beta2=y["beta2"], eps=y["eps"], alpha=slot.alpha,
                           clip=clip)

    def _check_host(self, where: str, prefix: str, host: dict[str, float]) -> dict[str, float]:
        for k in ("b1_pow", "b2_pow"):
            checks.real(where, f"{prefix}{k}", host[k], low=0.0, high=1.0,
                        expected="a power of a beta, in [0, 1]")
        if not math.isnan(host["lr_t"]):
            checks.real(where, f"{prefix}lr_t", host["lr_t"], low=0.0,
                        expected="a finite real number >= 0 (NaN before the first step)")
        return host

    def __repr__(self) -> str:
        if len(self._groups) > 1:
            return super().__repr__()
        y = self._groups[0].hyper
        return super().__repr__()[:-1] + f", betas=({y['beta1']}, {y['beta2']}), eps={y['eps']}>"
