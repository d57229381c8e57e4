"""What an op's checks need, declared beside the op (``Op.checks``).

The project's test tables (numpy/sim/cpu parity, central differences, the bitwise pin of the
backward rule, double backward against torch, emitted C) build their rows for an op from its
``Checks``: an op that declares them needs no row written anywhere else. An op without
``Checks`` keeps hand-written rows in those tables, and every table's coverage test fails for
an op that has neither. This module imports nothing heavier than numpy: the torch twin is a
function of the torch module, called only by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# input domains of the normal-value rows (central differences, pin, torch oracle, emit)
ANY = "any"  # any real
POS = "pos"  # > 0 (log, sqrt, log1p: away from the pole and the domain's edge)
AWAY0 = "away0"  # |x| >= 0.2 (a kink or a pole at 0: relu, a divisor)
DOMAINS = (ANY, POS, AWAY0)

# shape classes: the parity rows (input shapes) of an elementwise op
UNARY_SHAPES = ((), (7,), (3, 5), (2, 3, 4), (1,), (1, 1), (13,), (0, 3))
BINARY_SHAPES = (
    ((), ()), ((7,), (7,)), ((3, 5), (3, 5)), ((1, 5), (3, 5)), ((3, 1), (3, 5)),
    ((3, 1), (1, 5)), ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)),
    ((), (3, 5)), ((1,), (1,)), ((13,), (1,)),
)
REDUCE_SHAPES = ((), (7,), (3, 5), (2, 3, 4), (1, 1), (13,), (0, 3))

Pin = Callable[[list, Any, Any], list]  # pin(inputs, y, G) -> the expected gradients
Twin = Callable[..., Any]  # twin(torch, *tensors, **attrs) -> torch's value of the op


@dataclass(frozen=True)
class Checks:
    """The rows an op's tests run, and why a table has none.

    ``cases``: the parity rows, each (input shapes, attrs). ``sample``: the one (shapes, attrs)
    row of central differences, the pin, double backward and emitted C. ``domain``: each
    input's domain (``ANY``, ``POS``, ``AWAY0``) for the normal-value draws. ``pin``: the
    documented backward formula evaluated independently of the rule (numpy scalars, one IEEE
    rounding per operation), bitwise; ``torch``: the op in torch (float64 oracle, double
    backward). ``fd``/``pin_why``/``higher``/``emit``: empty when the table applies, else why
    not (a table skips an op only with a reason).
    """

    cases: tuple[tuple[tuple, dict], ...]
    sample: tuple[tuple, dict]
    domain: tuple[str, ...]
    pin: Pin | None = None
    torch: Twin | None = None
    fd: str = ""
    pin_why: str = ""
    higher: str = ""
    emit: str = ""
    pin_shapes: tuple | None = None  # the pin's input shapes when not the sample's

    @property
    def pin_inputs(self) -> tuple:
        """The input shapes of the pin rows."""
        return self.pin_shapes if self.pin_shapes is not None else self.sample[0]

    def __post_init__(self) -> None:
        bad = [d for d in self.domain if d not in DOMAINS]
        if bad:
            raise ValueError(f"Checks: unknown domain(s) {bad}; expected {DOMAINS}")
        if len(self.domain) != len(self.sample[0]):
            raise ValueError(f"Checks: {len(self.domain)} domains for "
                             f"{len(self.sample[0])} sample inputs")
        if self.pin is None and not self.pin_why:
            raise ValueError("Checks: a pin formula, or pin_why saying why there is none")
        if self.torch is None and not self.higher:
            raise ValueError("Checks: a torch twin, or higher saying why there is none")


def scalar_type(dtype: Any) -> type:
    """numpy's scalar type of a float dtype (one IEEE rounding per operation on it)."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def each_element(formula: Callable) -> Pin:
    """A pin of an elementwise op from its formula ``formula(T, q, *xs, y)`` -> one gradient
    per input, evaluated element by element on numpy scalars of type ``T`` (inputs of one
    shape: the pin rows do not broadcast)."""

    def pin(ins: list, y: Any, G: Any) -> list:
        T = scalar_type(G.dtype)
        outs = [np.empty(G.shape, G.dtype) for _ in ins]
        with np.errstate(all="ignore"):
            for idx in np.ndindex(G.shape):
                got = formula(T, T(G[idx]), *(T(x[idx]) for x in ins), T(y[idx]))
                for o, v in zip(outs, got):
                    o[idx] = v
        return outs

    pin.formula = formula
    return pin


def unary_checks(pin: Callable | None, torch: Twin | None, domain: str = ANY,
                 **why: str) -> Checks:
    """The checks of a unary elementwise op: every unary shape class, a (3, 4) sample."""
    return Checks(tuple(((s,), {}) for s in UNARY_SHAPES), (((3, 4),), {}), (domain,),
                  each_element(pin) if pin else None, torch, **why)


def binary_checks(pin: Callable | None, torch: Twin | None, domain: tuple = (ANY, ANY),
                  **why: str) -> Checks:
    """The checks of a binary elementwise op: every broadcast class; the sample broadcasts
    ((3, 4) with (4,)); the pin runs on equal shapes (3, 4)."""
    return Checks(tuple((s, {}) for s in BINARY_SHAPES), (((3, 4), (4,)), {}), tuple(domain),
                  each_element(pin) if pin else None, torch, pin_shapes=((3, 4), (3, 4)), **why)


def reduce_cases(nonempty: bool = False) -> tuple[tuple[tuple, dict], ...]:
    """The parity rows of a reduction: all elements, each axis, negative axes with keepdims,
    several axes (row-major over them); ``nonempty`` leaves out rows reducing no element."""
    cases: list = []
    for s in REDUCE_SHAPES:
        if nonempty and 0 in s:
            continue
        cases.append(((s,), {}))
        cases += [((s,), {"axis": ax}) for ax in range(len(s))]
        if len(s) >= 2:
            cases += [((s,), {"axis": -1, "keepdims": True}), ((s,), {"keepdims": True})]
        if len(s) == 3:
            cases += [((s,), {"axis": (0, 2), "keepdims": True}), ((s,), {"axis": (-1, -2)})]
    return tuple(cases)
