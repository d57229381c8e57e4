"""Adam with the bias correction folded into a host-side float64 step size.

The step size ``lr_t`` changes every step: it is computed on the host in float64 and written,
rounded once to the tape's dtype, into a 0-d backend buffer that the update multiplies by
(``mul`` with a 0-d operand: the same arithmetic as ``muls`` with the scalar).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gtape
from gtensor import describe
from gtensor.updates import adam_update

from . import checks
from .base import Optimizer, Slot
from .workspace import Workspace


def adam_lr_t(lr: float, b1_pow: float, b2_pow: float) -> float:
    """lr * sqrt(1 - b2**t) / (1 - b1**t) in float64, from the running powers b1**t, b2**t."""
    return lr * math.sqrt(1.0 - b2_pow) / (1.0 - b1_pow)


class Adam(Optimizer):
    """Adam: m, v moments on the backend; ``p <- p - lr_t * m / (sqrt(v) + eps)``."""

    KIND = "adam"
    STATE = ("m", "v")
    # lr reaches the device only through the per-step lr_t buffer: a new lr needs no re-record
    BAKED = ("betas", "eps", "clip", "alpha", "params")

    def __init__(self, tp: gtape.Tape, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        super().__init__(tp, lr)
        where = type(self).__name__
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"{where}: betas is {describe(betas)}; expected a pair "
                            "(beta1, beta2)")
        want = "a real number in [0, 1)"
        self._b1 = checks.real(where, "betas[0]", betas[0], low=0.0, high=1.0, high_open=True,
                               expected=want)
        self._b2 = checks.real(where, "betas[1]", betas[1], low=0.0, high=1.0, high_open=True,
                               expected=want)
        self._eps = checks.real(where, "eps", eps, low=0.0, expected="a finite real number >= 0")
        self._b1_pow = 1.0  # b1**t, as a running product (portable: no libm pow)
        self._b2_pow = 1.0
        self._lr_t = math.nan

    def _more_config(self) -> tuple[str, ...]:
        return ("betas", "eps")

    @property
    def betas(self) -> tuple[float, float]:
        """(beta1, beta2)."""
        return self._b1, self._b2

    @property
    def eps(self) -> float:
        """The denominator's epsilon."""
        return self._eps

    @property
    def lr_t(self) -> float:
        """The bias-corrected step size of the last step (NaN before the first)."""
        return self._lr_t

    def _begin_step(self) -> None:
        self._b1_pow = self._b1_pow * self._b1
        self._b2_pow = self._b2_pow * self._b2
        self._lr_t = adam_lr_t(self._lr, self._b1_pow, self._b2_pow)
        self._ws.put("adam_lr_t", self._lr_t)

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        # in place, per element: m <- b1*m + (1-b1)*gk; v <- b2*v + (1-b2)*(gk*gk);
        # p <- p - (lr_t*m) / (sqrt(v) + eps), gk = g (* scale) (+ alpha*p), from the old p
        m, v = slot.state["m"], slot.state["v"]
        return adam_update(be, m, v, p, g, scale, ws("adam_lr_t", ()), beta1=self._b1,
                           beta2=self._b2, eps=self._eps, alpha=slot.alpha, clip=clip)

    def _hyper(self) -> dict[str, float]:
        return {"lr": self._lr, "beta1": self._b1, "beta2": self._b2, "eps": self._eps}

    def _set_hyper(self, hyper: dict[str, float]) -> None:
        self._lr, self._b1, self._b2, self._eps = (hyper["lr"], hyper["beta1"], hyper["beta2"],
                                                   hyper["eps"])

    def _check_hyper(self, where: str, hyper: dict[str, float]) -> dict[str, float]:
        super()._check_hyper(where, hyper)
        want = "a real number in [0, 1)"
        for k in ("beta1", "beta2"):
            checks.real(where, f"hyper.{k}", hyper[k], low=0.0, high=1.0, high_open=True,
                        expected=want)
        checks.real(where, "hyper.eps", hyper["eps"], low=0.0, expected="a finite real number >= 0")
        return hyper

    def _check_host(self, where: str, host: dict[str, float]) -> dict[str, float]:
        for k in ("b1_pow", "b2_pow"):
            checks.real(where, f"host.{k}", host[k], low=0.0, high=1.0,
                        expected="a power of a beta, in [0, 1]")
        if not math.isnan(host["lr_t"]):
            checks.real(where, "host.lr_t", host["lr_t"], low=0.0,
                        expected="a finite real number >= 0 (NaN before the first step)")
        return host

    def _host_state(self) -> dict[str, float]:
        return {"b1_pow": self._b1_pow, "b2_pow": self._b2_pow, "lr_t": self._lr_t}

    def _set_host_state(self, state: dict[str, float]) -> None:
        self._b1_pow, self._b2_pow = state["b1_pow"], state["b2_pow"]
        self._lr_t = state["lr_t"]

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", betas=({self._b1}, {self._b2}), eps={self._eps}>"
