"""Phase 2 of an audit: the first differing node of a disputed step.

The auditor fetches the state the step starts from (proved by record k-1), recomputes step k
with a node trace (``nodetrace``) and asks for the trainer's trace root of step k. Walking
down both trace trees it reaches the first leaf that differs; every leaf before it agrees, so
every input of that leaf's computation agrees and its op is the culprit:

- ``forward`` (an op node): the referee recomputes the op from its inputs' values;
- ``backward``: the node's gradient from its consumers' VJPs;
- ``update``: one optimizer step from the state before and the parameters' gradients;
- ``state`` / ``data`` (a parameter / constant node's value), ``graph`` (another graph):
  the step started from something else than its records commit (the referee re-derives it);
- ``trace``: the trainer's trace contradicts its own records (its start or end leaf).

The verdict carries the proofs (each leaf with its membership proof against the trainer's
trace root) and, as evidence blobs, the arrays the referee needs -- the auditor's own copies,
which hash to the trainer's proved digests.
"""

from __future__ import annotations

import numpy as np

from . import canonical, nodetrace, ulps, wire
from .audit import Auditor, Inconclusive
from .locate import HEX, ProofError, RemoteTree, first_difference
from .recompute import LEAVES, consumers, reached
from .remote import TransportError
from .task import Task


class StepDispute:
    """The node-level search of step ``k`` (``prev``, ``rec``: the trainer's proved records
    of steps k-1 and k)."""

    def __init__(self, aud: Auditor, task: Task, cid: str, k: int, prev: dict, rec: dict) -> None:
        self.aud, self.task, self.cid, self.k, self.prev, self.rec = aud, task, cid, k, prev, rec
        self.proved: dict[str, dict] = {}
        self.ev = aud.evidence

    def prove(self, ids: list[int]) -> dict[int, dict]:
        """Trace leaves ``ids`` with proofs (kept for the verdict)."""
        need = sorted({j for j in ids if str(j) not in self.proved})
        for at in range(0, len(need), 64):
            for j, item in self.tree.leaves(need[at:at + 64]).items():
                self.proved[str(j)] = item
        return {j: self.proved[str(j)] for j in ids}

    def arrays(self, ids: list[int]) -> None:
        """Keep the auditor's arrays of trace leaves ``ids`` as evidence."""
        kept = self.ev.setdefault("arrays", {})
        for j in ids:
            kept[str(j)] = self.aud.keep(wire.pack_array(self.mine.arrays[j]))

    def run(self) -> dict:
        """Locate the node; the verdict's fields."""
        aud, k = self.aud, self.k
        ents = aud.state(k - 1, self.prev)
        self.ev["state_before"] = aud.state_blobs[k - 1]
        s = self.task.session(aud.engine)
        try:
            aud.restore(s, k - 1, ents)
            self.mine = nodetrace.trace_next_step(s, self.cid, self.rec["batch"], aud.probe())
        finally:
            s.close()
        info = aud.remote.json(f"/v1/steps/{k}/trace")
        if not isinstance(info, dict) or info.get("step") != k or not isinstance(
                info.get("leaves"), int) or info["leaves"] < 1 or not (
                isinstance(info.get("root"), str) and len(info["root"]) == 64
                and set(info["root"]) <= HEX):
            raise TransportError(f"GET /v1/steps/{k}/trace: not a trace root: {str(info)[:200]}")
        n = info["leaves"]
        self.tree = RemoteTree(aud.remote, f"/v1/steps/{k}/trace", bytes.fromhex(info["root"]),
                               n, "trace")
        aud.proofs["trace"] = {"step": k, "root": info["root"], "leaves": n,
                               "transcript": self.tree.transcript, "proved": self.proved}
        mine = self.mine
        if n != mine.tree.n:
            got = self.prove([0, 1])
            j = next((i for i in (0, 1) if got[i]["leaf"] != mine.leaves[i]), None)
            if j is None:
                raise Inconclusive(f"the trainer's trace of step {k} has {n} leaves; the graph "
                                   f"both sides agree on makes {mine.tree.n}")
        else:
            j = first_difference(self.tree, dict(enumerate(mine.tree.leaf_hashes)), 0, n - 1)
            j = n - 1 if j is None else j
        kind = mine.leaves[j]["kind"]
        theirs = self.prove([j, 0, *self._needs(kind, j)])[j]["leaf"]  # one query
        if theirs.get("kind") != kind:
            raise Inconclusive(f"the trainer's trace leaf {j} of step {k} is a "
                               f"{theirs.get('kind')!r} leaf; the agreed graph puts a {kind!r} "
                               "leaf there")
        out = getattr(self, f"_{kind}")(j, theirs)
        return {"leaf": j, **out}

    def _needs(self, kind: str, j: int) -> list[int]:
        """The trace leaves a referee needs for a dispute at leaf ``j`` of ``kind``."""
        mine = self.mine
        if kind == "forward":
            g = mine.graph[mine.leaves[j]["node"]]
            ins = [] if g["op"] in LEAVES else [mine.leaf("forward", x) for x in g["inputs"]]
            return [1, *ins]
        if kind == "backward":
            i = mine.leaves[j]["node"]
            ids = [1]
            for c in consumers(mine.graph, i, reached(mine.graph)):
                ids += [mine.leaf("forward", c), mine.leaf("backward", c)]
                ids += [mine.leaf("forward", x) for x in mine.graph[c]["inputs"]]
            return ids
        if kind == "update":
            return [mine.leaf("backward", p) for p in self._params()]
        return []

    def _params(self) -> list[int]:
        state = dict(self.aud.state(self.k - 1, self.prev))
        return [int(x) for x in np.asarray(state["opt.params"]).reshape(-1)]

    # ------------------------------------------------------------ per kind
    def _contradiction(self, j: int, theirs: dict, expected: dict, what: str) -> dict:
        if theirs == expected:
            raise Inconclusive(f"step {self.k}: every node and update agrees, and the trainer's "
                               f"{what} matches its records: nothing left to dispute")
        return {"phase": "trace", "trainer": {"leaf": theirs}, "auditor": {"leaf": expected},
                "detail": f"the trainer's node trace of step {self.k} contradicts its own "
                          f"records: its {what} leaf is {theirs}; records {self.k - 1} and "
                          f"{self.k} commit {expected}"}

    def _start(self, j: int, theirs: dict) -> dict:
        want = {"kind": "start", "step": self.k, "config": self.cid, "state": self.prev["state"],
                "batch": self.rec["batch"]}
        return self._contradiction(j, theirs, want, "start")

    def _end(self, j: int, theirs: dict) -> dict:
        want = {"kind": "end", "state": self.rec["state"], "loss_bits": self.rec["loss_bits"]}
        return self._contradiction(j, theirs, want, "end")

    def _graph(self, j: int, theirs: dict) -> dict:
        aud = self.aud
        got = aud.remote.json(f"/v1/steps/{self.k}/trace/graph")
        try:
            data = canonical.json_bytes(got)
        except ValueError as e:
            raise TransportError(f"the trainer's graph of step {self.k} is not JSON data ({e})"
                                 ) from None
        name = aud.keep(data)
        if canonical.sha256(data) != theirs.get("digest"):
            raise ProofError(f"the graph of step {self.k} the trainer sent does not hash to its "
                             "graph leaf",
                             {"kind": "graph", "step": self.k, "leaf": j, "blob": name})
        mine = self.mine.graph
        i = next((x for x in range(max(len(mine), len(got) if isinstance(got, list) else 0))
                  if x >= len(mine) or not isinstance(got, list) or x >= len(got)
                  or got[x] != mine[x]), None)
        self.ev.update({"graph_trainer": name,
                        "graph": aud.keep(canonical.json_bytes(mine))})
        op = mine[i]["op"] if i is not None and i < len(mine) else None
        return {"phase": "graph", "node": i, "op": op,
                "trainer": {"digest": theirs.get("digest"), "leaf": theirs},
                "auditor": {"digest": self.mine.leaves[j]["digest"], "leaf": self.mine.leaves[j]},
                "detail": f"step {self.k} ran another graph: first at node {i} ({op})"}

    def _measure(self, j: int, theirs: dict) -> dict:
        """Fetch the trainer's array of leaf ``j``; its distance from the auditor's."""
        mine = self.mine.arrays.get(j)
        if mine is None:
            return {}
        aud = self.aud
        data = aud.remote.bytes(f"/v1/steps/{self.k}/trace/arrays/{j}", mine.nbytes + (64 << 10))
        try:
            arr = wire.unpack_array(data, f"the trainer's array of trace leaf {j}")
        except wire.WireError as e:
            raise TransportError(str(e)) from None
        if arr.shape != mine.shape or arr.dtype != mine.dtype:
            raise TransportError(f"the trainer's array of trace leaf {j} is {arr.dtype} "
                                 f"{arr.shape}; the commitment's graph says {mine.dtype} "
                                 f"{mine.shape}")
        name = aud.keep(data)
        if canonical.array_digest(arr) != theirs.get("digest"):
            raise ProofError(f"the array of trace leaf {j} the trainer sent does not hash to "
                             "the leaf's digest",
                             {"kind": "array", "step": self.k, "leaf": j, "blob": name})
        self.ev["trainer_array"] = name
        if arr.dtype.kind == "f":
            count, dist = ulps.compare(mine, arr)
            return {"count": int(count), "max_ulp": float(dist), "size": int(arr.size)}
        return {"count": int(np.sum(mine != arr)), "max_ulp": None, "size": int(arr.size)}

    def _node_fields(self, j: int, theirs: dict, phase: str, node: int) -> dict:
        self.prove([1])
        self.ev["graph"] = self.aud.keep(canonical.json_bytes(self.mine.graph))
        g = self.mine.graph[node]
        return {"phase": phase, "node": node, "op": g["op"], "shape": g["shape"],
                "inputs_agree": True,
                "trainer": {"digest": theirs.get("digest"), "leaf": theirs},
                "auditor": {"digest": self.mine.leaves[j]["digest"],
                            "leaf": self.mine.leaves[j]}, **self._measure(j, theirs)}

    def _forward(self, j: int, theirs: dict) -> dict:
        i = self.mine.leaves[j]["node"]
        g = self.mine.graph[i]
        if g["op"] in LEAVES:
            phase = "state" if g["op"] == "param" else "data"
            out = self._node_fields(j, theirs, phase, i)
            out["detail"] = (f"step {self.k} read another value at {g['op']} node {i} than "
                             "its start commits")
            return out
        ids = [self.mine.leaf("forward", x) for x in g["inputs"]]
        self.prove(ids)
        self.arrays(ids)
        out = self._node_fields(j, theirs, "forward", i)
        out["detail"] = (f"step {self.k}, node {i} ({g['op']}), forward: its inputs "
                         f"{g['inputs']} agree and its value differs"
                         + _ulp_text(out) + ": this op is the culprit")
        return out

    def _backward(self, j: int, theirs: dict) -> dict:
        mine = self.mine
        i = mine.leaves[j]["node"]
        cons = consumers(mine.graph, i, reached(mine.graph))
        ids = []
        for c in cons:
            ids += [mine.leaf("forward", c), mine.leaf("backward", c)]
            ids += [mine.leaf("forward", x) for x in mine.graph[c]["inputs"]]
        self.prove(ids)
        self.arrays(sorted(set(ids)))
        out = self._node_fields(j, theirs, "backward", i)
        out["consumers"] = cons
        out["detail"] = (f"step {self.k}, node {i} ({mine.graph[i]['op']}), backward: the "
                         f"gradients of its consumers {cons} agree and its gradient differs"
                         + _ulp_text(out) + ": this gradient is the culprit")
        return out

    def _update(self, j: int, theirs: dict) -> dict:
        mine = self.mine
        entry = mine.leaves[j]["entry"]
        node = mine.leaves[j]["node"]
        ids = [mine.leaf("backward", p) for p in self._params()]
        self.prove(ids)
        self.arrays(ids)
        kind = str(np.asarray(dict(self.aud.state(self.k - 1, self.prev))["opt.kind"]
                              ).reshape(-1)[0])
        out = {"phase": "update", "node": node, "op": kind, "entry": entry,
               "inputs_agree": True,
               "trainer": {"digest": theirs.get("digest"), "leaf": theirs},
               "auditor": {"digest": mine.leaves[j]["digest"], "leaf": mine.leaves[j]},
               **self._measure(j, theirs)}
        out["detail"] = (f"step {self.k}, the {kind} update of {entry} (node {node}): the "
                         "state before and every gradient agree and the updated value differs"
                         + _ulp_text(out) + ": this update is the culprit")
        return out


def _ulp_text(out: dict) -> str:
    if out.get("count") is None:
        return ""
    ulp = "" if out.get("max_ulp") is None else f", max {out['max_ulp']:g} ulp"
    return f" ({out['count']} of {out['size']} elements{ulp})"


def summary(v: dict) -> str:
    """One line saying what a verdict found."""
    q, b = v.get("queries", {}), v.get("bytes", {})
    cost = (f"{q.get('total', 0)} queries, {b.get('sent', 0) + b.get('received', 0):,} bytes "
            "exchanged")
    if v["outcome"] == "agree":
        return f"agree: {v.get('detail', '')} ({cost})"
    if v["outcome"] == "inconclusive":
        return f"inconclusive: {v.get('reason', '')} ({cost})"
    where = f"step {v.get('step')}, phase {v.get('phase')}"
    if v.get("node") is not None:
        where += f", node {v['node']} ({v.get('op')})"
    if v.get("entry"):
        where += f", entry {v['entry']}"
    return f"dispute: {where}: {v.get('detail', '')} ({cost})"

