"""Programs the dispute protocol re-runs: a ``Task`` names a training program and its JSON
config; its ``Session`` runs it one step at a time on any engine, from step 0 or from the
state after any step.

A task must be a pure function of its config: step k's batch and every random bit of step k
depend on (config, k) only (keys folded by the step, never a generator's running state), so a
party holding the state after step k-1 can run step k alone -- what lets an auditor recompute
one disputed step and a referee one op. Tasks are found by name: gverify's own (``example``)
and those installed packages declare under the entry-point group ``gverify.tasks`` (gdemos:
``cnn``, rung 8's CNN). The auditor resolves the name itself: a commitment names a task, it
never ships code.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gtape
import numpy as np
from gtensor import describe

from . import canonical, runlog, store
from .checkpoint import Checkpoint, load_checkpoint

GROUP = "gverify.tasks"
MAX_STEPS = 10_000_000


class TaskError(ValueError):
    """A task that cannot be found or a config it refuses."""


def check_int(task: str, cfg: dict, key: str, low: int, high: int) -> int:
    """``cfg[key]`` checked to be an int in [low, high] (TaskError naming the task and key)."""
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise TaskError(f"task {task}: config {key} is {describe(v)}; expected an int in "
                        f"[{low}, {high}]")
    return v


def check_real(task: str, cfg: dict, key: str, low: float, high: float) -> float:
    """``cfg[key]`` checked to be a real number in [low, high]."""
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high:
        raise TaskError(f"task {task}: config {key} is {describe(v)}; expected a number in "
                        f"[{low}, {high}]")
    return float(v)


def check_choice(task: str, cfg: dict, key: str, choices: tuple[str, ...]) -> str:
    """``cfg[key]`` checked to be one of ``choices``."""
    v = cfg[key]
    if v not in choices:
        raise TaskError(f"task {task}: config {key} is {describe(v)}; expected one of {choices}")
    return v


class Task:
    """A named training program and its config (defaults filled in, every value checked).

    Subclasses set ``NAME`` and ``DEFAULTS`` (which must include ``steps``, ``dtype``,
    ``inner`` and ``seed``), check the config in ``check`` and make sessions in
    ``new_session``.
    """

    NAME = "?"
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, config: dict | None = None) -> None:
        config = {} if config is None else config
        if not isinstance(config, dict):
            raise TaskError(f"task {self.NAME}: config is {describe(config)}; expected a dict")
        unknown = sorted(set(config) - set(self.DEFAULTS))
        if unknown:
            raise TaskError(f"task {self.NAME}: unknown config keys {unknown}; expected some of "
                            f"{sorted(self.DEFAULTS)}")
        cfg = {**self.DEFAULTS, **config}
        check_int(self.NAME, cfg, "steps", 1, MAX_STEPS)
        check_int(self.NAME, cfg, "seed", 0, 2 ** 63 - 1)
        check_choice(self.NAME, cfg, "dtype", ("float64", "float32"))
        check_choice(self.NAME, cfg, "inner", ("plain", "fma"))
        self.check(cfg)
        self.config = cfg

    @property
    def steps(self) -> int:
        """T: the steps of the run."""
        return int(self.config["steps"])

    def check(self, cfg: dict) -> None:
        """Refuse a config value this task cannot run (TaskError)."""

    def session(self, backend: str) -> Session:
        """A session at step 0 on ``backend`` (the state the config defines)."""
        return self.new_session(backend)

    def new_session(self, backend: str) -> Session:
        """Make the session (subclasses)."""
        raise NotImplementedError(f"task {self.NAME}: new_session is not implemented")

    def spec(self) -> dict:
        """``{"task": name, "config": config}``: what a commitment names."""
        return {"task": self.NAME, "config": dict(self.config)}


class Session:
    """A task's model, optimizer and position on one tape.

    Subclasses build the model and optimizer in ``__init__`` (then call ``ready``) and define
    ``batch(k)`` (step k's data as named host arrays), ``forward(k)`` (record step k's forward
    on the tape; the loss Var), and optionally ``position(k)`` (set counters so that the next
    step is k + 1: a dropout layer's calls, a schedule's count) and ``after_step(k)``.
    """

    def __init__(self, task: Task, backend: str) -> None:
        self.task = task
        # the tape's key stream starts at the config's seed (modules made without a key)
        self.tp = gtape.Tape(backend, task.config["dtype"], inner=task.config["inner"],
                             seed=task.config["seed"])
        self.opt: Any = None
        self.done = 0
        self._mark: Any = None

    def ready(self, opt: Any) -> None:
        """Register the optimizer (its parameters added) and mark the tape: step 0."""
        self.opt = opt
        self._mark = self.tp.mark()
        self.position(0)

    # ------------------------------------------------------------ subclass hooks
    def batch(self, k: int) -> list[tuple[str, np.ndarray]]:
        """Step ``k``'s data as named host arrays."""
        raise NotImplementedError

    def forward(self, k: int) -> gtape.Var:
        """Record step ``k``'s forward on the tape; returns the loss."""
        raise NotImplementedError

    def position(self, k: int) -> None:
        """Set the counters a step reads so that the next step is ``k + 1``."""

    def after_step(self, k: int) -> None:
        """Host work after step ``k``'s update (a schedule's step)."""

    # ------------------------------------------------------------ the run
    def step(self, probe: Any = None) -> str:
        """Run the next step (probe hooks: ``forward(k, tp, loss)``, ``backward(k, tp, loss)``,
        ``update(k, tp, opt)``, ``done(k, tp, opt, loss_bits)``); returns its loss bits."""
        k = self.done + 1
        if k > self.task.steps:
            raise ValueError(f"Session.step: step {k} is past the run's {self.task.steps} steps")
        tp = self.tp
        self.position(k - 1)
        loss = self.forward(k)
        _call(probe, "forward", k, tp, loss)
        tp.backward(loss)
        _call(probe, "backward", k, tp, loss)
        self.opt.step()
        _call(probe, "update", k, tp, self.opt)
        self.after_step(k)
        bits = runlog.loss_bits(loss, tp, "Session.step")[1]
        _call(probe, "done", k, tp, self.opt, bits)
        tp.reset_to(self._mark)
        self.done = k
        return bits

    def entries(self) -> list[tuple[str, np.ndarray]]:
        """The state after the last step as named host arrays (what a digest hashes)."""
        return store.entries(self.tp, self.opt, "Session.entries")

    def digest(self) -> str:
        """The digest of the state (``gverify.digest``)."""
        return canonical.entries_digest(self.entries())

    def restore(self, k: int, entries: list[tuple[str, np.ndarray]]) -> None:
        """Continue from the state after step ``k`` (every check of ``load_checkpoint`` first:
        a refused state changes nothing)."""
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= self.task.steps:
            raise ValueError(f"Session.restore: step is {describe(k)}; expected an int in "
                             f"[0, {self.task.steps}]")
        ck = Checkpoint(Path("."), k, canonical.entries_digest(entries), None, {}, list(entries))
        load_checkpoint(ck, self.tp, self.opt)
        self.done = k
        self.position(k)

    def identity(self) -> dict:
        """What fixes the run besides the task's config: dtype, inner-product contract, the
        tape's seed (None before tapes had one), optimizer kind and hyperparameters, the
        parameters (node, shape)."""
        state = self.opt.state_dict(params=False)
        hyper = {k[6:]: float(v) for k, v in state.items() if k.startswith("hyper.")}
        return {"dtype": self.tp.dtype.name, "inner": getattr(self.tp, "inner", "plain"),
                "tape_seed": getattr(self.tp, "seed", None),
                "optimizer": {"kind": str(state["kind"]), "hyper": hyper},
                "params": runlog.run_shape(self.tp, self.opt, "Session.identity")["params"]}

    def close(self) -> None:
        """Release the tape's buffers."""
        self.tp.close()


def _call(probe: Any, name: str, *args: Any) -> None:
    fn = getattr(probe, name, None)
    if fn is not None:
        fn(*args)


class Probes:
    """Several probes called in order (a drill, then a trace)."""

    def __init__(self, *probes: Any) -> None:
        self.probes = [p for p in probes if p is not None]

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name not in ("forward", "backward", "update", "done"):
            raise AttributeError(name)

        def call(*args: Any) -> None:
            for p in self.probes:
                _call(p, name, *args)
        return call


def _builtin() -> dict[str, Callable[[dict], Task]]:
    from .example_task import ExampleTask

    return {ExampleTask.NAME: ExampleTask}


def find(name: str) -> Callable[[dict], Task]:
    """The task class (or factory) called ``name``: gverify's own, then the entry points of
    group ``gverify.tasks`` (TaskError when none is installed)."""
    if not isinstance(name, str):
        raise TaskError(f"find: the task name is {describe(name)}; expected a str")
    own = _builtin()
    if name in own:
        return own[name]
    eps = importlib.metadata.entry_points(group=GROUP, name=name)
    for ep in eps:
        return ep.load()
    names = sorted(own) + sorted(e.name for e in importlib.metadata.entry_points(group=GROUP))
    raise TaskError(f"no task {name!r} is installed; known: {names} (a package declares its "
                    f"tasks under the entry-point group {GROUP!r})")


def make(spec: Any) -> Task:
    """The task a ``{"task": name, "config": {...}}`` spec names, its config checked."""
    if not isinstance(spec, dict) or set(spec) != {"task", "config"}:
        raise TaskError(f"make: the spec is {describe(spec)}; expected {{'task': name, "
                        "'config': {...}}")
    task = find(spec["task"])(spec["config"])
    if not isinstance(task, Task):
        raise TaskError(f"make: task {spec['task']!r} made {describe(task)}; expected a "
                        "gverify.task.Task")
    return task

