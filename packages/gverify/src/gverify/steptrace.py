"""Per-node traces of one training step, and the first node at which two traces differ.

``trace_step(tp, loss)`` (after ``backward``) records, per node up to the loss: its op, input
nodes, attributes, shape, and the digest (and a host copy) of its value and of its gradient;
``add_update(tp, opt)`` after the optimizer's step adds the update (each parameter's new value
and state buffers). ``first_divergence`` walks two traces of one graph in the order the step
computed them -- forward (node order), backward (descending node order, as the backward pass
visits nodes), update (parameter order) -- and names the first node that differs.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gtape
import numpy as np
from gtape.trace import check_var_of
from gtensor import describe, files

from . import canonical, store, ulps

FORMAT = "gverify-trace-v1"
PHASES = ("forward", "backward", "update")


class TraceError(ValueError):
    """Traces that cannot be compared (of different graphs, or damaged files)."""


@dataclass
class StepTrace:
    """One step's nodes with value and gradient digests (and host arrays when kept)."""

    dtype: str
    loss: int
    nodes: list[dict]  # index, op, inputs, attrs (repr), shape
    value_digests: list[str]
    grad_digests: list[str | None]
    values: list[np.ndarray] | None = None
    grads: list[np.ndarray | None] | None = None
    # the update: (buffer name, parameter node or -1, digest, array or None) per entry
    update: list[tuple[str, int, str, np.ndarray | None]] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def add_update(self, tp: Any, opt: Any) -> StepTrace:
        """Record the optimizer's update (call right after ``opt.step()``): every registered
        parameter's new value and state buffers, and the optimizer's scalars."""
        st = store.Store(tp, "add_update")
        ents = store.optimizer_entries(st, opt, "add_update")
        by_slot = [p.index for p in opt.params]
        keep = self.values is not None
        out: list[tuple[str, int, str, np.ndarray | None]] = []
        for k, i in enumerate(by_slot):
            v = st.value(i)
            out.append((f"param.{i}", i, canonical.array_digest(v), v if keep else None))
            for name, a in ents:
                if name.endswith(f".{k}") and name.count(".") == 2 and a.dtype.kind == "f":
                    out.append((name, i, canonical.array_digest(a), a if keep else None))
        scalars = [(n, a) for n, a in ents if n.count(".") < 2 or a.ndim == 0]
        out.append(("opt.scalars", -1, canonical.entries_digest(scalars), None))
        self.update = out
        self.meta["optimizer"] = str(opt.state_dict(False)["kind"])
        return self

    def save(self, path: Any) -> Path:
        """Write the trace to exactly ``path`` (an .npz of arrays and one JSON header; no
        pickle), atomically."""
        head = {"format": FORMAT, "dtype": self.dtype, "loss": self.loss, "nodes": self.nodes,
                "value_digests": self.value_digests, "grad_digests": self.grad_digests,
                "update": [[n, i, d] for n, i, d, _ in self.update], "meta": self.meta,
                "arrays": self.values is not None}
        arrays = {"header": np.array(json.dumps(head))}
        if self.values is not None:
            for i, v in enumerate(self.values):
                arrays[f"value.{i}"] = v
                if self.grads[i] is not None:
                    arrays[f"grad.{i}"] = self.grads[i]
            for n, _, _, a in self.update:
                if a is not None:
                    arrays[f"update.{n}"] = a

        def write(f: Any) -> None:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            f.write(buf.getvalue())

        return files.write_atomic(path, write)

    @classmethod
    def load(cls, path: Any) -> StepTrace:
        """Read a trace written by ``save`` (digests re-checked against the arrays)."""
        return load_trace(path)


def load_trace(path: Any) -> StepTrace:
    """Read a trace written by ``StepTrace.save``; TraceError when damaged."""
    where = "load_trace"
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        head = json.loads(str(arrays.pop("header")))
    except FileNotFoundError:
        raise
    except Exception as e:
        raise TraceError(f"{where}: {path} is not a trace written by StepTrace.save "
                         f"({type(e).__name__}: {e})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TraceError(f"{where}: {path} is not a {FORMAT} file")
    n = len(head["nodes"])
    values = grads = None
    if head["arrays"]:
        values = [arrays[f"value.{i}"] for i in range(n)]
        grads = [arrays.get(f"grad.{i}") for i in range(n)]
        for i in range(n):
            g = grads[i]
            if (canonical.array_digest(values[i]) != head["value_digests"][i]
                    or (g is None) != (head["grad_digests"][i] is None)
                    or (g is not None and canonical.array_digest(g) != head["grad_digests"][i])):
                raise TraceError(f"{where}: {path} is damaged: node {i}'s arrays do not match "
                                 "their digests")
    update = [(u[0], u[1], u[2], arrays.get(f"update.{u[0]}")) for u in head["update"]]
    for name, _, dg, a in update:
        if a is not None and canonical.array_digest(a) != dg:
            raise TraceError(f"{where}: {path} is damaged: update buffer {name} does not match "
                             "its digest")
    return StepTrace(head["dtype"], head["loss"], head["nodes"], head["value_digests"],
                     head["grad_digests"], values, grads, update, head["meta"])


def _node_info(n: gtape.Node) -> dict:
    return {"index": n.index, "op": n.name, "inputs": list(n.inputs),
            "attrs": repr(sorted(n.attrs.items())), "shape": list(n.shape)}


def trace_step(tp: Any, loss: Any = None, arrays: bool = True, meta: dict | None = None
               ) -> StepTrace:
    """The per-node trace of the step just run (call after ``backward``, before the step).

    ``tp`` is a ``gtape.Tape`` with ``loss`` the Var the backward ran from, or a captured
    ``ggpu_replay.Program`` (no ``loss``) after its ``forward()`` and ``backward()``.
    ``arrays=False`` keeps digests only (first_divergence then cannot measure ulps).
    """
    where = "trace_step"
    st = store.Store(tp, where)
    if st.kind == "program":
        if loss is not None:
            raise TypeError(f"{where}: a captured program knows its loss; got loss "
                            f"{describe(loss)}; expected None")
        nodes = tp.nodes
        li = tp.trace.loss
        value_at, grad_at = tp.value_at, tp.grad_at
    else:
        check_var_of(where, tp, "loss", loss, "the loss Var backward ran from")
        li = loss.index
        nodes = tp.nodes()[:li + 1]
        if tp.grad_at(li) is None:
            raise ValueError(f"{where}: the loss (node {li}) has no gradient: call "
                             "tp.backward(loss) before trace_step")
        be = tp.backend

        def value_at(i: int) -> np.ndarray:
            return np.array(be.to_numpy(tp.value_at(i)))

        def grad_at(i: int) -> np.ndarray | None:
            g = tp.grad_at(i)
            return None if g is None else np.array(be.to_numpy(g))

    vals = [np.asarray(value_at(n.index)) for n in nodes]
    grads = [grad_at(n.index) for n in nodes]
    vd = [canonical.array_digest(v) for v in vals]
    gd = [None if g is None else canonical.array_digest(g) for g in grads]
    return StepTrace(st.dtype.name, li, [_node_info(n) for n in nodes], vd, gd,
                     vals if arrays else None, grads if arrays else None, [], dict(meta or {}))


@dataclass(frozen=True)
class NodeDivergence:
    """The first node at which two step traces differ."""

    index: int  # the node (for "update": the parameter's node)
    op: str  # the node's op (for "update": the optimizer's kind, e.g. "adam")
    phase: str  # "forward", "backward" or "update"
    shape: tuple[int, ...]
    max_ulp: float | None  # None when the traces kept no arrays
    count: int | None  # differing elements (None when the traces kept no arrays)
    size: int
    inputs_agree: bool  # True: the node's inputs agree, so THIS op is the culprit
    inputs: tuple[int, ...]  # the nodes its computation read
    entry: str = ""  # for "update": which buffer ("param.3", "m.1", ...)

    def to_dict(self) -> dict:
        """The fields as JSON data."""
        d = asdict(self)
        d["shape"], d["inputs"] = list(self.shape), list(self.inputs)
        return d


def _check_same_graph(a: StepTrace, b: StepTrace) -> None:
    if not isinstance(a, StepTrace) or not isinstance(b, StepTrace):
        bad = a if not isinstance(a, StepTrace) else b
        raise TypeError(f"first_divergence: got {describe(bad)}; expected two StepTraces "
                        "(trace_step or load_trace)")
    if a.dtype != b.dtype:
        raise TraceError(f"first_divergence: the traces are of {a.dtype} and {b.dtype} steps; "
                         "expected one dtype")
    for na, nb in zip(a.nodes, b.nodes):
        if na != nb:
            raise TraceError(f"first_divergence: the traces are of different graphs: node "
                             f"{na['index']} is {na['op']} {tuple(na['shape'])} <- "
                             f"{na['inputs']} in one and {nb['op']} {tuple(nb['shape'])} <- "
                             f"{nb['inputs']} in the other")
    if len(a.nodes) != len(b.nodes) or a.loss != b.loss:
        raise TraceError(f"first_divergence: the traces are of different graphs: "
                         f"{len(a.nodes)} nodes (loss {a.loss}) vs {len(b.nodes)} (loss "
                         f"{b.loss})")
    if bool(a.update) != bool(b.update):
        raise TraceError("first_divergence: one trace has the optimizer's update (add_update) "
                         "and the other does not; expected both or neither")
    if [u[:2] for u in a.update] != [u[:2] for u in b.update]:
        raise TraceError("first_divergence: the traces' updates name different buffers")


def _measure(x: Any, y: Any) -> tuple[float | None, int | None]:
    if x is None or y is None:
        return None, None
    count, dist = ulps.compare(np.asarray(x), np.asarray(y))
    return dist, count


def first_divergence(a: StepTrace, b: StepTrace) -> NodeDivergence | None:
    """The first node (forward, then backward, then update) whose digest differs; None when
    the steps agree everywhere. Refuses (TraceError) traces of different graphs or dtypes."""
    _check_same_graph(a, b)
    nodes = a.nodes
    keep = a.values is not None and b.values is not None
    for i, n in enumerate(nodes):
        if a.value_digests[i] != b.value_digests[i]:
            ins = tuple(n["inputs"])
            agree = all(a.value_digests[j] == b.value_digests[j] for j in ins)
            dist, count = _measure(a.values[i], b.values[i]) if keep else (None, None)
            return NodeDivergence(i, n["op"], "forward", tuple(n["shape"]), dist, count,
                                  int(np.prod(n["shape"])), agree, ins)
    consumers: dict[int, list[int]] = {}
    for n in nodes:
        for j in n["inputs"]:
            consumers.setdefault(j, []).append(n["index"])
    for i in range(len(nodes) - 1, -1, -1):
        if a.grad_digests[i] != b.grad_digests[i]:
            n = nodes[i]
            cons = tuple(sorted(set(consumers.get(i, ())), reverse=True))
            agree = all(a.grad_digests[c] == b.grad_digests[c] for c in cons)
            dist, count = _measure(a.grads[i], b.grads[i]) if keep else (None, None)
            return NodeDivergence(i, n["op"], "backward", tuple(n["shape"]), dist, count,
                                  int(np.prod(n["shape"])), agree, cons)
    if not a.update or not b.update:
        return None
    kind = str(a.meta.get("optimizer", "optimizer"))
    for (name, i, da, xa), (_, _, db, xb) in zip(a.update, b.update):
        if da != db:
            dist, count = _measure(xa, xb)
            shape = tuple(nodes[i]["shape"]) if i >= 0 else ()
            agree = i < 0 or (a.value_digests[i] == b.value_digests[i]
                              and a.grad_digests[i] == b.grad_digests[i])
            return NodeDivergence(i, kind, "update", shape, dist, count,
                                  int(np.prod(shape)), agree, (i,) if i >= 0 else (), name)
    return None


def report(d: NodeDivergence | None, t: StepTrace) -> str:
    """A readable report of a divergence: op, phase, shape, ulps, inputs, place in the graph."""
    if d is None:
        return (f"no node differs: all {len(t.nodes)} nodes' values and gradients"
                f"{' and the update' if t.update else ''} are bit-identical")
    n = len(t.nodes)
    lines = [f"first divergence: node {d.index} ({d.op}), phase {d.phase}"
             + (f", buffer {d.entry}" if d.entry else ""),
             f"  shape {d.shape}, {d.size} elements"
             + ("" if d.count is None else f", {d.count} differ, max {d.max_ulp} ulp")]
    if d.phase == "forward":
        what = ", ".join(f"{j} ({t.nodes[j]['op']})" for j in d.inputs) or "none (a leaf)"
        lines.append(f"  inputs: {what}: {'all agree' if d.inputs_agree else 'some differ'}")
    elif d.phase == "backward":
        what = ", ".join(f"{j} ({t.nodes[j]['op']})" for j in d.inputs) or "none (the loss)"
        lines.append(f"  gradient from consumers {what}: "
                     f"{'all agree' if d.inputs_agree else 'some differ'}")
    else:
        lines.append(f"  the parameter's value and gradient before the update: "
                     f"{'agree' if d.inputs_agree else 'differ'}")
    lines.append(f"  place in the graph: node {d.index} of {n} (loss = node {t.loss})")
    verdict = ("this op is the culprit: its inputs agree and its output differs"
               if d.inputs_agree else "its inputs already differ: look upstream")
    if d.phase == "forward" and not d.inputs:
        verdict = "a leaf differs: the step started from different data or parameters"
    lines.append(f"  verdict: {verdict}")
    return "\n".join(lines)
