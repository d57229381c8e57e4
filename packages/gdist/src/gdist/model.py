"""A replica's model: the tape, its parameters, and one microbatch's loss and gradient.

The model is built once per replica from the definition: a ``gtape.Tape(backend, dtype,
inner=..., seed=...)``, then either the given parameter arrays (``tp.param`` of each, in the
given order) or the user's factory run on that tape (its modules take the tape's keys in
construction order, so every replica builds the same bits). A microbatch is recorded by
``loss_fn(tp, model, batch)``, differentiated, read out and dropped again (``reset_to``), or --
with ``capture=True``, once two different microbatches were seen -- replayed by a captured
program (``gdist.capture``), the same bits by gtensor's contract.

Random numbers: the modules that draw keys (``nn.Dropout``, ``nn.MultiheadAttention``: any
module reachable from the factory's model with an int ``calls`` counter and ``next_key``) are
set before each microbatch to draw as the n-th microbatch of the run would in one process
(``calls = n * draws``, n the run's microbatch serial: the step's first serial plus the index
in the batch), so a mask depends on (step, microbatch index), never on the worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gtape
import numpy as np
from gtensor import describe

from . import stats
from .definition import Definition

Result = tuple[np.ndarray, dict[str, np.ndarray]]  # (0-d loss, {name: gradient})
RANDOM_KEY = "key"  # the input name of a random op's key (gtensor's rng ops and dropout)


def named_params(where: str, obj: Any) -> dict[str, gtape.Var]:
    """The parameters of what a factory returned: a module (``named_parameters``) or a dict
    {name: param Var}."""
    if callable(getattr(obj, "named_parameters", None)):
        named = dict(obj.named_parameters())
    elif isinstance(obj, Mapping):
        named = dict(obj)
    else:
        raise TypeError(f"{where}: the model factory returned {describe(obj)}; expected a "
                        "gtape nn.Module or a dict {name: param Var}")
    if not named:
        raise ValueError(f"{where}: the model factory's model has no parameters")
    for name, v in named.items():
        if not isinstance(name, str) or not isinstance(v, gtape.Var):
            raise TypeError(f"{where}: the model's parameter {name!r} is {describe(v)}; "
                            "expected str names and param Vars of the factory's tape")
    return named


def drawers(obj: Any) -> list[tuple[str, Any]]:
    """(path, module) of every module of ``obj`` that draws keys (``calls`` + ``next_key``)."""
    if not callable(getattr(obj, "named_modules", None)):
        return []
    return [(path, m) for path, m in obj.named_modules()
            if isinstance(getattr(m, "calls", None), int) and callable(
                getattr(m, "next_key", None))]


def random_key_nodes(tp: gtape.Tape, start: int) -> list[int]:
    """Const nodes after ``start`` that feed a random op's key input."""
    out = []
    for n in tp.nodes()[start:]:
        if not n.is_leaf and RANDOM_KEY in getattr(n.op, "inputs", ()):
            k = n.inputs[list(n.op.inputs).index(RANDOM_KEY)]
            if tp.node(k).op is gtape.CONST and k not in out:
                out.append(k)
    return out


class Model:
    """The tape, the parameters (``vars``), and the microbatch computation of one replica."""

    def __init__(self, defn: Definition) -> None:
        where = "gdist: building the model"
        self.defn = defn
        tp = gtape.Tape(defn.backend, defn.dtype, inner=defn.inner, seed=defn.seed)
        self.tp = tp
        if defn.factory is None:
            self.vars = {n: tp.param(np.asarray(v)) for n, v in defn.init.items()}
            self.obj: Any = dict(self.vars)
        else:
            self.obj = defn.factory(tp)
            self.vars = named_params(where, self.obj)
            for name, v in self.vars.items():
                if v.tape is not tp or tp.node(v).op is not gtape.PARAM:
                    raise TypeError(f"{where}: the model's parameter {name!r} is not a param "
                                    "of the tape the factory was given")
        self.drawers = drawers(self.obj)
        self.draws: list[int] | None = None if self.drawers else []  # per drawer, a microbatch
        self.mark = tp.mark()
        self.keys_drawn = tp.keys_drawn
        self.inputs: dict[str, gtape.Var] = {}  # the float entries' consts, last recorded
        self.loss: gtape.Var | None = None  # the loss of the last recorded episode
        self.engine: Any = None  # the captured program (gdist.capture.Captured) once built
        self.probes: list[tuple[int, dict[str, np.ndarray]]] = []  # capture's two microbatches
        stats.count("builds")

    # ---------------------------------------------------------------- parameters
    def buffer(self, name: str) -> Any:
        """Parameter ``name``'s live value buffer (the program's once captured), writable."""
        if self.engine is not None:
            return self.engine.buffer(name)
        return self.tp.param_buffer(self.vars[name])

    def note_updated(self, name: str) -> None:
        """A backend op wrote parameter ``name``'s buffer in place (the tape's clock ticks)."""
        if self.engine is None:
            self.tp.note_updated(self.vars[name])

    def values(self) -> dict[str, np.ndarray]:
        """Every parameter's value as a host copy."""
        be = self.tp.backend
        return {n: be.to_numpy(self.buffer(n)) for n in self.vars}

    def set_values(self, values: Mapping[str, np.ndarray]) -> None:
        """Write every parameter (host arrays of the tape's dtype and the parameter's shape)."""
        be = self.tp.backend
        for name in self.vars:
            be.write(self.buffer(name), np.asarray(values[name], self.tp.dtype))
            self.note_updated(name)

    # ---------------------------------------------------------------- microbatches
    def leaf(self, serial: int, rows: Mapping[str, np.ndarray]) -> Result:
        """Microbatch number ``serial`` of the run (its rows): its loss and every gradient."""
        if self.draws is None:
            self._discover(rows)
        if self.engine is not None:
            out = self.engine.leaf(serial, rows)
        else:
            out = self.eager(serial, rows)
            if self.defn.capture:
                self._maybe_capture(serial, rows)
        stats.count("microbatches")
        return out

    def eager(self, serial: int, rows: Mapping[str, np.ndarray], keep: bool = False
              ) -> Result:
        """The microbatch recorded and differentiated on the tape; the tape is reset after
        (``keep``: not, so that the episode can be captured)."""
        tp = self.tp
        be = tp.backend
        tp.reset_to(self.mark)  # also after a loss_fn that raised half-way last time
        done = False
        try:
            loss = self.record(serial, rows)
            tp.backward(loss)
            self.loss = loss
            out = (be.to_numpy(tp.value(loss)).reshape(()),
                   {name: be.to_numpy(tp.grad(v)) for name, v in self.vars.items()})
            done = True
            return out
        finally:
            if not (keep and done):
                tp.reset_to(self.mark)

    def record(self, serial: int, rows: Mapping[str, np.ndarray]) -> gtape.Var:
        """Record ``loss_fn`` on microbatch ``serial`` (keys set for it); the loss Var."""
        tp = self.tp
        self.set_draws(serial)
        self.inputs = {k: tp.const(a, name=k) for k, a in rows.items() if a.dtype.kind == "f"}
        batch = {k: self.inputs.get(k, a) for k, a in rows.items()}
        loss = self.defn.loss_fn(tp, self.obj, batch)
        if not isinstance(loss, gtape.Var) or loss.tape is not tp or loss.shape != ():
            got = loss.shape if isinstance(loss, gtape.Var) else describe(loss)
            raise TypeError(f"gdist: loss_fn returned {got}; expected a scalar (0-d) Var of "
                            "the tape it was given (e.g. g.cross_entropy(...) or g.mean(...))")
        self._check_draws(serial)
        return loss

    def set_draws(self, serial: int) -> None:
        """Every drawing module set to draw as the ``serial``-th microbatch's forward does."""
        for (_, m), c in zip(self.drawers, self.draws or [0] * len(self.drawers)):
            m.calls = serial * c

    def _check_draws(self, serial: int) -> None:
        """Refuse keys that would depend on the replica: draws from the tape's key stream
        during a microbatch, or a module drawing a varying number of keys."""
        if self.tp.keys_drawn != self.keys_drawn:
            raise RuntimeError(
                "gdist: loss_fn took keys from the tape's key stream (tp.next_key(), or a "
                "module made inside loss_fn): on a replica these depend on how many "
                "microbatches it ran before; make random modules in the model factory (their "
                "draws are set per microbatch)")
        for (path, m), c in zip(self.drawers, self.draws or []):
            if m.calls != serial * c + c:
                raise RuntimeError(f"gdist: the module {path or type(m).__name__!r} drew "
                                   f"{m.calls - serial * c} keys in this microbatch and {c} "
                                   "in the first; expected the same number every microbatch")

    def _discover(self, rows: Mapping[str, np.ndarray]) -> None:
        """One forward with every drawer at 0: how many keys each draws per microbatch (and
        binding those that take their key at a first forward); every random op's key must be
        one of theirs."""
        tp = self.tp
        for _, m in self.drawers:
            m.calls = 0
        tp.reset_to(self.mark)
        try:
            batch = {k: tp.const(a, name=k) if a.dtype.kind == "f" else a
                     for k, a in rows.items()}
            self.defn.loss_fn(tp, self.obj, batch)
            counts = [m.calls for _, m in self.drawers]
            known = set()
            for (_, m), c in zip(self.drawers, counts):
                m.calls = 0
                known |= {tuple(m.next_key().words) for _ in range(c)}
                m.calls = 0
            for i in random_key_nodes(tp, self.mark.length):
                k = tuple(int(w) for w in tp.backend.to_numpy(tp.value_at(i)).view(np.uint64))
                if k not in known:
                    raise RuntimeError(
                        f"gdist: a random op (node {i}) draws with a key no module of the "
                        "model drew: its numbers would not follow the microbatch; draw "
                        "through modules of the factory's model (nn.Dropout, ...) or with a "
                        "fixed key")
        finally:
            tp.reset_to(self.mark)
        self.draws = counts
        self.keys_drawn = tp.keys_drawn

    def _maybe_capture(self, serial: int, rows: Mapping[str, np.ndarray]) -> None:
        """Keep the first two different microbatches; with both, capture (gdist.capture)."""
        if self.probes and all(np.array_equal(self.probes[0][1][k], rows[k]) for k in rows):
            return
        self.probes.append((serial, {k: np.array(a) for k, a in rows.items()}))
        if len(self.probes) == 2:
            from .capture import Captured

            self.engine = Captured.build(self)
            self.probes = []
            stats.count("captures")
