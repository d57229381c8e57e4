"""Activation layers as torch names them: ``GELU``, ``SiLU``, ``Softplus`` (the functions of
``gtape.activations``, with their orders).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> g.nn.GELU(approximate="tanh")(tp.const(np.zeros(2))).numpy().tolist()
[0.0, 0.0]
"""

from __future__ import annotations

from typing import Any

from . import activations
from .modules import Module
from .var import Var


class GELU(Module):
    """``g.gelu(x, approximate)`` (torch's ``nn.GELU``: "none" exact, or "tanh")."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in activations.APPROXIMATE:
            raise ValueError(f"GELU: approximate is {approximate!r}; expected one of "
                             f"{activations.APPROXIMATE}")
        self.approximate = approximate

    def forward(self, x: Any) -> Var:
        """gelu(x, approximate)."""
        return activations.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        """approximate."""
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``g.silu(x)`` = x * sigmoid(x) (torch's ``nn.SiLU``)."""

    def forward(self, x: Any) -> Var:
        """silu(x)."""
        return activations.silu(x)


class Softplus(Module):
    """``g.softplus(x, beta, threshold)`` (torch's ``nn.Softplus``)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        self.beta = activations.real_arg("Softplus", "beta", beta, positive=True)
        self.threshold = activations.real_arg("Softplus", "threshold", threshold)

    def forward(self, x: Any) -> Var:
        """softplus(x, beta, threshold)."""
        return activations.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        """beta, threshold."""
        return f"beta={self.beta}, threshold={self.threshold}"
