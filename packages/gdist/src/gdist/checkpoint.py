"""A trainer's state as plain arrays: ``.npz`` on disk (no pickle), settings as JSON inside.

Keys: ``gdist.meta`` (a JSON string: format, microbatch, reduce, dtype, backend, optimizer kind,
param names and shapes, batch keys, steps, the microbatches run (the next step's first
microbatch serial, which dropout keys follow), the model tape's seed and, when not the
defaults, the inner-product contract and the parameter groups' names), ``param.<name>`` (the
values), ``opt.<key>`` (``gopt.Optimizer.state_dict(params=False)``: t, moments,
hyperparameters, clip, L2 weights) and ``sched.<key>`` (the schedule's ``state_dict``).
Format 1 files (before replicas: no microbatch count, seed or schedule) still load.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor import files

from . import inputs

if TYPE_CHECKING:
    from .replica import Replica

FORMAT = "gdist-checkpoint-2"
FORMATS = ("gdist-checkpoint-1", FORMAT)
META = "gdist.meta"


def meta_of(rep: Replica) -> dict[str, Any]:
    """The JSON settings of ``rep``'s state (batch_keys None: the trainer fills them in)."""
    d = rep.defn
    meta = {"format": FORMAT, **d.identity(), "backend": d.backend,
            "params": [[n, list(v.shape)] for n, v in rep.store.vars.items()],
            "batch_keys": None, "steps": rep.steps, "microbatches": rep.microbatches,
            "seed": d.seed, "schedule": None if rep.sched is None else rep.sched.KIND}
    if d.inner != "plain":  # an fma run names its contract (plain checkpoints as before)
        meta["inner"] = d.inner
    if d.param_groups is not None:
        meta["groups"] = [list(g["params"]) for g in d.param_groups]
    return meta


def state_dict(rep: Replica) -> dict[str, np.ndarray]:
    """``rep``'s params, optimizer and schedule state and settings, as host arrays."""
    out = {META: np.array(json.dumps(meta_of(rep), sort_keys=True))}
    for name, value in rep.model.values().items():
        out[f"param.{name}"] = value
    for k, v in rep.opt.state_dict(params=False).items():
        out[f"opt.{k}"] = np.asarray(v)
    if rep.sched is not None:
        for k, v in rep.sched.state_dict().items():
            out[f"sched.{k}"] = np.asarray(v)
    return out


def read_meta(where: str, state: Mapping[str, Any]) -> dict[str, Any]:
    """The checked JSON settings of a state."""
    if not isinstance(state, Mapping) or META not in state:
        raise ValueError(f"{where}: the state has no {META!r} entry; expected what "
                         "state_dict() returns")
    try:
        meta = json.loads(str(np.asarray(state[META])))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {META} is not JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") not in FORMATS:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{where}: {META} has format {got!r}; expected one of {FORMATS}")
    return meta


def _count(where: str, meta: dict, key: str, default: int | None) -> int:
    v = meta.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where}: {key} is {v!r}; expected an int >= 0")
    return v


def check(where: str, rep: Replica, state: Mapping[str, Any]) -> tuple[dict, dict, int, int]:
    """``state`` checked against ``rep``'s definition: (meta, params, steps, microbatches)."""
    meta = read_meta(where, state)
    d = rep.defn
    mine = {**d.identity(), "params": [[n, list(v.shape)] for n, v in rep.store.vars.items()]}
    for k, v in mine.items():
        if meta.get(k) != v:
            raise ValueError(f"{where}: the checkpoint's {k} is {meta.get(k)!r}; this trainer's "
                             f"is {v!r} (resume with the same definition)")
    if meta.get("inner", "plain") != d.inner:
        raise ValueError(f"{where}: the checkpoint's inner-product contract is "
                         f"{meta.get('inner', 'plain')!r}; this trainer's is {d.inner!r} "
                         "(resume with the same definition)")
    for k, v in (("seed", d.seed), ("schedule", None if rep.sched is None else rep.sched.KIND),
                 ("groups", None if d.param_groups is None else
                  [list(g["params"]) for g in d.param_groups])):
        got = meta.get(k, 0 if k == "seed" else None)
        if got != v:
            raise ValueError(f"{where}: the checkpoint's {k} is {got!r}; this trainer's is "
                             f"{v!r} (resume with the same definition)")
    steps = _count(where, meta, "steps", None)
    micro = _count(where, meta, "microbatches", 0)
    keys = meta.get("batch_keys")
    if keys is not None and (not isinstance(keys, list)
                             or not all(isinstance(k, str) for k in keys)):
        raise ValueError(f"{where}: batch_keys is {keys!r}; expected a list of str or null")
    shapes = {n: tuple(v.shape) for n, v in rep.store.vars.items()}
    params = inputs.same_params(where, "the checkpoint's params",
                                {k[6:]: v for k, v in state.items() if k.startswith("param.")},
                                shapes, rep.store.dtype)
    return meta, params, steps, micro


def load_state_dict(rep: Replica, state: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``state`` against ``rep``'s definition, then apply it all (or nothing); returns
    its meta."""
    where = "gdist: load_state_dict"
    meta, params, steps, micro = check(where, rep, state)
    before = rep.opt.state_dict(params=False)
    # the optimizer checks its own part completely before applying any of it
    rep.opt.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("opt.")})
    if rep.sched is not None:
        try:
            rep.sched.load_state_dict({k[6:]: v for k, v in state.items()
                                       if k.startswith("sched.")})
        except (ValueError, TypeError):
            rep.opt.load_state_dict(before)  # all or nothing
            raise
    rep.model.set_values(params)  # nothing below can refuse
    rep.steps, rep.microbatches = steps, micro
    return meta


def save(state: Mapping[str, np.ndarray], path: Any) -> None:
    """``state`` written to exactly ``path`` with ``numpy.savez`` (atomic)."""
    files.write_atomic(path, lambda f: np.savez(f, **state))


def load(path: Any, where: str) -> dict[str, np.ndarray]:
    """A file written by ``save`` read (``allow_pickle=False``)."""
    return files.read_npz(path, where)


def with_keys(state: Mapping[str, np.ndarray], keys: tuple[str, ...] | None
              ) -> dict[str, np.ndarray]:
    """``state`` with the trainer's batch keys written into its meta."""
    meta = json.loads(str(np.asarray(state[META])))
    meta["batch_keys"] = None if keys is None else list(keys)
    return {**state, META: np.array(json.dumps(meta, sort_keys=True))}
