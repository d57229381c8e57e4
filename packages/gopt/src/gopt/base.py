"""The Optimizer base: parameter groups and registration, L2 and clipping, the step driver
(parameter groups: ``gopt.groups``; state I/O: ``gopt.state``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gtape
import numpy as np
from gtape.recording import Recording, Version
from gtensor.recording import record, recordable

from . import checks, gradients, groups
from . import state as state_io
from .config import CLIP_RULES, Configured, Slot, gkey
from .groups import Group
from .workspace import Workspace

__all__ = ["CLIP_RULES", "Optimizer", "Slot", "gkey"]

class Optimizer(Configured):
    """Base class: subclasses define ``STATE`` (per-parameter buffers), ``GROUP_KEYS`` and
    ``_update``.

    ``params`` is what torch takes -- an iterable of parameters (one group), or a list of
    param-group dicts (``{"params": [...], "lr": ..., ...}``; a missing key takes the
    constructor's value) -- and the tape is found from the parameters (``Var.tape``); or,
    as before groups, a ``gtape.Tape`` / parameter store with parameters registered later by
    ``add``. ``store=`` names the parameter store explicitly (a replay program's).

    The optimizer works over a *parameter store*: a ``gtape.Tape``, or any object with the same
    ``backend``, ``dtype``, ``value(p)``, ``grad(p)``, ``set_value(p, array)`` plus
    ``check_param(where, p)`` (a replay program holding the tape's parameters on a device);
    a step updates each parameter's buffer in place: ``param_buffer(p)`` where the store has
    it (else ``value(p)``, which must then be the writable buffer), followed by
    ``note_updated(p)`` where the store has it (a tape: its write clock ticks).
    A step is two halves: ``advance`` (host: the step count and per-step scalars of every
    group, written into small backend buffers) and ``device_step`` (backend ops only, on
    buffers that never move), so a replay engine can record the second half once and re-run it
    every step (``check_step`` first refuses a step that cannot run).
    """

    KIND = "?"
    STATE: tuple[str, ...] = ()
    # torch's group keys this optimizer has (besides "params"), in their check order
    GROUP_KEYS: tuple[str, ...] = ("lr", "weight_decay")
    # weight_decay is coupled L2 (g + wd*p: each parameter's alpha), as torch's SGD and Adam;
    # AdamW's is decoupled (its own per-group buffer)
    COUPLED_DECAY = True
    # the configuration a recorded device half bakes in (its launches' scalar attributes and
    # the parameter list): a change to any of these re-records it. NOTE: "lr" is here unless
    # the subclass's device half reads lr only through a per-step buffer (Adam's lr_t).
    BAKED: tuple[str, ...] = ("lr", "clip", "alpha", "params")

    def __init__(self, params: Any, *, store: Any = None, **defaults: Any) -> None:
        where = type(self).__name__
        self._slots: list[Slot] = []
        if groups.is_store(params):
            if store is not None:
                raise TypeError(f"{where}: store= is given with a tape or store as params; "
                                "expected store= only with parameters (or param-group dicts)")
            self._tp = checks.store(where, params)
            parsed = None
        else:
            parsed = groups.parse(where, params, self.GROUP_KEYS)
        self._defaults: dict[str, float] = {}
        for key in self.GROUP_KEYS:
            self._defaults.update(groups.check_value(where, key, key, defaults[key]))
        if parsed is not None:
            hypers = [self._group_hyper(where, name, opts) for name, _, opts in parsed]
            tp = groups.one_tape(where, parsed) if store is None else store
            self._tp = checks.store(where, tp)
            self._check_new(where, list(groups.param_names(parsed)))
        else:
            hypers = [dict(self._defaults)]
        self._be = self._tp.backend
        self._ws = Workspace(self._be, self._tp.dtype)
        self._groups: list[Group] = [Group(h, self._new_host(h)) for h in hypers]
        self._t = 0
        self._max_norm: float | None = None
        self._clip_rule = "gopt"
        self._clip_consts: tuple[Any, ...] | None = None
        self._last_norm: Any = None
        self._stepped_at = 0  # the store's backward_count at the last step
        # one version per piece of configuration; every change bumps its version
        self._versions = {name: Version(f"{type(self).__name__}.{name}")
                          for name in ("lr", "clip", "alpha", "params", "weight_decay",
                                       *self._more_config())}
        # the device half of the step, recorded on a kernel backend and replayed as one call;
        # re-recorded when the configuration it bakes in moved
        self._replay: Recording[Callable[[], None]] = Recording(
            f"{type(self).__name__}'s recorded update", self.recorded_deps)
        for _, k, p in groups.param_names(parsed or []):
            self._new_slot(p, self._l2(k), k)

    def _more_config(self) -> tuple[str, ...]:
        """Names of the subclass's own configuration versions (Adam: betas, eps)."""
        return ()

    def _new_host(self, hyper: dict[str, float]) -> dict[str, float]:
        """A new group's host running scalars (Adam: the powers of its betas)."""
        return {}

    # ---------------------------------------------------------------- the step
    def step(self) -> None:
        """One update of every registered parameter from its current gradient; advances t.

        All or nothing: every parameter's in-place update is prepared (every check done)
        before the first one writes, the writes themselves cannot fail, and the host state
        (t, running powers) is restored if anything raises before them.
        """
        self.check_step()
        host = (self._t, self._stepped_at, [dict(grp.host) for grp in self._groups])
        try:
            self.advance()
            if self._replays():
                self._replayed_step()
            else:
                self.device_step()
        except BaseException:
            self._t, self._stepped_at = host[0], host[1]
            for grp, saved in zip(self._groups, host[2]):
                grp.host = saved
            raise

    def check_step(self) -> None:
        """Refuse a step that cannot run (before anything changes); the first of the step's
        three parts (``check_step``, ``advance``, ``device_step``), which an engine running the
        halves itself (ggpu-replay) calls in that order. ``step`` runs all three."""
        where = f"{type(self).__name__}.step"
        if not self._slots:
            raise RuntimeError(f"{where}: no parameters registered; call add(param, alpha) "
                               "for each parameter first")
        for s in self._slots:
            checks.store_param(where, self._tp, s.var)
        count = getattr(self._tp, "backward_count", None)
        if count is not None and count <= self._stepped_at:
            raise RuntimeError(f"{where}: no backward since the last step (or ever): the "
                               "gradients are stale (or zero after reset_to); call "
                               "tp.backward(loss) before each step")

    def advance(self) -> None:
        """The host half of a step: advance t, write this step's scalars into their buffers."""
        self._stepped_at = getattr(self._tp, "backward_count", 0)
        self._t += 1
        self._begin_step()

    def device_step(self) -> None:
        """The backend half of a step: backend ops only, on buffers that never move.

        The global norm and the clip scale are a few 0-d ops; each parameter's update is then
        ONE of gtensor's in-place update kernels (``gtensor.ops.updates``: ``adam_update``,
        ``adamw_update``, ``sgd_update``), which read g, p and the state and write the new
        state and parameter over the old, element by element, with the bits of the unfused
        ops. Every parameter's update is prepared (all checks done) before the first runs.
        """
        for run in self._device_update(self._be, self._ws):
            run()
        self._note_params()

    def _param_buffer(self, p: gtape.Var) -> Any:
        """The writable buffer of parameter ``p`` (the store's ``param_buffer``)."""
        return self._tp.param_buffer(p)

    def _note_params(self) -> None:
        """Tell the store every parameter was updated in place (the step's last act; a tape
        ticks its write clock, as ``set_value`` does, so stale forwards are refused)."""
        for s in self._slots:
            self._tp.note_updated(s.var)

    def _device_update(self, be: Any, ws: Workspace) -> list[Callable[[], None]]:
        """Every parameter's update, prepared as ops of backend ``be`` on workspace ``ws`` (the
        optimizer's own, or a recording view of them) and returned unrun: nothing above the
        clip scale's 0-d workspace ops has written anything when this returns, and running
        the returned calls (in order) cannot fail -- so a step is all or nothing."""
        tp = self._tp
        grads = [tp.grad(s.var) for s in self._slots]
        clip = self._clip_consts is not None
        if clip:
            norm = gradients.global_norm(ws, grads)
            rule = gradients.torch_clip_scale if self._clip_rule == "torch" else \
                gradients.clip_scale
            scale = rule(ws, norm, *self._clip_consts)
            self._last_norm = norm
        else:
            scale = ws("no_clip", ())  # a 0-d placeholder: the no-clip kernels never read it
        return [self._update(be, ws, i, s, self._param_buffer(s.var), g, scale, clip)
                for i, (s, g) in enumerate(zip(self._slots, grads))]

    def _replays(self) -> bool:
        """Whether steps record their device half once and replay it: a tape on a kernel
        backend (cpu, sim, cuda), whose buffers -- parameters, gradients, state, workspace --
        never move. (A replay program records the device half itself.)"""
        return isinstance(self._tp, gtape.Tape) and recordable(self._be)

    def _replayed_step(self) -> None:
        """``device_step`` with its ops recorded on the first call and replayed afterwards
        (the same kernels on the same buffers, so the same bits; on cpu one native call).

        The recording depends on ``recorded_deps`` (registering a parameter, ``set_clip``,
        an alpha, lr where baked in, ``load_state_dict``): a change re-records it.
        """
        run = self._replay.current()
        if run is None:
            _, run = record(self._be, self._update_on)
            self._replay.keep(run)
        else:
            run()
        self._note_params()

    def _update_on(self, be: Any) -> None:
        """``_device_update`` with its ops (and new workspace buffers) on backend ``be`` (a
        recording backend), then run: an explicit argument, nothing of the optimizer swapped."""
        for run in self._device_update(be, self._ws.on(be)):
            run()

    @property
    def last_norm(self) -> float | None:
        """The global gradient norm of the last clipped step (before clipping; a host read)."""
        if self._last_norm is None:
            return None
        return float(self._be.to_numpy(self._last_norm))

    def _begin_step(self) -> None:
        """Host-side per-step scalars of every group (after t has advanced), written with
        ``be.write`` into the group's 0-d buffers (``gkey``)."""

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        """Parameter ``i``'s update on backend ``be`` (per-step scalars in workspace ``ws``),
        prepared and returned unrun: ``p`` its writable value buffer, ``g`` its raw gradient,
        ``scale`` the clip scale (a 0-d array, used when ``clip``). Preparing writes nothing
        and does every check; the returned call writes the parameter and its state in place
        and cannot fail."""
        raise NotImplementedError

    # ---------------------------------------------------------------- state
    def _saved_hyper(self, k: int) -> dict[str, float]:
        """Group ``k``'s hyperparameters as saved (name -> float): a coupled weight_decay only
        when non-zero, so states made before groups keep their keys."""
        hyper = self._groups[k].hyper
        return {n: v for n, v in hyper.items()
                if not (n == "weight_decay" and self.COUPLED_DECAY and v == 0.0)}

    def _check_host(self, where: str, prefix: str, host: dict[str, float]) -> dict[str, float]:
        """A group's saved host running scalars, checked (``prefix`` names them)."""
        return host

    def state_dict(self, params: bool = True) -> dict[str, np.ndarray]:
        """The optimizer's state as host numpy arrays (and the parameter values if ``params``)."""
        return state_io.state_dict(self, params)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (hyperparameters, t, buffers, parameter values).

        Everything is checked first -- keys, kind, dtype, group layout, shapes, and every value
        against the ranges the constructor enforces -- then applied at once: a refused state
        leaves the optimizer exactly as it was (``gopt.state``).
        """
        state_io.load_state_dict(self, state)

    def _configured(self) -> None:
        """Bump every configuration version (a loaded state may have changed any of them)."""
        for version in self._versions.values():
            version.bump()

    def save(self, path: Any, params: bool = True) -> None:
        """Write ``state_dict(params)`` to exactly ``path`` (an .npz archive, no pickle),
        atomically: a failed or interrupted save leaves the previous file intact."""
        state_io.save(self, path, params)

    def load(self, path: Any) -> None:
        """Read a file written by ``save`` (``allow_pickle=False``) into this optimizer."""
        state_io.load(self, path)

    def __repr__(self) -> str:
        clip = "" if self._max_norm is None else f", clip={self._max_norm}"
        if self._max_norm is not None and self._clip_rule != "gopt":
            clip += f" ({self._clip_rule})"
        lrs = [grp.hyper["lr"] for grp in self._groups]
        lr = f"lr={lrs[0]}" if len(lrs) == 1 else f"{len(lrs)} groups, lr={lrs}"
        return (f"<{type(self).__name__} {lr}{clip}, {len(self._slots)} params, "
                f"t={self._t}>")
