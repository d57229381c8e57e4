"""An optimizer's state as host arrays: ``state_dict``, an all-or-nothing ``load_state_dict``,
and ``save``/``load`` as .npz archives (no pickle). ``Optimizer``'s methods of those names call
these; subclasses add their hyperparameters and host scalars through ``_hyper``/``_host_state``
and check them in ``_check_hyper``/``_check_host``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor import files

from . import checks

if TYPE_CHECKING:
    from .base import Optimizer


def _prefix(k: int) -> str:
    """Where group ``k``'s entries live: group 0 in ``hyper.*`` / ``host.*`` (a one-group state
    is the state of an optimizer without groups), group k >= 1 in ``group.<k>.hyper.*``..."""
    return "" if k == 0 else f"group.{k}."


def state_dict(opt: Optimizer, params: bool = True) -> dict[str, np.ndarray]:
    """The optimizer's state as host numpy arrays (and the parameter values if ``params``)."""
    tp = opt._tp
    out: dict[str, np.ndarray] = {
        "kind": np.array(opt.KIND), "t": np.array(opt._t, np.int64),
        "dtype": np.array(tp.dtype.name),
        "max_norm": np.array(math.nan if opt._max_norm is None else opt._max_norm),
        "alpha": np.array([s.alpha for s in opt._slots], np.float64),
    }
    if _inner(tp) != "plain":  # the fma contract's runs name it (plain states stay as they were)
        out["inner"] = np.array(_inner(tp))
    if opt._max_norm is not None and opt._clip_rule != "gopt":  # likewise the torch clip rule
        out["clip_rule"] = np.array(opt._clip_rule)
    if len(opt._groups) > 1:  # likewise groups: which group each parameter is in
        out["param_group"] = np.array([s.group for s in opt._slots], np.int64)
    for k, grp in enumerate(opt._groups):
        for name, v in opt._saved_hyper(k).items():
            out[f"{_prefix(k)}hyper.{name}"] = np.array(v, np.float64)
        for name, v in grp.host.items():
            out[f"{_prefix(k)}host.{name}"] = np.array(v, np.float64)
    for i, s in enumerate(opt._slots):
        checks.store_param("state_dict", tp, s.var)
        for name in opt.STATE:
            out[f"{name}.{i}"] = opt._be.to_numpy(s.state[name])
        if params:
            out[f"param.{i}"] = opt._be.to_numpy(tp.value(s.var))
    return out


def load_state_dict(opt: Optimizer, state: dict[str, Any]) -> None:
    """Restore what ``state_dict`` returned (hyperparameters, t, buffers, parameter values).

    Everything is checked first -- keys, kind, dtype, group layout, shapes, and every value
    against the ranges the constructor enforces -- then applied at once: a refused state
    leaves the optimizer exactly as it was.
    """
    where = f"{type(opt).__name__}.load_state_dict"
    get = _getter(where, state)
    kind, dtype = str(get("kind")), str(get("dtype"))
    if kind != opt.KIND:
        raise ValueError(f"{where}: the state is of a {kind!r} optimizer; expected "
                         f"{opt.KIND!r}")
    if dtype != opt._tp.dtype.name:
        raise ValueError(f"{where}: the state holds {dtype} arrays; this tape is "
                         f"{opt._tp.dtype.name}")
    inner = str(state["inner"]) if "inner" in state else "plain"
    if inner != _inner(opt._tp):
        raise ValueError(f"{where}: the state is of a run under the {inner!r} inner-product "
                         f"contract; this tape's is {_inner(opt._tp)!r} (Tape(..., inner=...) "
                         "must match the run that saved it)")
    t = np.asarray(get("t"))
    if t.shape != () or t.dtype.kind not in "iu" or int(t) < 0:
        raise ValueError(f"{where}: t is {t!r}; expected an int >= 0")
    m = _scalar(where, "max_norm", get("max_norm"))
    if not math.isnan(m):
        checks.real(where, "max_norm", m, low=0.0, low_open=True,
                    expected="a finite real number > 0, or NaN for no clipping")
    rule = str(state["clip_rule"]) if "clip_rule" in state else "gopt"
    if rule not in ("gopt", "torch"):
        raise ValueError(f"{where}: clip_rule is {rule!r}; expected 'gopt' or 'torch'")
    alpha = np.asarray(get("alpha"))
    if alpha.shape != (len(opt._slots),) or alpha.dtype.kind != "f":
        raise ValueError(f"{where}: the state has {alpha.size} parameters; this optimizer has "
                         f"{len(opt._slots)} registered (register the same ones first)")
    _check_layout(where, opt, state)
    hypers = [_group_hyper(where, opt, state, k) for k in range(len(opt._groups))]
    hosts = [opt._check_host(where, f"{_prefix(k)}host.",
                             {n: _scalar(where, f"{_prefix(k)}host.{n}",
                                         get(f"{_prefix(k)}host.{n}")) for n in grp.host})
             for k, grp in enumerate(opt._groups)]
    alphas = [checks.real(where, f"alpha[{i}]", float(a), low=0.0,
                          expected="a finite real number >= 0") for i, a in enumerate(alpha)]
    arrays: list[dict[str, Any]] = []
    for i, s in enumerate(opt._slots):
        checks.store_param(where, opt._tp, s.var)
        names = list(opt.STATE) + (["param"] if f"param.{i}" in state else [])
        got = {}
        for name in names:
            a = np.asarray(get(f"{name}.{i}"))
            if a.shape != s.shape or a.dtype != opt._tp.dtype:
                raise ValueError(f"{where}: {name}.{i} has shape {a.shape} and dtype "
                                 f"{a.dtype}; expected {s.shape} and {opt._tp.dtype}")
            got[name] = a
        if "param" in got:  # onto the backend now: a store's set_value takes its arrays
            got["param"] = opt._be.asarray(got["param"], dtype=opt._tp.dtype)
        arrays.append(got)
    clip_consts = None if math.isnan(m) else opt._clip_constants(m, rule)
    # everything checked and converted: now apply (nothing below can refuse)
    for grp, hyper, host in zip(opt._groups, hypers, hosts):
        grp.hyper, grp.host = hyper, host
    opt._t = int(t)
    opt._max_norm = None if math.isnan(m) else m
    opt._clip_rule = "gopt" if math.isnan(m) else rule
    opt._clip_consts = clip_consts
    for s, a, got in zip(opt._slots, alphas, arrays):
        s.alpha = a
        for name in opt.STATE:  # into the existing buffers: they never move
            opt._be.write(s.state[name], got[name])
        if "param" in got:
            opt._tp.set_value(s.var, got["param"])
    opt._configured()  # every configuration item may have moved


def _check_layout(where: str, opt: Optimizer, state: dict[str, Any]) -> None:
    """The state's parameter groups (how many, which parameter in which) must be this
    optimizer's: a state of another layout is refused, naming both."""
    n = 1
    while f"group.{n}.hyper.lr" in state:
        n += 1
    ours = [s.group for s in opt._slots]
    if "param_group" in state:
        theirs = np.asarray(state["param_group"])
        if theirs.dtype.kind not in "iu" or theirs.shape != (len(ours),):
            raise ValueError(f"{where}: param_group is {theirs!r}; expected {len(ours)} "
                             "group indices (one per parameter)")
        theirs = [int(x) for x in theirs]
    else:
        theirs = [0] * len(ours)
    if n != len(opt._groups) or theirs != ours:
        raise ValueError(f"{where}: the state has {n} parameter group(s), parameters in groups "
                         f"{theirs}; this optimizer has {len(opt._groups)}, parameters in "
                         f"groups {ours} (make the optimizer with the same groups, then load)")


def _group_hyper(where: str, opt: Optimizer, state: dict[str, Any], k: int) -> dict[str, float]:
    """Group ``k``'s saved hyperparameters, checked as the constructor checks them (a coupled
    weight_decay missing from the state is 0, as before groups)."""
    out = {}
    for name in opt._groups[k].hyper:
        key = f"{_prefix(k)}hyper.{name}"
        if name == "weight_decay" and opt.COUPLED_DECAY and key not in state:
            out[name] = 0.0
            continue
        v = _scalar(where, key, _getter(where, state)(key))
        if name.startswith("beta"):
            out[name] = checks.real(where, key, v, low=0.0, high=1.0, high_open=True,
                                    expected="a real number in [0, 1)")
        else:
            out[name] = checks.real(where, key, v, low=0.0,
                                    expected="a finite real number >= 0")
    return out


def save(opt: Optimizer, path: Any, params: bool = True) -> None:
    """Write ``state_dict(params)`` to exactly ``path`` (an .npz archive, no pickle).

    Written to a temporary file in the same directory, flushed, fsynced and renamed into
    place: a failed or interrupted save leaves the previous file intact.
    """
    files.write_atomic(path, lambda f: np.savez(f, **opt.state_dict(params)))

def load(opt: Optimizer, path: Any) -> None:
    """Read a file written by ``save`` (``allow_pickle=False``) into this optimizer."""
    where = f"{type(opt).__name__}.load"
    state = files.read_npz(path, where)
    opt.load_state_dict(state)


def _inner(tp: Any) -> str:
    """The tape's inner-product contract ("plain" for a tape that predates the choice)."""
    return getattr(tp, "inner", "plain")


def _scalar(where: str, key: str, value: Any) -> float:
    """A saved scalar as a float (TypeError naming the key otherwise)."""
    a = np.asarray(value)
    if a.shape != () or a.dtype.kind not in "iuf":
        raise TypeError(f"{where}: {key} is {a!r}; expected a real number")
    return float(a)


def _getter(where: str, state: dict[str, Any]):
    def get(key: str) -> Any:
        if key not in state:
            raise ValueError(f"{where}: the state has no entry {key!r}; expected what "
                             "state_dict() returns")
        return state[key]
    return get
