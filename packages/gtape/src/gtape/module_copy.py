"""``Module.to``: a copy of a module tree on another tape (another dtype, backend, or a given
tape), its params copied in ``named_parameters`` order, tied params tied, its states
(running statistics, ``Tape.state``) copied at their current values after the params, buffers
and dropout keys kept.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> m = g.nn.Linear(tp, 3, 2)
>>> m32 = m.to("float32")
>>> m32.tape.dtype.name, m32.weight.numpy().dtype.name, m.tape is tp
('float32', 'float32', True)
"""

from __future__ import annotations

import copy
from typing import Any

import gtensor
import numpy as np
from gtensor import describe

from .modules import Module
from .tape import Tape
from .var import Var


def _target_tape(where: str, src: Tape | None, target: Any) -> Tape:
    """The tape ``target`` names: itself, or a new tape like ``src`` with a dtype or backend."""
    if isinstance(target, Tape):
        return target
    if src is None:
        raise ValueError(f"{where}: the module has no parameters, so no tape to derive one "
                         f"from; pass a gtape.Tape (got {describe(target)})")
    if isinstance(target, str) and target in gtensor.BACKENDS:
        return Tape(target, src.dtype, inner=src.inner, seed=src.seed)
    try:
        dt = np.dtype(target)
    except TypeError:
        dt = None
    if dt is not None and dt.name in ("float32", "float64"):
        return Tape(src.backend, dt, inner=src.inner, seed=src.seed)
    raise TypeError(f"{where}: target is {describe(target)}; expected a dtype ('float32', "
                    f"'float64'), a backend name {gtensor.BACKENDS} or a gtape.Tape")


def copy_to(module: Module, target: Any) -> Module:
    """A copy of ``module`` on the tape ``target`` names (see ``Module.to``)."""
    where = f"{type(module).__name__}.to"
    src = module.tape
    dst = _target_tape(where, src, target)
    params: dict[tuple[int, int], Var] = {}
    for _, p in module.named_parameters():  # registration order = named_parameters order
        params[(id(p.tape), p.index)] = dst.param(p.numpy())
    for _, s in module.named_states():
        if (id(s.tape), s.index) not in params:
            params[(id(s.tape), s.index)] = dst.state(s.tape.backend.to_numpy(
                s.tape.state_value(s)))
    memo: dict[int, Any] = {}

    def move(value: Any, path: str) -> Any:
        if isinstance(value, Var):
            key = (id(value.tape), value.index)
            if value.op not in ("param", "state") or key not in params:
                raise ValueError(f"{where}: {path} holds {value!r}, which is not one of the "
                                 "module's params or states; to() copies those (keep data as "
                                 "buffers)")
            return params[key]
        if isinstance(value, Module):
            return clone(value, path)
        if isinstance(value, Tape):
            return dst if value is src else value
        if isinstance(value, list):
            return [move(v, f"{path}[{k}]") for k, v in enumerate(value)]
        if isinstance(value, tuple) and any(isinstance(v, (Var, Module)) for v in value):
            return tuple(move(v, f"{path}[{k}]") for k, v in enumerate(value))
        if isinstance(value, dict):
            return {k: move(v, f"{path}[{k!r}]") for k, v in value.items()}
        if isinstance(value, np.ndarray):
            return value.copy()
        return value

    def clone(m: Module, path: str) -> Module:
        if id(m) in memo:
            return memo[id(m)]
        new = copy.copy(m)
        memo[id(m)] = new
        for k, v in vars(m).items():
            new.__dict__[k] = move(v, f"{path}.{k}" if path else k)
        return new

    return clone(module, "")
