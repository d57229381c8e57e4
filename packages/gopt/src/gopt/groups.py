"""Parameter groups as torch spells them: the accepted keys and their checks, the parsing of an
optimizer's ``params`` argument, and the writable ``param_groups`` views.

A group is one set of hyperparameters (``lr``, ``weight_decay`` and, for Adam and AdamW,
``betas``, ``eps``) shared by its parameters. Keys are torch's; inside gopt a group holds
them under their scalar names (``betas`` is ``beta1``, ``beta2``), each a Python float.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gtape
from gtensor import describe

from . import checks

if TYPE_CHECKING:
    from .base import Optimizer

NONNEG = "a finite real number >= 0"
BETA = "a real number in [0, 1)"


@dataclass
class Group:
    """One parameter group: its hyperparameters (scalar names -> floats) and its host-side
    running scalars (Adam's powers of the betas and last step size)."""

    hyper: dict[str, float]
    host: dict[str, float] = field(default_factory=dict)


def check_value(where: str, name: str, key: str, value: Any) -> dict[str, float]:
    """The group key ``key`` = ``value`` checked, as scalar names -> floats (``name`` is how the
    message calls the argument: ``lr``, or ``param_groups[1]['lr']``)."""
    if key in ("lr", "weight_decay", "eps"):
        return {key: checks.real(where, name, value, low=0.0, expected=NONNEG)}
    if key == "betas":
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"{where}: {name} is {describe(value)}; expected a pair "
                            "(beta1, beta2)")
        return {f"beta{k + 1}": checks.real(where, f"{name}[{k}]", value[k], low=0.0, high=1.0,
                                            high_open=True, expected=BETA) for k in range(2)}
    raise ValueError(f"{where}: unknown group key {key!r}")  # pragma: no cover (callers check)


def torch_value(hyper: Mapping[str, float], key: str) -> Any:
    """The group key ``key`` as torch shows it (``betas`` as a tuple)."""
    if key == "betas":
        return (hyper["beta1"], hyper["beta2"])
    return hyper[key]


def same_float(a: float, b: float) -> bool:
    """Whether two floats are the same value, the sign of a zero included."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# ---------------------------------------------------------------- the params argument
def is_store(x: Any) -> bool:
    """Whether ``x`` is a tape or a parameter store (the optimizer's old first argument)."""
    return isinstance(x, gtape.ParamStore)


def _expected() -> str:
    return ("expected an iterable of parameters (Vars made by tp.param), a list of "
            "param-group dicts with a 'params' entry, or a gtape.Tape / a replay program's "
            "parameter store")


def parse(where: str, params: Any, keys: tuple[str, ...]) -> list[tuple[str, list, dict]]:
    """``params`` (an iterable of Vars, or of group dicts) as a list of (name, Vars, options):
    ``name`` how messages call the group (``param_groups[k]``), the group's parameters and its
    other keys as given (checked to be known; values are checked by the optimizer).

    Refuses, naming the group and key: a single Var or dict (wrap it in a list), a set (no
    order), an empty list, a list mixing Vars and dicts, a group that is not a dict, without
    ``params`` or with an empty one, an unknown key, a non-Var parameter.
    """
    if isinstance(params, gtape.Var):
        raise TypeError(f"{where}: params is one parameter ({params!r}); {_expected()} "
                        "(wrap it in a list)")
    if isinstance(params, Mapping):
        raise TypeError(f"{where}: params is a dict; {_expected()} (wrap one group in a list)")
    if isinstance(params, (str, bytes, set, frozenset)) or not _iterable(params):
        raise TypeError(f"{where}: params is {describe(params)}; {_expected()}")
    items = list(params)
    if not items:
        raise ValueError(f"{where}: params is empty; expected at least one parameter (an "
                         "optimizer with nothing to update is a mistake)")
    if all(isinstance(x, Mapping) for x in items):
        return [group_spec(where, f"param_groups[{k}]", d, keys) for k, d in enumerate(items)]
    for j, x in enumerate(items):
        if isinstance(x, Mapping) or not isinstance(x, gtape.Var):
            what = "a dict among parameters" if isinstance(x, Mapping) else describe(x)
            raise TypeError(f"{where}: params[{j}] is {what}; expected every entry a parameter "
                            "Var, or every entry a param-group dict (not a mix)")
    return [("params", items, {})]


def _iterable(x: Any) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


def group_spec(where: str, name: str, d: Mapping, keys: tuple[str, ...]
               ) -> tuple[str, list, dict]:
    """One group dict checked for its keys and its ``params`` (a Var or an iterable of them)."""
    for key in d:
        if key != "params" and key not in keys:
            raise ValueError(f"{where}: {name} has key {key!r}; expected keys among "
                             f"{['params', *keys]}")
    if "params" not in d:
        raise ValueError(f"{where}: {name} has no 'params'; expected a dict with the group's "
                         f"parameters under 'params' (and any of {list(keys)})")
    ps = d["params"]
    if isinstance(ps, gtape.Var):
        ps = [ps]  # torch takes a single tensor here
    elif isinstance(ps, (str, bytes, set, frozenset, Mapping)) or not _iterable(ps):
        raise TypeError(f"{where}: {name}['params'] is {describe(ps)}; expected a list of "
                        "parameter Vars")
    ps = list(ps)
    if not ps:
        raise ValueError(f"{where}: {name}['params'] is empty; expected at least one parameter")
    for j, p in enumerate(ps):
        if not isinstance(p, gtape.Var):
            raise TypeError(f"{where}: {name}['params'][{j}] is {describe(p)}; expected a "
                            "parameter Var made by tp.param(...)")
    return name, ps, {k: v for k, v in d.items() if k != "params"}


def one_tape(where: str, parsed: list[tuple[str, list, dict]]) -> gtape.Tape:
    """The one tape every parsed parameter belongs to (refused: parameters of two tapes)."""
    first = None
    for name, ps, _ in parsed:
        for j, p in enumerate(ps):
            here = f"{name}['params'][{j}]" if name != "params" else f"params[{j}]"
            if first is None:
                first = (here, p.tape)
            elif p.tape is not first[1]:
                raise ValueError(f"{where}: {here} belongs to {p.tape!r}, {first[0]} to "
                                 f"{first[1]!r}; expected the parameters of one tape")
    assert first is not None
    return first[1]


def param_names(parsed: list[tuple[str, list, dict]]) -> Iterator[tuple[str, int, Any]]:
    """(message name, group index, Var) of every parsed parameter, in order."""
    for k, (name, ps, _) in enumerate(parsed):
        for j, p in enumerate(ps):
            yield (f"{name}['params'][{j}]" if name != "params" else f"params[{j}]"), k, p


# ---------------------------------------------------------------- the param_groups views
class ParamGroup(MutableMapping):
    """A live view of one parameter group, read and written as torch's group dict.

    ``g["params"]`` lists the group's parameters; ``g["lr"]`` (and ``weight_decay``, ``betas``,
    ``eps`` where the optimizer has them) reads the value and ``g["lr"] = x`` writes it for the
    next step: checked first (a bad value raises naming the group and key, nothing changes).
    ``params`` is not assignable (``add_param_group`` adds parameters); keys are never removed.
    """

    def __init__(self, opt: Optimizer, index: int) -> None:
        self._opt = opt
        self._k = index

    @property
    def index(self) -> int:
        """The group's index in ``opt.param_groups``."""
        return self._k

    def __getitem__(self, key: str) -> Any:
        if key == "params":
            return [s.var for s in self._opt._slots if s.group == self._k]
        if key not in self._opt.GROUP_KEYS:
            raise KeyError(key)
        return torch_value(self._opt._groups[self._k].hyper, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._opt._set_group_value(self._k, key, value)

    def __delitem__(self, key: str) -> None:
        raise TypeError(f"{type(self._opt).__name__}.param_groups[{self._k}]: keys cannot be "
                        f"removed (a group always has {list(self)})")

    def __iter__(self) -> Iterator[str]:
        return iter(("params", *self._opt.GROUP_KEYS))

    def __len__(self) -> int:
        return 1 + len(self._opt.GROUP_KEYS)

    def __eq__(self, other: object) -> bool:
        # NOTE: not Mapping's value comparison: Var == Var is an op, not a bool
        return (isinstance(other, ParamGroup) and other._opt is self._opt
                and other._k == self._k)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(dict(self.items()))
