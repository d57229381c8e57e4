"""Learning-rate schedules: torch's CosineAnnealingLR, StepLR, ExponentialLR and LinearLR.

A schedule acts on every parameter group, as torch's LR schedulers do: each group keeps its own
base learning rate (its ``lr`` when the schedule was made) and follows the schedule from it.
It sets every group's ``lr`` at construction (the value for step 0) and after each
``sched.step()`` (called after ``opt.step()``, as in torch); the optimizer reads each
group's learning rate in the host half of every step and writes what it derives from it into
the group's 0-d backend buffers, so a recorded step or a captured program follows the
schedule without re-recording. Every value is computed on the host in float64 with correctly rounded
operations only (``+ - * /``, and gtensor's own portable ``cos``: no libm), so a schedule is
the same bits on every machine.

>>> import numpy as np
>>> import gtape as g
>>> from gopt import Adam, schedules
>>> tp = g.Tape()
>>> w = tp.param(np.array([1.0, -2.0]))
>>> opt = Adam(tp, lr=0.1)
>>> _ = opt.add(w)
>>> sched = schedules.cosine(opt, total_steps=4)
>>> lrs = []
>>> mark = tp.mark()
>>> for _ in range(4):
...     tp.backward(g.sum(w * w)); opt.step(); sched.step(); tp.reset_to(mark)
...     lrs.append(round(opt.lr, 12))
>>> lrs
[0.085355339059, 0.05, 0.014644660941, 0.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gtensor import describe
from gtensor.scalar.trig import COS_F64

from . import checks
from .base import Optimizer

__all__ = ["Cosine", "Exponential", "Linear", "Schedule", "StepDecay", "cosine", "exponential",
           "linear_warmup", "step"]


def _cos(x: float) -> float:
    """cos(x) in float64 by gtensor's portable implementation (the same bits everywhere)."""
    return COS_F64.eval_float(x)


def _count(where: str, name: str, x: Any, low: int) -> int:
    """``x`` checked to be an int >= ``low``."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or x < low:
        raise (TypeError if not isinstance(x, (int, np.integer)) or isinstance(x, bool)
               else ValueError)(f"{where}: {name} is {describe(x)}; expected an int >= {low}")
    return int(x)


def _optimizer(where: str, opt: Any) -> Any:
    """``opt`` checked to be a gopt optimizer (or a replay program's device optimizer)."""
    if isinstance(opt, Optimizer) or isinstance(getattr(opt, "optimizer", None), Optimizer):
        return opt
    raise TypeError(f"{where}: opt is {describe(opt)}; expected a gopt optimizer (SGD, Adam, "
                    "AdamW) or a replay program's device optimizer")


def _target(opt: Any) -> Optimizer:
    """The gopt optimizer behind ``opt`` (a replay program's device optimizer hands out its)."""
    return opt if isinstance(opt, Optimizer) else opt.optimizer


class Schedule:
    """Base class: ``value(n, base)`` is a group's learning rate after ``n`` calls of
    ``step()`` (``base`` its learning rate when the schedule was made)."""

    KIND = "?"

    def __init__(self, opt: Any) -> None:
        self._opt = _optimizer(type(self).__name__, opt)
        self._bases = [grp.hyper["lr"] for grp in _target(opt)._groups]
        self._n = 0
        lrs = [self._first(b) for b in self._bases]
        self._apply(lrs)
        self._lrs = lrs

    @property
    def optimizer(self) -> Any:
        """The optimizer whose learning rates this schedule sets."""
        return self._opt

    @property
    def base_lrs(self) -> list[float]:
        """Every group's learning rate when the schedule was made (torch's ``base_lrs``)."""
        return list(self._bases)

    @property
    def base_lr(self) -> float:
        """The base learning rate (of every group: refused when groups differ, read
        ``base_lrs``)."""
        if any(b != self._bases[0] for b in self._bases[1:]):
            raise ValueError(f"{type(self).__name__}.base_lr: the {len(self._bases)} groups "
                             f"have different base learning rates {self._bases}; read "
                             "base_lrs")
        return self._bases[0]

    @property
    def last_epoch(self) -> int:
        """Calls of ``step()`` so far (torch's ``last_epoch``)."""
        return self._n

    def get_last_lr(self) -> list[float]:
        """The learning rates the schedule set last, one per group (as in torch)."""
        return list(self._lrs)

    def step(self) -> None:
        """Advance one step and set every group's learning rate (call after ``opt.step()``)."""
        lrs = [self._next(self._n + 1, b, lr) for b, lr in zip(self._bases, self._lrs)]
        self._apply(lrs)  # checks every value first: a refused one changes nothing
        self._n, self._lrs = self._n + 1, lrs

    def _apply(self, lrs: list[float]) -> None:
        """Set each group's learning rate, all checked first (the group count too)."""
        where = f"{type(self).__name__}.step"
        opt = _target(self._opt)
        if len(opt._groups) != len(self._bases):
            raise ValueError(f"{where}: the optimizer has {len(opt._groups)} parameter groups; "
                             f"this schedule was made for {len(self._bases)} (make the "
                             "schedule after adding every group)")
        checked = [checks.real(where, f"the lr of group {k}", lr, low=0.0,
                               expected="a finite real number >= 0")
                   for k, lr in enumerate(lrs)]
        opt._set_lrs(checked)

    def _first(self, base: float) -> float:
        """A group's learning rate for step 0 (set at construction)."""
        return base

    def _next(self, n: int, base: float, lr: float) -> float:
        """A group's learning rate after ``n`` steps (``n >= 1``), from its base and the one
        before."""
        raise NotImplementedError

    def _hyper(self) -> dict[str, float]:
        """The schedule's own arguments (checked equal on load)."""
        return {}

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, np.ndarray]:
        """The schedule's state as numpy arrays (``kind``, ``n``, ``base_lr``, ``lr``, hyper):
        ``base_lr`` and ``lr`` 0-d for one group (as before groups), one entry per group
        otherwise."""
        one = len(self._bases) == 1
        out = {"kind": np.array(self.KIND), "n": np.array(self._n, np.int64),
               "base_lr": np.array(self._bases[0] if one else self._bases, np.float64),
               "lr": np.array(self._lrs[0] if one else self._lrs, np.float64)}
        out.update({f"hyper.{k}": np.array(v, np.float64) for k, v in self._hyper().items()})
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (into a schedule made with the same arguments,
        on an optimizer with as many groups).

        Everything is checked first; then the step count, the learning rates and every
        group's ``lr`` are set. A refused state changes nothing.
        """
        where = f"{type(self).__name__}.load_state_dict"
        for key in ("kind", "n", "base_lr", "lr", *(f"hyper.{k}" for k in self._hyper())):
            if key not in state:
                raise ValueError(f"{where}: the state has no entry {key!r}; expected what "
                                 "state_dict() returns")
            if key == "kind" and str(np.asarray(state["kind"])) != self.KIND:
                raise ValueError(f"{where}: the state is of a {str(np.asarray(state['kind']))!r}"
                                 f" schedule; expected {self.KIND!r}")
        for k, v in self._hyper().items():
            got = np.asarray(state[f"hyper.{k}"])
            if got.shape != () or got.dtype.kind not in "iuf" or float(got) != v:
                raise ValueError(f"{where}: hyper.{k} is {got!r}; this schedule has {v!r} "
                                 "(make the schedule with the same arguments, then load)")
        n = np.asarray(state["n"])
        if n.shape != () or n.dtype.kind not in "iu" or int(n) < 0:
            raise ValueError(f"{where}: n is {n!r}; expected an int >= 0")
        groups = len(self._bases)
        shape = () if groups == 1 else (groups,)
        vals = {}
        for key in ("base_lr", "lr"):
            a = np.asarray(state[key])
            if a.dtype.kind not in "iuf":
                raise TypeError(f"{where}: {key} is {a!r}; expected real numbers")
            if a.shape != shape:
                raise ValueError(f"{where}: {key} has shape {a.shape} (a state of "
                                 f"{1 if a.ndim == 0 else a.size} group(s)); this schedule's "
                                 f"optimizer has {groups} group(s), expected shape {shape}")
            vals[key] = [checks.real(where, key if groups == 1 else f"{key}[{k}]", float(x),
                                     low=0.0, expected="a finite real number >= 0")
                         for k, x in enumerate(a.reshape(-1))]
        self._apply(vals["lr"])
        self._n, self._bases, self._lrs = int(n), vals["base_lr"], vals["lr"]

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v}" for k, v in self._hyper().items())
        bases = self._bases[0] if len(self._bases) == 1 else self._bases
        lrs = self._lrs[0] if len(self._lrs) == 1 else self._lrs
        return f"<{type(self).__name__} base_lr={bases}, {hyper}, n={self._n}, lr={lrs}>"


class Cosine(Schedule):
    """Linear warmup, then torch's CosineAnnealingLR down to ``min_lr`` (see ``cosine``)."""

    KIND = "cosine"

    def __init__(self, opt: Any, total_steps: int, warmup_steps: int = 0,
                 min_lr: float = 0.0) -> None:
        where = "cosine"
        self._w = _count(where, "warmup_steps", warmup_steps, 0)
        self._total = _count(where, "total_steps", total_steps, self._w + 1)
        self._min = checks.real(where, "min_lr", min_lr, low=0.0,
                                expected="a finite real number >= 0")
        super().__init__(opt)

    def _value(self, n: int, base: float) -> float:
        w = self._w
        if n < w:
            return base * (n + 1) / (w + 1)
        if n >= self._total:
            return self._min
        k, t = n - w, self._total - w
        return self._min + (base - self._min) * (1.0 + _cos(math.pi * k / t)) / 2.0

    def _first(self, base: float) -> float:
        return self._value(0, base)

    def _next(self, n: int, base: float, lr: float) -> float:
        return self._value(n, base)

    def _hyper(self) -> dict[str, float]:
        return {"total_steps": self._total, "warmup_steps": self._w, "min_lr": self._min}


class StepDecay(Schedule):
    """torch's StepLR: the learning rate times ``gamma`` every ``step_size`` steps."""

    KIND = "step"

    def __init__(self, opt: Any, step_size: int, gamma: float = 0.1) -> None:
        self._size = _count("step", "step_size", step_size, 1)
        self._gamma = checks.real("step", "gamma", gamma, low=0.0, low_open=True,
                                  expected="a finite real number > 0")
        super().__init__(opt)

    def _next(self, n: int, base: float, lr: float) -> float:
        return lr * self._gamma if n % self._size == 0 else lr

    def _hyper(self) -> dict[str, float]:
        return {"step_size": self._size, "gamma": self._gamma}


class Exponential(Schedule):
    """torch's ExponentialLR: the learning rate times ``gamma`` every step."""

    KIND = "exponential"

    def __init__(self, opt: Any, gamma: float) -> None:
        self._gamma = checks.real("exponential", "gamma", gamma, low=0.0, low_open=True,
                                  expected="a finite real number > 0")
        super().__init__(opt)

    def _next(self, n: int, base: float, lr: float) -> float:
        return lr * self._gamma

    def _hyper(self) -> dict[str, float]:
        return {"gamma": self._gamma}


class Linear(Schedule):
    """torch's LinearLR: the factor goes linearly from ``start_factor`` to ``end_factor``."""

    KIND = "linear"

    def __init__(self, opt: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5) -> None:
        where = "linear_warmup"
        self._start = checks.real(where, "start_factor", start_factor, low=0.0, low_open=True,
                                  high=1.0, expected="a real number in (0, 1]")
        self._end = checks.real(where, "end_factor", end_factor, low=0.0, high=1.0,
                                expected="a real number in [0, 1]")
        self._iters = _count(where, "total_iters", total_iters, 1)
        super().__init__(opt)

    def _factor(self, n: int) -> float:
        return self._start + (self._end - self._start) * min(n, self._iters) / self._iters

    def _first(self, base: float) -> float:
        return base * self._start

    def _next(self, n: int, base: float, lr: float) -> float:
        return base * self._factor(n)

    def _hyper(self) -> dict[str, float]:
        return {"start_factor": self._start, "end_factor": self._end,
                "total_iters": self._iters}


def cosine(opt: Any, total_steps: int, warmup_steps: int = 0, min_lr: float = 0.0) -> Cosine:
    """Cosine decay from ``opt.lr`` to ``min_lr`` over ``total_steps``, after a linear warmup.

    After ``n`` calls of ``step()`` the learning rate is ``base * (n+1)/(w+1)`` for
    ``n < w = warmup_steps``, then ``min_lr + (base - min_lr) * (1 + cos(pi*k/T)) / 2`` with
    ``k = n - w``, ``T = total_steps - w`` (torch's ``CosineAnnealingLR(opt, T, min_lr)``,
    preceded by ``LinearLR(opt, 1/(w+1), 1.0, w)`` in a ``SequentialLR`` when ``w > 0``), and
    ``min_lr`` from ``n = total_steps`` on (torch's would rise again).
    """
    return Cosine(opt, total_steps, warmup_steps, min_lr)


def step(opt: Any, step_size: int, gamma: float = 0.1) -> StepDecay:
    """torch's ``StepLR(opt, step_size, gamma)``: lr times gamma every ``step_size`` steps."""
    return StepDecay(opt, step_size, gamma)


def exponential(opt: Any, gamma: float) -> Exponential:
    """torch's ``ExponentialLR(opt, gamma)``: lr times gamma after every step."""
    return Exponential(opt, gamma)


def linear_warmup(opt: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                  total_iters: int = 5) -> Linear:
    """torch's ``LinearLR``: lr times a factor going linearly from ``start_factor`` (step 0)
    to ``end_factor`` (step ``total_iters`` and after)."""
    return Linear(opt, start_factor, end_factor, total_iters)
