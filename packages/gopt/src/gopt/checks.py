"""Argument checks shared by the optimizers: every error names the call, the argument, what it
received and what it expects."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import gtape
import numpy as np
from gtensor import describe


def real(where: str, name: str, x: Any, *, low: float = -math.inf, low_open: bool = False,
         high: float = math.inf, high_open: bool = False, expected: str = "") -> float:
    """``x`` as a Python float, checked to be a finite real number inside the given bounds."""
    ok = isinstance(x, (Real, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
    value = float(x) if ok else math.nan
    if ok and math.isfinite(value):
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if above and below:
            return value
    want = expected or "a finite real number"
    error = TypeError if not ok else ValueError
    raise error(f"{where}: {name} is {describe(x)}; expected {want}")


def tape(where: str, tp: Any) -> gtape.Tape:
    """``tp`` checked to be an open gtape.Tape."""
    if not isinstance(tp, gtape.Tape):
        raise TypeError(f"{where}: tp is {describe(tp)}; expected a gtape.Tape")
    tp.mark()  # raises RuntimeError naming the problem if the tape is closed
    return tp


def store(where: str, tp: Any) -> Any:
    """``tp`` checked to be an open gtape.Tape or a parameter store (see ``Optimizer``)."""
    if isinstance(tp, gtape.Tape):
        return tape(where, tp)
    if isinstance(tp, gtape.ParamStore):
        return tp
    raise TypeError(f"{where}: tp is {describe(tp)}; expected a gtape.Tape (or another "
                    "gtape.ParamStore: a replay program's or a gdist replica's parameters)")


def store_param(where: str, tp: Any, p: Any) -> gtape.Var:
    """``p`` checked to be a live parameter of the tape or parameter store ``tp``."""
    return tp.check_param(where, p)


