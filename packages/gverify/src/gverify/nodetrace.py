"""One step's node trace as Merkle leaves: what a trainer commits to when a step is disputed.

The leaves, in the order the step computed them (so the first leaf two parties disagree on
has every input it was computed from among the leaves before it, which they agree on):

- ``start``: the step, the config identity, the digest of the state it starts from (the
  record of step k-1) and of its batch (the record of step k);
- ``graph``: the digest of the step's graph -- per node its op, inputs, attributes (typed
  JSON), shape, dtype and whether it needs a gradient (``graph_of``);
- ``forward``: per node up to the loss, the digest of its value (node order);
- ``backward``: per node with a gradient, the digest of its gradient (descending node order,
  as the backward pass visits them);
- ``update``: per optimizer entry (``param.<node>``, ``opt.m.<slot>``, ..., ``opt.scalars``),
  its digest after the step (``StepTrace.add_update``);
- ``end``: the digest of the state after the step (the record of step k) and the loss bits.

Each leaf is canonical JSON (``canonical.json_bytes``); the root is RFC 6962's (``merkle``).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import gtape
import numpy as np
from gtensor import describe, files

from . import canonical, merkle
from .steptrace import StepTrace, trace_step
from .task import Probes, Session

FORMAT = "gverify-nodetrace-v1"


def _attr_json(where: str, v: Any) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return {"f": float(v).hex()}
    if isinstance(v, (tuple, list)):
        return {"t" if isinstance(v, tuple) else "l": [_attr_json(where, x) for x in v]}
    raise TypeError(f"{where}: an attribute value {describe(v)} has no JSON form; expected "
                    "None, bool, int, float, str or tuples / lists of them")


def attrs_json(attrs: dict, where: str = "attrs_json") -> dict:
    """A node's attributes as typed JSON (floats as exact hex, tuples kept apart from lists)."""
    return {str(k): _attr_json(f"{where}: attribute {k!r}", v) for k, v in attrs.items()}


def _attr_value(where: str, v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, dict) and len(v) == 1:
        (tag, x), = v.items()
        if tag == "f" and isinstance(x, str):
            try:
                return float.fromhex(x)
            except ValueError:
                pass
        elif tag in ("t", "l") and isinstance(x, list):
            items = [_attr_value(where, y) for y in x]
            return tuple(items) if tag == "t" else items
    raise ValueError(f"{where}: {describe(v)} is not a typed attribute value")


def attrs_from_json(d: Any, where: str = "attrs_from_json") -> dict:
    """The attributes ``attrs_json`` encoded (ValueError for anything else)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: attributes are {describe(d)}; expected a dict")
    return {k: _attr_value(f"{where}: attribute {k!r}", v) for k, v in d.items()}


def graph_of(tp: gtape.Tape, loss: gtape.Var) -> list[dict]:
    """The step's graph up to the loss: per node index, op, inputs, attrs (typed JSON), shape,
    dtype, requires_grad."""
    be = tp.backend
    out = []
    for n in tp.nodes()[:loss.index + 1]:
        dt = np.asarray(be.to_numpy(tp.value_at(n.index))).dtype
        out.append({"index": n.index, "op": n.name, "inputs": list(n.inputs),
                    "attrs": attrs_json(n.attrs, f"graph_of: node {n.index} ({n.name})"),
                    "shape": list(n.shape), "dtype": dt.name, "req": bool(n.requires_grad)})
    return out


def graph_digest(graph: list[dict]) -> str:
    """The SHA-256 of a graph's canonical JSON."""
    return canonical.sha256(canonical.json_bytes(graph))


@dataclass
class StepLeaves:
    """A step's trace leaves, the arrays behind them (by leaf index), the graph, the tree."""

    step: int
    leaves: list[dict]
    graph: list[dict]
    arrays: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.tree = merkle.Tree([canonical.json_bytes(x) for x in self.leaves])
        self.index: dict[tuple, int] = {}
        for j, leaf in enumerate(self.leaves):
            kind = leaf["kind"]
            key = leaf.get("entry") if kind == "update" else leaf.get("node")
            self.index[(kind, key)] = j

    @property
    def root(self) -> str:
        """The tree's root (hex)."""
        return self.tree.root.hex()

    def leaf(self, kind: str, key: Any = None) -> int:
        """The index of the leaf of ``kind`` for node / entry ``key``."""
        return self.index[(kind, key)]

    def save(self, path: Any) -> None:
        """Write the leaves, the graph and the arrays to an .npz (no pickle), atomically."""
        head = {"format": FORMAT, "step": self.step, "leaves": self.leaves, "graph": self.graph}
        arrays = {"header": np.array(json.dumps(head))}
        arrays.update({f"a{j}": a for j, a in self.arrays.items()})

        def write(f: Any) -> None:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            f.write(buf.getvalue())

        files.write_atomic(path, write)

    @classmethod
    def load(cls, path: Any) -> StepLeaves:
        """Read what ``save`` wrote (every array checked against its leaf's digest)."""
        with np.load(path, allow_pickle=False) as f:
            got = {k: f[k] for k in f.files}
        head = json.loads(str(got.pop("header")))
        if head.get("format") != FORMAT:
            raise ValueError(f"StepLeaves.load: {path} is not a {FORMAT} file")
        arrays = {int(k[1:]): v for k, v in got.items()}
        out = cls(head["step"], head["leaves"], head["graph"], arrays)
        for j, a in arrays.items():
            if canonical.array_digest(a) != out.leaves[j]["digest"]:
                raise ValueError(f"StepLeaves.load: {path} is damaged: leaf {j}'s array does "
                                 "not match its digest")
        return out


def build(step: int, config: str, state_before: str, batch: str, graph: list[dict],
          trace: StepTrace, state_after: str, loss_bits: str) -> StepLeaves:
    """The leaves of a traced step (``trace`` with arrays and its update)."""
    leaves: list[dict] = [
        {"kind": "start", "step": step, "config": config, "state": state_before,
         "batch": batch},
        {"kind": "graph", "digest": graph_digest(graph), "nodes": len(graph)}]
    arrays: dict[int, np.ndarray] = {}
    for i, node in enumerate(graph):
        arrays[len(leaves)] = trace.values[i]
        leaves.append({"kind": "forward", "node": i, "op": node["op"],
                       "digest": trace.value_digests[i]})
    for i in range(len(graph) - 1, -1, -1):
        if trace.grad_digests[i] is not None:
            arrays[len(leaves)] = trace.grads[i]
            leaves.append({"kind": "backward", "node": i, "op": graph[i]["op"],
                           "digest": trace.grad_digests[i]})
    for name, node, dg, arr in trace.update:
        if arr is not None:
            arrays[len(leaves)] = arr
        leaves.append({"kind": "update", "entry": name, "node": node, "digest": dg})
    leaves.append({"kind": "end", "state": state_after, "loss_bits": loss_bits})
    return StepLeaves(step, leaves, graph, arrays)


class TraceProbe:
    """Traces the step it is called in: the graph and the node trace after backward, the
    update after the optimizer's step, the loss bits at the end."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.trace: StepTrace | None = None
        self.graph: list[dict] = []
        self.loss_bits = ""

    def backward(self, k: int, tp: gtape.Tape, loss: gtape.Var) -> None:
        """Record the graph and every node's value and gradient."""
        if k == self.step:
            self.trace = trace_step(tp, loss)
            self.graph = graph_of(tp, loss)

    def update(self, k: int, tp: gtape.Tape, opt: Any) -> None:
        """Record the update (after any drill that moved it)."""
        if k == self.step:
            self.trace.add_update(tp, opt)

    def done(self, k: int, tp: gtape.Tape, opt: Any, bits: str) -> None:
        """Keep the loss bits."""
        if k == self.step:
            self.loss_bits = bits


def trace_next_step(session: Session, config: str, batch: str, drill_probe: Any = None
                    ) -> StepLeaves:
    """Run the session's next step traced (after ``drill_probe``, if given) and return its
    leaves; ``config`` is the run's config identity, ``batch`` the step's batch digest."""
    k = session.done + 1
    before = session.digest()
    probe = TraceProbe(k)
    session.step(Probes(drill_probe, probe))
    return build(k, config, before, batch, probe.graph, probe.trace, session.digest(),
                 probe.loss_bits)
