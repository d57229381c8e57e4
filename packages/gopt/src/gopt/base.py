"""The Optimizer base: parameter registration, L2 and clipping, the step driver (state I/O:
``gopt.state``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gtape
import numpy as np
from gtape.recording import Recording, Version
from gtensor.recording import record, recordable

from . import checks, gradients
from . import state as state_io
from .workspace import Workspace


@dataclass
class Slot:
    """One registered parameter: its Var, L2 weight and per-parameter state buffers."""

    var: gtape.Var
    alpha: float
    shape: tuple[int, ...]
    state: dict[str, Any] = field(default_factory=dict)


class Optimizer:
    """Base class: subclasses define ``STATE`` (per-parameter buffers) and ``_update``.

    The optimizer works over a *parameter store*: a ``gtape.Tape``, or any object with the same
    ``backend``, ``dtype``, ``value(p)``, ``grad(p)``, ``set_value(p, array)`` plus
    ``check_param(where, p)`` (a replay program holding the tape's parameters on a device);
    a step updates each parameter's buffer in place: ``param_buffer(p)`` where the store has
    it (else ``value(p)``, which must then be the writable buffer), followed by
    ``note_updated(p)`` where the store has it (a tape: its write clock ticks).
    A step is two halves: ``advance`` (host: the step count and per-step scalars, written into
    small backend buffers) and ``device_step`` (backend ops only, on buffers that never move),
    so a replay engine can record the second half once and re-run it every step (``check_step``
    first refuses a step that cannot run).
    """

    KIND = "?"
    STATE: tuple[str, ...] = ()
    # the configuration a recorded device half bakes in (its launches' scalar attributes and
    # the parameter list): a change to any of these re-records it. NOTE: "lr" is here unless
    # the subclass's device half reads lr only through a per-step buffer (Adam's lr_t).
    BAKED: tuple[str, ...] = ("lr", "clip", "alpha", "params")

    def __init__(self, tp: gtape.Tape, lr: float) -> None:
        where = type(self).__name__
        self._tp = checks.store(where, tp)
        self._lr = checks.real(where, "lr", lr, low=0.0, expected="a finite real number >= 0")
        self._be = tp.backend
        self._ws = Workspace(self._be, tp.dtype)
        self._slots: list[Slot] = []
        self._t = 0
        self._max_norm: float | None = None
        self._clip_consts: tuple[Any, Any] | None = None
        self._last_norm: Any = None
        self._stepped_at = 0  # the store's backward_count at the last step
        # one version per piece of configuration; every change bumps its version
        self._versions = {name: Version(f"{type(self).__name__}.{name}")
                          for name in ("lr", "clip", "alpha", "params", *self._more_config())}
        # the device half of the step, recorded on a kernel backend and replayed as one call;
        # re-recorded when the configuration it bakes in moved
        self._replay: Recording[Callable[[], None]] = Recording(
            f"{type(self).__name__}'s recorded update", self.recorded_deps)

    def _more_config(self) -> tuple[str, ...]:
        """Names of the subclass's own configuration versions (Adam: betas, eps)."""
        return ()

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
    def lr(self) -> float:
        """The learning rate; settable, taking effect at the next step (see ``_set_lr``)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._set_lr(value)

    def _set_lr(self, value: float) -> None:
        """Set the learning rate for the next step (a schedule calls this after each step).

        The learning rate is a per-step host scalar: every optimizer reads it in its host half
        (``advance``) and writes what it derives from it into 0-d backend buffers, so a recorded
        device half (or a captured program) follows the change without re-recording (the "lr"
        version moves, and only a recording that declares lr baked in re-records). A bad value
        (NaN, inf, negative, not a real number) raises and changes nothing.
        """
        lr = checks.real(f"{type(self).__name__}.lr", "lr", value, low=0.0,
                         expected="a finite real number >= 0")
        if lr != self._lr or math.copysign(1.0, lr) != math.copysign(1.0, self._lr):
            self._lr = lr
            self._versions["lr"].bump()

    @property
    def t(self) -> int:
        """Steps taken so far (the first ``step`` makes it 1)."""
        return self._t

    @property
    def params(self) -> list[gtape.Var]:
        """The registered parameters, in registration order."""
        return [s.var for s in self._slots]

    @property
    def max_norm(self) -> float | None:
        """The global-norm clipping threshold, or None when clipping is off."""
        return self._max_norm

    def add(self, param: gtape.Var | Sequence[gtape.Var], alpha: float = 0.0) -> Any:
        """Register ``param`` with L2 weight ``alpha`` (the gradient becomes g + alpha*p).

        ``param`` may be a list of parameters (``tp.params()``, ``layer.params``): all are
        checked first, then all registered with the same ``alpha``; the list is returned.
        """
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
        if self._t:
            raise RuntimeError(f"{where}: {self._t} step(s) were already taken; register every "
                               "parameter before the first step (the step count is shared)")
        if any(s.var.index == param.index for s in self._slots):
            raise ValueError(f"{where}: {param!r} is already registered; expected each "
                             "parameter once")
        slot = Slot(param, a, tuple(param.shape))
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

    def set_clip(self, max_norm: float | None) -> None:
        """Clip the global gradient norm to ``max_norm`` before each step (None: no clipping)."""
        if max_norm is None:
            self._max_norm, self._clip_consts = None, None
            self._versions["clip"].bump()
            return
        m = checks.real(f"{type(self).__name__}.set_clip", "max_norm", max_norm, low=0.0,
                        low_open=True, expected="a finite real number > 0, or None")
        self._max_norm = m
        self._clip_consts = (self._ws.scalar(m), self._ws.scalar(1.0))
        self._versions["clip"].bump()

    # ---------------------------------------------------------------- the step
    def step(self) -> None:
        """One update of every registered parameter from its current gradient; advances t.

        All or nothing: every parameter's in-place update is prepared (every check done)
        before the first one writes, the writes themselves cannot fail, and the host state
        (t, running powers) is restored if anything raises before them.
        """
        self.check_step()
        host = (self._t, self._stepped_at, self._host_state())
        try:
            self.advance()
            if self._replays():
                self._replayed_step()
            else:
                self.device_step()
        except BaseException:
            self._t, self._stepped_at = host[0], host[1]
            self._set_host_state(host[2])
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
        ONE of gtensor's in-place update kernels (``gtensor.updates``: ``adam_update``,
        ``adamw_update``, ``sgd_update``), which read g, p and the state and write the new
        state and parameter over the old, element by element, with the bits of the unfused
        ops. Every parameter's update is prepared (all checks done) before the first runs.
        """
        for run in self._device_update(self._be, self._ws):
            run()
        self._note_params()

    def _param_buffer(self, p: gtape.Var) -> Any:
        """The writable buffer of parameter ``p`` (the store's ``param_buffer`` where it has
        one, a tape's; else ``value(p)``, which a replay program's store returns writable)."""
        get = getattr(self._tp, "param_buffer", None)
        return get(p) if get is not None else self._tp.value(p)

    def _note_params(self) -> None:
        """Tell the store every parameter was updated in place (the step's last act; a tape
        ticks its write clock, as ``set_value`` does, so stale forwards are refused)."""
        note = getattr(self._tp, "note_updated", None)
        if note is not None:
            for s in self._slots:
                note(s.var)

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
            scale = gradients.clip_scale(ws, norm, *self._clip_consts)
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
        """Host-side per-step scalars (after t has advanced), written with ``be.write``."""

    def _update(self, be: Any, ws: Workspace, i: int, slot: Slot, p: Any, g: Any, scale: Any,
                clip: bool) -> Callable[[], None]:
        """Parameter ``i``'s update on backend ``be`` (per-step scalars in workspace ``ws``),
        prepared and returned unrun: ``p`` its writable value buffer, ``g`` its raw gradient,
        ``scale`` the clip scale (a 0-d array, used when ``clip``). Preparing writes nothing
        and does every check; the returned call writes the parameter and its state in place
        and cannot fail."""
        raise NotImplementedError

    # ---------------------------------------------------------------- state
    def _hyper(self) -> dict[str, float]:
        """Hyperparameters saved with the state (name -> float)."""
        return {"lr": self._lr}

    def _set_hyper(self, hyper: dict[str, float]) -> None:
        self._lr = hyper["lr"]

    def _host_state(self) -> dict[str, float]:
        """Host-side running scalars saved with the state (name -> float)."""
        return {}

    def _set_host_state(self, state: dict[str, float]) -> None:
        """Restore what ``_host_state`` saved."""

    def state_dict(self, params: bool = True) -> dict[str, np.ndarray]:
        """The optimizer's state as host numpy arrays (and the parameter values if ``params``)."""
        return state_io.state_dict(self, params)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (hyperparameters, t, buffers, parameter values).

        Everything is checked first -- keys, kind, dtype, shapes, and every value against the
        ranges the constructor enforces -- then applied at once: a refused state leaves the
        optimizer exactly as it was (``gopt.state``).
        """
        state_io.load_state_dict(self, state)

    def _configured(self) -> None:
        """Bump every configuration version (a loaded state may have changed any of them)."""
        for version in self._versions.values():
            version.bump()

    def _check_hyper(self, where: str, hyper: dict[str, float]) -> dict[str, float]:
        """Hyperparameters of a state, checked as the constructor checks them."""
        checks.real(where, "hyper.lr", hyper["lr"], low=0.0, expected="a finite real number >= 0")
        return hyper

    def _check_host(self, where: str, host: dict[str, float]) -> dict[str, float]:
        """Host running scalars of a state, checked."""
        return host

    def save(self, path: Any, params: bool = True) -> None:
        """Write ``state_dict(params)`` to exactly ``path`` (an .npz archive, no pickle),
        atomically: a failed or interrupted save leaves the previous file intact."""
        state_io.save(self, path, params)

    def load(self, path: Any) -> None:
        """Read a file written by ``save`` (``allow_pickle=False``) into this optimizer."""
        state_io.load(self, path)

    def __repr__(self) -> str:
        clip = "" if self._max_norm is None else f", clip={self._max_norm}"
        return (f"<{type(self).__name__} lr={self._lr}{clip}, {len(self._slots)} params, "
                f"t={self._t}>")

