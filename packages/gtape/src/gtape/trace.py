"""Trace one recorded episode: re-run its forward and backward on a kernel backend, keeping
every kernel launch, so an engine can replay them (ggpu-replay) or emit them (gemit).

The trace runs the very ops the tape ran (``Backend.apply`` with the node's Op and attrs) and
the tape's own backward engine, on a ``gtensor.recording.Recorder``: nothing is re-derived, so
a traced episode computes exactly what the tape computed on that backend. Every buffer is
allocated during the trace and owned by it: leaves are copied in, each op node has one value
buffer, the backward's results and each parameter's gradient have one buffer each. The
episode's pending state updates (``Tape.update_state``: BatchNorm's running statistics) end
the backward launches as copies of the new values into the states' buffers (``Trace.writes``),
so a replayed step updates them as the eager step does.

>>> import numpy as np, gtape as g
>>> from gtape.trace import trace
>>> tp = g.Tape()
>>> w = tp.param(np.array([1.0, -2.0]))
>>> t = trace(tp, g.sum(w * w), "sim")
>>> [l.kernel.name for l in t.forward], t.grad(w.index).tolist()
(['k_mul_f64', 'k_reduce_f64'], [2.0, -4.0])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gtensor
import numpy as np
from gtensor import describe
from gtensor.backends.kernel_backend import KernelBackend
from gtensor.recording import Launch, Recorder

from . import backward as _backward
from .leaves import PARAM, Leaf
from .tape import Node, Tape
from .var import Var


class CaptureError(ValueError):
    """An episode that an engine cannot capture (the message names the node and why)."""


@dataclass
class Trace:
    """One episode on a kernel backend: its nodes, buffers and recorded launches."""

    rec: Recorder
    dtype: np.dtype
    nodes: list[Node]
    loss: int
    values: list[Any]  # one buffer per node
    grads: list[Any]  # per node: a buffer, or None where no gradient is stored
    forward: list[Launch]
    backward: list[Launch]
    backward_stats: dict
    writes: tuple[tuple[int, int], ...] = ()  # (state node, source node): the state updates

    def value(self, i: int) -> np.ndarray:
        """A host copy of node ``i``'s value buffer."""
        return self.rec.to_numpy(self.values[i])

    def grad(self, i: int) -> np.ndarray | None:
        """A host copy of node ``i``'s gradient buffer (None where none is stored)."""
        g = self.grads[i]
        return None if g is None else self.rec.to_numpy(g)

    @property
    def params(self) -> list[int]:
        """Node indices of the parameters, in tape order."""
        return [n.index for n in self.nodes if n.op is PARAM]


def check_var_of(where: str, tp: Tape, what: str, v: Any,
                 expected: str = "a Var of the tape") -> Var:
    """``v`` as a live Var of ``tp``; refuses a non-Var (TypeError), a Var of another tape or
    one dropped by ``reset_to`` (CaptureError), naming ``what``."""
    if not isinstance(v, Var):
        raise TypeError(f"{where}: {what} is {describe(v)}; expected {expected}")
    if v.tape is not tp:
        raise CaptureError(f"{where}: {what} {v!r} belongs to another tape; expected a Var of "
                           "the tape being captured")
    if not v.alive:
        raise CaptureError(f"{where}: {what} (node {v.index}) was dropped by reset_to; "
                           "expected a Var of the current episode")
    return v


def check_episode(where: str, tp: Any, loss: Any) -> tuple[Tape, int]:
    """The tape and loss index, refusing what no engine can capture (nothing is touched)."""
    if not isinstance(tp, Tape):
        raise TypeError(f"{where}: tp is {describe(tp)}; expected a gtape.Tape")
    if tp.closed:
        raise CaptureError(f"{where}: the tape is closed; its values were released (record "
                           "an episode on an open tape, then capture it)")
    check_var_of(where, tp, "loss", loss, "a scalar Var of the tape")
    shape = loss.shape
    if int(np.prod(shape)) != 1:
        raise CaptureError(f"{where}: loss (node {loss.index}) has shape {shape}; expected a "
                           "scalar (one element), e.g. g.sum(...) or g.mean(...)")
    return tp, loss.index


def trace(tp: Tape, loss: Var, backend: str | KernelBackend, dtype: Any = None,
          where: str = "trace") -> Trace:
    """Re-run the episode of ``tp`` ending at ``loss`` on ``backend``, recording every launch.

    ``dtype`` (default: the tape's) is the dtype of every buffer: ``"float32"`` on a float64
    tape gives a float32 copy of the episode (leaves rounded once). Refuses, naming the node:
    a closed tape, a loss of another tape or not a scalar, an op without a kernel, and a
    gradient path through an op without a backward rule.
    """
    tp, li = check_episode(where, tp, loss)
    inner = gtensor.backend(backend) if isinstance(backend, str) else backend
    if not isinstance(inner, KernelBackend):
        raise CaptureError(f"{where}: backend {inner.name!r} runs no kernels; expected 'sim' or "
                           "'cuda'")
    dt = np.dtype(tp.dtype if dtype is None else gtensor.dtypes.normalize(dtype, where))
    nodes = tp.nodes()[:li + 1]
    ft = gtensor.dtypes.float_type(dt)
    for n in nodes:
        if not isinstance(n.op, Leaf) and not n.op.kernel_set(ft):
            raise CaptureError(f"{where}: node {n.index} ({n.name}) has no {ft.suffix} kernel; an "
                               "engine can only replay ops with kernels")
    graph = _backward.Graph([n.op for n in nodes], [n.inputs for n in nodes],
                            [n.attrs for n in nodes], [n.shape for n in nodes],
                            [n.requires_grad for n in nodes], [], [])
    _backward.reached(graph, li)  # NotImplementedError naming the node, before any work
    writes = tuple(tp.pending_states())
    late = [(j, i) for j, i in writes if i > li]
    if late:
        j, i = late[0]
        raise CaptureError(f"{where}: state node {j} is updated from node {i}, recorded after "
                           f"the loss (node {li}); expected every state update computed "
                           "before the loss (an engine replays the episode up to it)")
    rec = Recorder(inner)
    values: list[Any] = []
    grads: list[Any] = []
    with rec.recording() as fwd:
        for n in nodes:
            rec.tag = n.index
            if isinstance(n.op, Leaf):
                host = tp.backend.to_numpy(tp.value_at(n.index))
                # int64 ids and bool masks keep their dtype; float leaves take the trace's
                ldt = host.dtype if host.dtype in gtensor.dtypes.TYPED_DTYPES else dt
                values.append(rec.asarray(host, ldt))
                grads.append(rec.zeros(n.shape, dt) if n.op is PARAM else None)
                continue
            ins = [values[j] for j in n.inputs]
            odt = dt if n.op.out_type == gtensor.dtypes.FLOAT else n.op.result_dtype(ins, n.attrs)
            out = rec.empty(n.shape, odt)
            rec.apply(n.op, ins, out=out, **n.attrs)
            values.append(out)
            grads.append(None)
    graph = _backward.Graph(graph.ops, graph.inputs, graph.attrs, graph.shapes, graph.req,
                            values, grads)

    def visit(i: int) -> None:
        rec.tag = i

    with rec.recording() as bwd:
        rec.tag = li
        stats = _backward.run(rec, graph, li, dt, visit)
        for j, i in writes:  # the step's state updates, after everything that reads them
            rec.tag = j
            rec.copy(values[i], out=values[j])
    rec.tag = None
    for j, _ in writes:  # the trace's own run recorded the updates: undo them (not recorded)
        rec.write(values[j], tp.backend.to_numpy(tp.value_at(j)).astype(dt))
    return Trace(rec, dt, nodes, li, values, grads, fwd, bwd, stats, writes)
