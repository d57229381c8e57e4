"""A trainer's state as plain arrays: ``.npz`` on disk (no pickle), settings as JSON inside.

Keys: ``gdist.meta`` (a JSON string: format, microbatch, reduce, dtype, backend, optimizer kind,
param names and shapes, batch keys, steps), ``param.<name>`` (the values) and ``opt.<key>``
(``gopt.Optimizer.state_dict(params=False)``: t, moments, hyperparameters, clip, L2 weights).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor import files

from . import inputs

if TYPE_CHECKING:
    from .trainer import Trainer

FORMAT = "gdist-checkpoint-1"
META = "gdist.meta"


def state_dict(t: Trainer) -> dict[str, np.ndarray]:
    """``t``'s params, optimizer state and settings, as host arrays."""
    handles = t._store.handles
    meta = {"format": FORMAT, "microbatch": t._m, "reduce": t._reduce_mode,
            "dtype": t._dtype.name, "backend": t._backend, "optimizer": t._opt.KIND,
            "params": [[n, list(h.shape)] for n, h in handles.items()],
            "batch_keys": None if t._keys is None else list(t._keys), "steps": t._steps}
    if t._inner != "plain":  # an fma run names its contract (plain checkpoints as before)
        meta["inner"] = t._inner
    out = {META: np.array(json.dumps(meta, sort_keys=True))}
    for name, value in t._store.values().items():
        out[f"param.{name}"] = value
    for k, v in t._opt.state_dict(params=False).items():
        out[f"opt.{k}"] = np.asarray(v)
    return out


def load_state_dict(t: Trainer, state: Mapping[str, Any]) -> None:
    """Check ``state`` against ``t``'s definition, then apply it all (or nothing)."""
    where = f"gdist.{type(t).__name__}.load_state_dict"
    if not isinstance(state, Mapping) or META not in state:
        raise ValueError(f"{where}: the state has no {META!r} entry; expected what "
                         "state_dict() returns")
    try:
        meta = json.loads(str(np.asarray(state[META])))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {META} is not JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{where}: {META} has format {meta.get('format')!r}; expected "
                         f"{FORMAT!r}" if isinstance(meta, dict) else f"{where}: bad {META}")
    mine = {"microbatch": t._m, "reduce": t._reduce_mode, "dtype": t._dtype.name,
            "optimizer": t._opt.KIND,
            "params": [[n, list(h.shape)] for n, h in t._store.handles.items()]}
    for k, v in mine.items():
        if meta.get(k) != v:
            raise ValueError(f"{where}: the checkpoint's {k} is {meta.get(k)!r}; this trainer's "
                             f"is {v!r} (resume with the same definition)")
    if meta.get("inner", "plain") != t._inner:
        raise ValueError(f"{where}: the checkpoint's inner-product contract is "
                         f"{meta.get('inner', 'plain')!r}; this trainer's is {t._inner!r} "
                         "(resume with the same definition)")
    steps = meta.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{where}: steps is {steps!r}; expected an int >= 0")
    keys = meta.get("batch_keys")
    if keys is not None and (not isinstance(keys, list)
                             or not all(isinstance(k, str) for k in keys)):
        raise ValueError(f"{where}: batch_keys is {keys!r}; expected a list of str or null")
    shapes = {n: h.shape for n, h in t._store.handles.items()}
    params = inputs.same_params(where, "the checkpoint's params",
                                {k[6:]: v for k, v in state.items() if k.startswith("param.")},
                                shapes, t._dtype)
    # the optimizer checks its own part completely before applying any of it
    t._opt.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("opt.")})
    for name, h in t._store.handles.items():  # nothing below can refuse
        t._store.set_value(h, params[name])
    t._steps = steps
    t._keys = None if keys is None else tuple(keys)


def save(t: Trainer, path: Any) -> None:
    """``state_dict(t)`` written to exactly ``path`` with ``numpy.savez`` (atomic)."""
    state = state_dict(t)
    files.write_atomic(path, lambda f: np.savez(f, **state))


def load(t: Trainer, path: Any) -> None:
    """A file written by ``save`` read (``allow_pickle=False``) into ``t``."""
    where = f"gdist.{type(t).__name__}.load"
    state = files.read_npz(path, where)
    load_state_dict(t, state)
