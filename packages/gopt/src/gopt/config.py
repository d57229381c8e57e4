"""An optimizer's configuration: parameter groups and registration, learning rates, L2
weights and the clip rule, each change bumping its ``Version`` (the step driver and state I/O:
``gopt.base``; the group dicts: ``gopt.groups``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gtape
from gtape.recording import Version
from gtensor import describe

from . import checks, gradients, groups
from .groups import Group, ParamGroup
from .workspace import Workspace

CLIP_RULES = ("gopt", "torch")


@dataclass
class Slot:
    """One registered parameter: its Var, L2 weight, group and per-parameter state buffers."""

    var: gtape.Var
    alpha: float
    shape: tuple[int, ...]
    state: dict[str, Any] = field(default_factory=dict)
    group: int = 0


def gkey(name: str, k: int) -> Any:
    """The workspace key of group ``k``'s 0-d buffer ``name`` (group 0 keeps the plain name)."""
    return name if k == 0 else (name, k)


class Configured:
    """The configuration half of ``gopt.Optimizer`` (which sets these attributes up)."""

    GROUP_KEYS: tuple[str, ...]
    COUPLED_DECAY: bool
    BAKED: tuple[str, ...]
    _tp: Any
    _be: Any
    _ws: Workspace
    _defaults: dict[str, float]
    _groups: list[Group]
    _slots: list[Slot]
    _t: int
    _max_norm: float | None
    _clip_rule: str
    _clip_consts: tuple[Any, ...] | None
    _versions: dict[str, Version]

    def _new_host(self, hyper: dict[str, float]) -> dict[str, float]:
        raise NotImplementedError

    def _group_hyper(self, where: str, name: str, opts: Mapping[str, Any]) -> dict[str, float]:
        """A group's hyperparameters: the constructor's, overridden by its dict's checked keys."""
        hyper = dict(self._defaults)
        for key in self.GROUP_KEYS:
            if key in opts:
                hyper.update(groups.check_value(where, f"{name}[{key!r}]", key, opts[key]))
        return hyper

    def _l2(self, k: int) -> float:
        """The L2 weight a parameter of group ``k`` gets (its weight_decay where coupled)."""
        return self._groups[k].hyper["weight_decay"] if self.COUPLED_DECAY else 0.0

    def _check_new(self, where: str, named: list[tuple[str, int, Any]]) -> None:
        """New parameters (message name, group, Var) checked: live parameters of the store,
        none twice, none registered already."""
        seen: dict[int, str] = {s.var.index: "registered already" for s in self._slots}
        for name, _, p in named:
            checks.store_param(f"{where}: {name}", self._tp, p)
            if p.index in seen:
                raise ValueError(f"{where}: {name} ({p!r}) is {seen[p.index]}; expected each "
                                 "parameter in one group, once")
            seen[p.index] = f"also {name}"

    def version(self, name: str) -> Version:
        """The version of configuration item ``name`` ("lr", "clip", "alpha", "params", ...)."""
        return self._versions[name]

    @property
    def recorded_deps(self) -> tuple[Version, ...]:
        """The versions a recorded device half depends on (``BAKED``): an engine recording the
        device half itself (ggpu-replay) declares these, so a change through any door
        re-records it."""
        return tuple(self._versions[name] for name in self.BAKED)

    # ---------------------------------------------------------------- configuration
    @property
    def tape(self) -> gtape.Tape:
        """The tape (or parameter store) whose parameters this optimizer updates."""
        return self._tp

    @property
    def param_groups(self) -> list[ParamGroup]:
        """The parameter groups as torch's: ``g["params"]``, ``g["lr"]``, ... read and written
        (``g["lr"] = x`` takes effect at the next step; a bad value raises, nothing changes)."""
        return [ParamGroup(self, k) for k in range(len(self._groups))]

    def _common(self, key: str) -> Any:
        """Group key ``key``'s value, the same in every group (else a ValueError saying where
        to read the per-group values)."""
        values = [groups.torch_value(grp.hyper, key) for grp in self._groups]
        if any(v != values[0] for v in values[1:]):
            raise ValueError(f"{type(self).__name__}.{key}: the {len(values)} parameter groups "
                             f"have different values {values}; read "
                             f"opt.param_groups[k][{key!r}]")
        return values[0]

    @property
    def lr(self) -> float:
        """The learning rate (of every group: refused when groups differ, see
        ``param_groups``); settable, for every group, taking effect at the next step."""
        return self._common("lr")

    @lr.setter
    def lr(self, value: float) -> None:
        self._set_lr(value)

    def _set_lr(self, value: float) -> None:
        """Set the learning rate of every group for the next step (a schedule sets each
        group's own).

        The learning rate is a per-step host scalar: every optimizer reads it in its host half
        (``advance``) and writes what it derives from it into each group's 0-d backend
        buffers, so a recorded device half (or a captured program) follows the change without
        re-recording (the "lr" version moves, and only a recording that declares lr baked in
        re-records). A bad value (NaN, inf, negative, not a real number) raises and changes
        nothing.
        """
        lr = checks.real(f"{type(self).__name__}.lr", "lr", value, low=0.0,
                         expected="a finite real number >= 0")
        self._set_lrs([lr] * len(self._groups))

    def _set_lrs(self, lrs: Sequence[float]) -> None:
        """Every group's learning rate (already checked), bumping "lr" if one moved."""
        moved = False
        for grp, lr in zip(self._groups, lrs):
            if not groups.same_float(lr, grp.hyper["lr"]):
                grp.hyper["lr"], moved = lr, True
        if moved:
            self._versions["lr"].bump()

    def _set_group_value(self, k: int, key: str, value: Any) -> None:
        """``param_groups[k][key] = value``: checked, then applied (see ``ParamGroup``)."""
        where, name = type(self).__name__, f"param_groups[{k}][{key!r}]"
        if key == "params":
            raise TypeError(f"{where}: {name} cannot be assigned; add parameters with "
                            "add_param_group({'params': [...], ...}) (or add)")
        if key not in self.GROUP_KEYS:
            raise ValueError(f"{where}: param_groups[{k}] has no key {key!r}; expected one of "
                             f"{list(self.GROUP_KEYS)}")
        new = groups.check_value(where, name, key, value)
        hyper = self._groups[k].hyper
        moved = not all(groups.same_float(v, hyper[n]) for n, v in new.items())
        hyper.update(new)
        if key == "weight_decay" and self.COUPLED_DECAY:
            alpha_moved = False
            for s in self._slots:
                if s.group == k and not groups.same_float(s.alpha, new[key]):
                    s.alpha, alpha_moved = new[key], True
            if alpha_moved:
                self._versions["alpha"].bump()
        if moved:
            self._group_changed(k, key)
            self._versions[key].bump()

    def _group_changed(self, k: int, key: str) -> None:
        """Group ``k``'s ``key`` was written with a new value (Adam: new betas' powers)."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group as torch's ``add_param_group``: ``{"params": [...], key: value, ...}``,
        missing keys taking the constructor's values. Everything is checked first (keys,
        values, parameters: live, of this optimizer's tape, none already registered); a refused
        group changes nothing. Like ``add``, only before the first step."""
        where = f"{type(self).__name__}.add_param_group"
        if not isinstance(param_group, Mapping):
            raise TypeError(f"{where}: param_group is {describe(param_group)}; expected a dict "
                            "with a 'params' entry")
        k = len(self._groups)
        name, ps, opts = groups.group_spec(where, f"param_groups[{k}]", param_group,
                                           self.GROUP_KEYS)
        hyper = self._group_hyper(where, name, opts)
        self._refuse_after_step(where)
        self._check_new(where, [(f"{name}['params'][{j}]", k, p) for j, p in enumerate(ps)])
        self._groups.append(Group(hyper, self._new_host(hyper)))
        for p in ps:
            self._new_slot(p, self._l2(k), k)

    def _refuse_after_step(self, where: str) -> None:
        if self._t:
            raise RuntimeError(f"{where}: {self._t} step(s) were already taken; register every "
                               "parameter before the first step (the step count is shared)")

    @property
    def t(self) -> int:
        """Steps taken so far (the first ``step`` makes it 1)."""
        return self._t

    @property
    def params(self) -> list[gtape.Var]:
        """The registered parameters, in registration order (every group's)."""
        return [s.var for s in self._slots]

    @property
    def max_norm(self) -> float | None:
        """The global-norm clipping threshold, or None when clipping is off."""
        return self._max_norm

    @property
    def clip_rule(self) -> str:
        """The clipping rule: "gopt" (the default) or "torch" (see ``set_clip``)."""
        return self._clip_rule

    def add(self, param: gtape.Var | Sequence[gtape.Var], alpha: float | None = None) -> Any:
        """Register ``param`` in the first group with L2 weight ``alpha`` (the gradient becomes
        g + alpha*p; None: the group's weight_decay for SGD and Adam, 0 for AdamW).

        ``param`` may be a list of parameters (``tp.params()``, ``layer.params``): all are
        checked first, then all registered with the same ``alpha``; the list is returned.
        """
        if alpha is None:
            alpha = self._l2(0)
        if isinstance(param, (list, tuple)):
            where = f"{type(self).__name__}.add"
            indices = [checks.store_param(where, self._tp, p).index for p in param]
            if len(set(indices)) != len(indices):
                raise ValueError(f"{where}: the list names a parameter twice; expected each "
                                 "parameter once")
            known = {s.var.index for s in self._slots}
            for p in param:
                if p.index in known:
                    raise ValueError(f"{where}: {p!r} is already registered; expected each "
                                     "parameter once")
            checks.real(where, "alpha", alpha, low=0.0, expected="a finite real number >= 0")
            if self._t and param:
                self._add_one(param[0], alpha)  # raises the "already stepped" error
            return [self._add_one(p, alpha) for p in param]
        return self._add_one(param, alpha)

    def _add_one(self, param: gtape.Var, alpha: float) -> gtape.Var:
        where = f"{type(self).__name__}.add"
        checks.store_param(where, self._tp, param)
        a = checks.real(where, "alpha", alpha, low=0.0, expected="a finite real number >= 0")
        self._refuse_after_step(where)
        if any(s.var.index == param.index for s in self._slots):
            raise ValueError(f"{where}: {param!r} is already registered; expected each "
                             "parameter once")
        return self._new_slot(param, a, 0)

    def _new_slot(self, param: gtape.Var, alpha: float, k: int) -> gtape.Var:
        """Register a checked parameter in group ``k`` (state buffers made, "params" bumped)."""
        slot = Slot(param, alpha, tuple(param.shape), group=k)
        for name in self.STATE:
            slot.state[name] = self._be.zeros(slot.shape, self._tp.dtype)
        self._slots.append(slot)
        self._versions["params"].bump()
        return param

    def set_alpha(self, param: gtape.Var, alpha: float) -> None:
        """Change registered ``param``'s L2 weight to ``alpha`` (from the next step on)."""
        where = f"{type(self).__name__}.set_alpha"
        checks.store_param(where, self._tp, param)
        a = checks.real(where, "alpha", alpha, low=0.0, expected="a finite real number >= 0")
        slot = next((s for s in self._slots if s.var.index == param.index), None)
        if slot is None:
            raise ValueError(f"{where}: {param!r} is not registered; expected one of "
                             f"{self.params} (register it with add(param, alpha))")
        slot.alpha = a
        self._versions["alpha"].bump()

    def set_clip(self, max_norm: float | None, rule: str = "gopt") -> None:
        """Clip the global gradient norm (over every group) to ``max_norm`` before each step
        (None: no clipping).

        ``rule="gopt"`` (the default): scale ``max_norm / norm`` when ``norm > max_norm``, else
        exactly 1. ``rule="torch"``: ``torch.nn.utils.clip_grad_norm_``'s coefficient,
        ``min(1, max_norm / (norm + 1e-6))`` computed as torch does --
        ``(1 / (norm + 1e-6)) * max_norm``, clamped at 1 -- and always multiplied in.
        Both are worked out on the backend (docs/optimizers.md); a bad value or rule raises
        and changes nothing.
        """
        where = f"{type(self).__name__}.set_clip"
        if not isinstance(rule, str) or rule not in CLIP_RULES:
            raise ValueError(f"{where}: rule is {describe(rule)}; expected one of "
                             f"{list(CLIP_RULES)}")
        if max_norm is None:
            self._max_norm, self._clip_consts = None, None
            self._versions["clip"].bump()
            return
        m = checks.real(where, "max_norm", max_norm, low=0.0, low_open=True,
                        expected="a finite real number > 0, or None")
        self._max_norm, self._clip_rule = m, rule
        self._clip_consts = self._clip_constants(m, rule)
        self._versions["clip"].bump()

    def _clip_constants(self, max_norm: float, rule: str) -> tuple[Any, ...]:
        """The 0-d backend constants of a clip rule (fl(max_norm), 1, and torch's fl(1e-6))."""
        consts = (self._ws.scalar(max_norm), self._ws.scalar(1.0))
        return consts + (self._ws.scalar(gradients.TORCH_CLIP_EPS),) if rule == "torch" \
            else consts

