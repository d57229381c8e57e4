"""The training definition: everything a replica builds from, checked once on the driver.

A ``Definition`` is what ``Local`` builds in-process and what ``DataParallel`` sends to every
worker (cloudpickle: functions from ``__main__`` or registered modules travel by value). The
bits of a run depend on it and on the data, never on how many replicas run it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gopt
import gtensor
import numpy as np
from gtensor import describe
from gtensor.ops.inner import INNER

from . import inputs

REDUCE = ("mean", "sum")
CLIP_RULES = ("gopt", "torch")
KERNEL_BACKENDS = ("sim", "cpu", "cuda")  # backends a step can be captured on


@dataclass(frozen=True)
class Definition:
    """One training definition (see ``gdist.DataParallel`` for the meaning of each field)."""

    loss_fn: Callable[..., Any]
    init: dict[str, np.ndarray] | None  # the parameters as given, or None with a factory
    factory: Callable[..., Any] | None  # factory(tp) -> model (an nn.Module or {name: Var})
    optimizer: type[gopt.Optimizer]
    opt_kwargs: dict[str, Any]
    microbatch: int
    backend: str
    dtype: str
    reduce: str
    l2: float | dict[str, float]
    clip: float | None
    clip_rule: str
    inner: str
    seed: int
    capture: bool
    param_groups: tuple[dict[str, Any], ...] | None  # {"params": [names], group keys...}
    schedule: Callable[..., Any] | None  # schedule(optimizer) -> a gopt schedule

    def remote(self) -> bytes:
        """This definition as cloudpickle bytes (what a worker builds from).

        NOTE: Dask would pickle a task's arguments with plain pickle where it can, which sends
        a function by reference to its module even where cloudpickle sends it by value; gdist
        pickles the definition itself, with cloudpickle, so workers get what it promises.
        """
        import cloudpickle

        return cloudpickle.dumps(self)

    def identity(self) -> dict[str, Any]:
        """What a checkpoint records of the definition (checked on load)."""
        return {"microbatch": self.microbatch, "reduce": self.reduce, "dtype": self.dtype,
                "optimizer": self.optimizer.KIND}


def define(where: str, loss_fn: Any, init_params: Any, optimizer: Any, opt_kwargs: Any, *,
           microbatch: Any, backend: Any, dtype: Any, reduce: Any, l2: Any, clip: Any,
           clip_rule: Any = "gopt", inner: Any = "plain", seed: Any = 0, capture: Any = False,
           param_groups: Any = None, schedule: Any = None) -> Definition:
    """The arguments of a trainer checked (TypeError / ValueError naming the argument) and
    gathered into a Definition. What needs the parameters' names (l2, param_groups) is
    checked again when the model is built."""
    if not callable(loss_fn):
        raise TypeError(f"{where}: loss_fn is {describe(loss_fn)}; expected a function "
                        "loss_fn(tp, params, batch) -> scalar Var")
    if not (isinstance(optimizer, type) and issubclass(optimizer, gopt.Optimizer)):
        raise TypeError(f"{where}: optimizer is {describe(optimizer)}; expected a gopt "
                        "optimizer class (gopt.Adam, gopt.AdamW, gopt.SGD, ...)")
    if opt_kwargs is not None and not isinstance(opt_kwargs, Mapping):
        raise TypeError(f"{where}: opt_kwargs is {describe(opt_kwargs)}; expected a dict of "
                        f"{optimizer.__name__}'s keyword arguments (or None)")
    if not isinstance(backend, str) or backend not in gtensor.BACKENDS:
        raise ValueError(f"{where}: backend is {backend!r}; expected one of "
                         f"{gtensor.BACKENDS} (a name: workers build their own)")
    if str(dtype) not in ("float64", "float32"):
        raise TypeError(f"{where}: dtype is {dtype!r}; expected 'float64' or 'float32'")
    if reduce not in REDUCE:
        raise ValueError(f"{where}: reduce is {reduce!r}; expected one of {REDUCE}")
    if not isinstance(inner, str) or inner not in INNER:
        raise ValueError(f"{where}: inner is {inner!r}; expected one of {INNER} (the "
                         "replicas' tapes' inner-product contract)")
    if clip_rule not in CLIP_RULES:
        raise ValueError(f"{where}: clip_rule is {clip_rule!r}; expected one of {CLIP_RULES}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not \
            0 <= int(seed) < 2**128:
        raise TypeError(f"{where}: seed is {describe(seed)}; expected an int in [0, 2**128) "
                        "(the model tape's key stream)")
    if not isinstance(capture, bool):
        raise TypeError(f"{where}: capture is {describe(capture)}; expected True or False")
    if capture and backend not in KERNEL_BACKENDS:
        raise ValueError(f"{where}: capture=True needs a kernel backend {KERNEL_BACKENDS}; "
                         f"backend is {backend!r} (the numpy backend runs no kernels)")
    if schedule is not None and not callable(schedule):
        raise TypeError(f"{where}: schedule is {describe(schedule)}; expected None or a "
                        "function optimizer -> gopt schedule (e.g. lambda opt: "
                        "gopt.schedules.cosine(opt, total_steps=100))")
    m = inputs.positive_int(where, "microbatch", microbatch)
    dt = np.dtype(str(dtype))
    if callable(init_params) and not isinstance(init_params, Mapping):
        init, factory = None, init_params
    else:
        init, factory = inputs.params(where, init_params, dt), None
        _check_l2(where, l2, init)
    if not isinstance(l2, (Mapping, int, float)) or isinstance(l2, bool):
        raise TypeError(f"{where}: l2 is {describe(l2)}; expected a float or a dict "
                        "{name: float}")
    return Definition(loss_fn, init, factory, optimizer, dict(opt_kwargs or {}), m, backend,
                      dt.name, reduce, dict(l2) if isinstance(l2, Mapping) else float(l2),
                      None if clip is None else clip, clip_rule, inner, int(seed), capture,
                      _groups(where, param_groups), schedule)


def _check_l2(where: str, l2: Any, names: Sequence[str]) -> None:
    """An ``l2`` dict names only parameters."""
    if isinstance(l2, Mapping):
        unknown = [n for n in l2 if n not in names]
        if unknown:
            raise ValueError(f"{where}: l2 names {unknown}, which are not params; expected "
                             f"names from {sorted(names)}")


def _groups(where: str, groups: Any) -> tuple[dict[str, Any], ...] | None:
    """``param_groups`` checked for its form: a list of dicts whose 'params' are names."""
    if groups is None:
        return None
    if isinstance(groups, (Mapping, str)) or not isinstance(groups, Sequence) or not groups:
        raise TypeError(f"{where}: param_groups is {describe(groups)}; expected a non-empty "
                        "list of dicts {'params': [parameter names], 'lr': ..., ...} (torch's "
                        "groups, with names for the parameters)")
    out = []
    for k, g in enumerate(groups):
        names = g.get("params") if isinstance(g, Mapping) else None
        if isinstance(names, str) or not isinstance(names, Sequence) or not names or \
                not all(isinstance(n, str) for n in names):
            raise TypeError(f"{where}: param_groups[{k}] is {describe(g)}; expected a dict "
                            "whose 'params' is a non-empty list of parameter names")
        out.append({**g, "params": list(names)})
    return tuple(out)


def check_names(where: str, defn: Definition, names: Sequence[str]) -> None:
    """What names parameters (l2, param_groups) checked against the model's ``names``."""
    _check_l2(where, defn.l2, names)
    if defn.param_groups is None:
        return
    seen: dict[str, int] = {}
    for k, g in enumerate(defn.param_groups):
        for n in g["params"]:
            if n not in names:
                raise ValueError(f"{where}: param_groups[{k}] names {n!r}, which is not a "
                                 f"parameter; expected names from {list(names)}")
            if n in seen:
                raise ValueError(f"{where}: {n!r} is in param_groups[{seen[n]}] and "
                                 f"param_groups[{k}]; expected each parameter in one group")
            seen[n] = k
    missing = [n for n in names if n not in seen]
    if missing:
        raise ValueError(f"{where}: param_groups leave out {missing}; expected every "
                         "parameter in exactly one group")
