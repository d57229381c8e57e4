"""What a run's state is, read the same way from a tape or a captured program.

A *store* holds the parameters: a ``gtape.Tape``, or a ``ggpu_replay.Program`` (its device
buffers). Its optimizer is a ``gopt.Optimizer`` over the tape, or the program's
``DeviceOptimizer``. ``entries`` lists the run's state as named host arrays in canonical
order -- the tape's dtype (its inner-product contract where it is not "plain", the seed of its
key stream where it is not 0: ``Tape(seed=...)``), every
parameter by node index, every state (``Tape.state``: running statistics, their current
values; only where the tape has states, so stateless runs hash as before), then the
optimizer's kind, step count, hyperparameters, host scalars,
the registered parameters and every state buffer (gopt's ``state_dict``) -- which is what a
digest hashes and a checkpoint holds.
"""

from __future__ import annotations

from typing import Any

import gopt
import gtape
import numpy as np
from gtensor import describe


class Store:
    """A tape or a captured program, seen as its parameters (node index -> host array)."""

    def __init__(self, obj: Any, where: str) -> None:
        self.obj = obj
        if isinstance(obj, gtape.Tape):
            if obj.closed:
                raise ValueError(f"{where}: the tape is closed; its parameters were released")
            self.kind = "tape"
            self.dtype = obj.dtype
            self.params = [v.index for v in obj.params()]
            self.states = [v.index for v in obj.states()]
            self.contract = _contract(obj)
            self.seed = int(getattr(obj, "seed", 0))
            return
        program = _program_type()
        if program is not None and isinstance(obj, program):
            self.kind = "program"
            self.dtype = obj.dtype
            self.params = list(obj.trace.params)
            self.states = [n.index for n in obj.trace.nodes if n.op is gtape.STATE]
            self.contract = _contract(obj.tape)
            self.seed = int(getattr(obj.tape, "seed", 0))
            return
        raise TypeError(f"{where}: tp is {describe(obj)}; expected a gtape.Tape or a "
                        "ggpu_replay.Program")

    def value(self, i: int) -> np.ndarray:
        """A host copy of parameter (or state) node ``i``'s value (a state's current one)."""
        if self.kind == "tape":
            tp = self.obj
            if i in self.states:
                return np.array(tp.backend.to_numpy(tp.state_value(tp.var_at(i))))
            return np.array(tp.backend.to_numpy(tp.value_at(i)))
        return np.array(self.obj.value_at(i))

    def write(self, i: int, x: np.ndarray) -> None:
        """Overwrite parameter (or state) node ``i`` with host data ``x`` (checked by the
        caller)."""
        if self.kind == "tape":
            if i in self.states:
                self.obj.set_state(self.obj.var_at(i), x)
            else:
                self.obj.set_value(self.obj.var_at(i), x)
            return
        prog = self.obj
        with prog.device.ordered():
            prog.backend.write(prog.trace.values[i], x)

    def shape(self, i: int) -> tuple[int, ...]:
        """Parameter node ``i``'s shape."""
        if self.kind == "tape":
            return tuple(self.obj.node(i).shape)
        return tuple(self.obj.nodes[i].shape)

    def check_optimizer(self, opt: Any, where: str) -> None:
        """Refuse an optimizer that does not update this store."""
        if self.kind == "tape":
            if not isinstance(opt, gopt.Optimizer) or opt.tape is not self.obj:
                raise TypeError(f"{where}: opt is {describe(opt)}; expected a gopt optimizer "
                                "over this tape (or None)")
            return
        from ggpu_replay import DeviceOptimizer

        if not isinstance(opt, DeviceOptimizer) or opt.program is not self.obj:
            raise TypeError(f"{where}: opt is {describe(opt)}; expected this program's "
                            "DeviceOptimizer (prog.adam(...) / prog.sgd(...)), or None")


def _contract(tp: Any) -> str | None:
    """The tape's inner-product contract where it is not the default ("plain": None, so the
    entries and digests of plain runs are what they were before the choice existed)."""
    inner = getattr(tp, "inner", "plain")
    return None if inner == "plain" else inner


def _program_type() -> type | None:
    try:
        from ggpu_replay import Program
    except ImportError:  # pragma: no cover - ggpu-replay is a declared dependency
        return None
    return Program


def tape_entries(store: Store, values: dict[int, np.ndarray] | None = None
                 ) -> list[tuple[str, np.ndarray]]:
    """The store's header and parameters (``values`` replaces the live ones, by node index)."""
    out = [("tape.dtype", np.array(store.dtype.name)),
           ("tape.params", np.array(store.params, np.int64))]
    if store.contract is not None:
        out.append(("tape.contract", np.array(str(store.contract))))
    if store.seed != 0:  # the key stream's seed (decimal text: seeds reach 2**128)
        out.append(("tape.seed", np.array(str(store.seed))))
    for i in store.params:
        out.append((f"param.{i}", store.value(i) if values is None else values[i]))
    if store.states:
        out.append(("tape.states", np.array(store.states, np.int64)))
        for i in store.states:
            out.append((f"state.{i}", store.value(i) if values is None or i not in values
                        else values[i]))
    return out


def optimizer_entries(store: Store, opt: Any, where: str) -> list[tuple[str, np.ndarray]]:
    """The optimizer's state (gopt's ``state_dict`` without parameters), keys sorted."""
    if opt is None:
        return [("opt.kind", np.array("none"))]
    store.check_optimizer(opt, where)
    state = opt.state_dict(params=False)
    state["params"] = np.array([p.index for p in opt.params], np.int64)
    return [(f"opt.{k}", np.asarray(state[k])) for k in sorted(state)]


def entries(obj: Any, opt: Any, where: str) -> list[tuple[str, np.ndarray]]:
    """Everything that defines the run's state, as named host arrays in canonical order."""
    store = Store(obj, where)
    return tape_entries(store) + optimizer_entries(store, opt, where)
