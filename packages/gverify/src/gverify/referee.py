"""The referee (``gverify referee VERDICT.json``): check a verdict's proofs against the
trainer's commitment, recompute the one disputed op by its definition and rule.

Rulings: ``trainer`` (the op's result is the trainer's committed output, or the auditor's
evidence of a failed proof does not hold up: the run stands; exit 0), ``auditor`` (it is the
auditor's: the trainer is wrong; exit 1), ``neither`` (it is neither side's: the trainer is
wrong too; exit 1), ``inconclusive`` (the verdict's proofs or evidence do not verify, or it
disputes nothing; exit 2). Every proof is re-checked -- records against the commitment's
root, trace leaves against the trace root, the trace's start leaf against records k-1 and k,
every evidence array against the digest its proved leaf commits -- before anything is
recomputed; the recomputation is one op (``recompute``), one optimizer update, or for the
rare disputes about a step's inputs (its initial state, batch, graph or constants) the
task's definition of them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import canonical, merkle, nodetrace, recompute, wire
from . import task as tasks
from . import verdict as vfile
from .audit import well_formed_record
from .commit import config_id

RULING_EXIT = {"trainer": 0, "auditor": 1, "neither": 1, "inconclusive": 2}


class Unverifiable(Exception):
    """The verdict's proofs or evidence do not verify (the message says which)."""


def _verify_leaf(item: Any, i: int, n: int, root: str, what: str) -> dict:
    try:
        leaf, path = item["leaf"], [bytes.fromhex(h) for h in item["path"]]
        ok = merkle.verify_path(i, n, merkle.leaf_hash(canonical.json_bytes(leaf)), path,
                                bytes.fromhex(root))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise Unverifiable(f"the verdict's proof of {what} {i} does not verify against the "
                           f"root {str(root)[:16]}...")
    return leaf


class Referee:
    """One ruling on verdict ``path`` with engine ``engine``."""

    def __init__(self, path: Any, engine: str = "numpy") -> None:
        self.path, self.engine = Path(path), engine
        self.recomputed = ""

    def run(self) -> dict:
        """The ruling (JSON data)."""
        t0 = time.perf_counter()
        out: dict[str, Any] = {"format": "gverify-ruling-v1", "verdict": str(self.path),
                               "engine": self.engine}
        try:
            v = vfile.read(self.path)
            out.update(self._rule(v))
        except (Unverifiable, vfile.VerdictError, wire.WireError, tasks.TaskError) as e:
            out.update({"ruling": "inconclusive", "reason": str(e)})
        except (KeyError, TypeError, ValueError, IndexError) as e:  # a field missing or odd
            out.update({"ruling": "inconclusive",
                        "reason": f"the verdict is malformed ({type(e).__name__}: {e})"})
        out["recomputed"] = self.recomputed
        out["seconds"] = round(time.perf_counter() - t0, 4)
        return out

    # ------------------------------------------------------------ proofs
    def _commitment(self, v: dict) -> dict:
        com = v.get("commitment")
        try:
            ok = com["config_id"] == config_id(com["spec"], com["identity"])
        except (KeyError, TypeError):
            ok = False
        if not ok:
            raise Unverifiable("the verdict's commitment is missing or its config_id is not "
                               "the hash of its spec and identity")
        return com

    def record(self, k: int) -> dict:
        """Record ``k``, its proof checked against the commitment's root."""
        item = self.v.get("proofs", {}).get("steps", {}).get("records", {}).get(str(k))
        if item is None:
            raise Unverifiable(f"the verdict has no proof of record {k}")
        return _verify_leaf(item, k, self.com["leaves"], self.com["root"], "record")

    def leaves(self) -> dict[tuple, tuple[int, dict]]:
        """Every proved trace leaf, checked, by (kind, node or entry)."""
        tr = self.v.get("proofs", {}).get("trace")
        if not isinstance(tr, dict):
            raise Unverifiable("the verdict has no trace proofs")
        out = {}
        for key, item in tr.get("proved", {}).items():
            j = int(key)
            leaf = _verify_leaf(item, j, tr["leaves"], tr["root"], "trace leaf")
            out[(leaf.get("kind"), leaf.get("entry") if leaf.get("kind") == "update"
                 else leaf.get("node"))] = (j, leaf)
        return out

    def blob(self, name: Any) -> bytes:
        """Evidence blob ``name``."""
        return vfile.blob(self.path, name)

    def array(self, j: int, leaf: dict) -> np.ndarray:
        """The evidence array of trace leaf ``j``, checked against the leaf's digest."""
        name = self.v.get("evidence", {}).get("arrays", {}).get(str(j))
        if name is None:
            raise Unverifiable(f"the verdict has no evidence array of trace leaf {j}")
        arr = wire.unpack_array(self.blob(name))
        if canonical.array_digest(arr) != leaf.get("digest"):
            raise Unverifiable(f"the evidence array of trace leaf {j} does not hash to the "
                               "leaf's committed digest")
        return arr

    def state_before(self) -> list[tuple[str, np.ndarray]]:
        """The state the disputed step starts from, checked against record k-1."""
        k = self.v["step"]
        ents = wire.unpack(self.blob(self.v.get("evidence", {}).get("state_before")))
        if canonical.entries_digest(ents) != self.record(k - 1)["state"]:
            raise Unverifiable(f"the evidence state does not hash to record {k - 1}'s state")
        return ents

    def graph(self, leaves: dict) -> list[dict]:
        """The step's graph, checked against the proved graph leaf."""
        _, leaf = leaves.get(("graph", None), (None, None))
        if leaf is None:
            raise Unverifiable("the verdict has no proof of the trace's graph leaf")
        data = self.blob(self.v.get("evidence", {}).get("graph"))
        if canonical.sha256(data) != leaf.get("digest"):
            raise Unverifiable("the evidence graph does not hash to the proved graph leaf")
        return json.loads(data)

    def anchor(self, leaves: dict) -> None:
        """The trace root is the trainer's trace of step k: its start leaf names records
        k-1's state and k's batch."""
        k = self.v["step"]
        _, start = leaves.get(("start", None), (None, None))
        want = {"kind": "start", "step": k, "config": self.com["config_id"],
                "state": self.record(k - 1)["state"], "batch": self.record(k)["batch"]}
        if start != want:
            raise Unverifiable(f"the proved start leaf of the trace of step {k} is {start}; "
                               f"records {k - 1} and {k} commit {want}")

    # ------------------------------------------------------------ rulings
    def _rule(self, v: dict) -> dict:
        self.v = v
        if v["outcome"] != "dispute":
            return {"ruling": "trainer" if v["outcome"] == "agree" else "inconclusive",
                    "reason": f"the verdict is {v['outcome']!r}: nothing is disputed"}
        self.com = self._commitment(v)
        phase = v.get("phase")
        fn = getattr(self, f"_phase_{phase}", None)
        if fn is None:
            raise Unverifiable(f"the verdict's phase is {phase!r}; no ruling exists for it")
        return fn()

    def _compare(self, got: str, what: str) -> dict:
        t = self.v.get("trainer", {}).get("digest")
        a = self.v.get("auditor", {}).get("digest")
        ruling = "trainer" if got == t else ("auditor" if got == a else "neither")
        return {"ruling": ruling, "digest": got, "trainer_digest": t, "auditor_digest": a,
                "reason": f"{what}: the op's result is {got[:16]}...: "
                          + {"trainer": "the trainer's committed output",
                             "auditor": "the auditor's claim: the trainer is wrong",
                             "neither": "neither side's: the trainer is wrong"}[ruling]}

    def _claims(self, key: tuple, leaves: dict) -> tuple[int, dict]:
        if key not in leaves:
            raise Unverifiable(f"the verdict proves no trace leaf {key}")
        j, leaf = leaves[key]
        if self.v.get("trainer", {}).get("digest") != leaf.get("digest"):
            raise Unverifiable(f"the verdict's trainer digest is not the proved leaf {j}'s")
        return j, leaf

    def _phase_forward(self) -> dict:
        leaves = self.leaves()
        self.anchor(leaves)
        graph = self.graph(leaves)
        i = self.v["node"]
        self._claims(("forward", i), leaves)
        node = graph[i]
        ins = []
        for x in node["inputs"]:
            j, leaf = self._claims_input(("forward", x), leaves)
            ins.append(self.array(j, leaf))
        out = recompute.forward(self.engine, node, ins)
        self.recomputed = f"one op: {node['op']} {tuple(node['shape'])} from nodes {node['inputs']}"
        return self._compare(canonical.array_digest(out), f"node {i} ({node['op']}) forward")

    def _claims_input(self, key: tuple, leaves: dict) -> tuple[int, dict]:
        if key not in leaves:
            raise Unverifiable(f"the verdict proves no trace leaf {key} (an input)")
        return leaves[key]

    def _phase_backward(self) -> dict:
        leaves = self.leaves()
        self.anchor(leaves)
        graph = self.graph(leaves)
        i = self.v["node"]
        self._claims(("backward", i), leaves)
        cons = recompute.consumers(graph, i, recompute.reached(graph))
        values, grads = {}, {}
        for c in cons:
            for x in [c, *graph[c]["inputs"]]:
                values[x] = self.array(*self._claims_input(("forward", x), leaves))
            grads[c] = self.array(*self._claims_input(("backward", c), leaves))
        out = recompute.gradient(self.engine, graph, i, values, grads, len(graph) - 1)
        self.recomputed = (f"one gradient: node {i} ({graph[i]['op']}) from the VJPs of its "
                           f"consumers {cons}")
        return self._compare(canonical.array_digest(out), f"node {i} ({graph[i]['op']}) "
                                                          "backward")

    def _phase_update(self) -> dict:
        leaves = self.leaves()
        self.anchor(leaves)
        entry = self.v["entry"]
        self._claims(("update", entry), leaves)
        ents = self.state_before()
        params = [int(x) for x in np.asarray(dict(ents)["opt.params"]).reshape(-1)]
        grads = {p: self.array(*self._claims_input(("backward", p), leaves)) for p in params}
        upd, _ = recompute.update(self.engine, ents, grads)
        got = {name: dg for name, _, dg, _ in upd}
        if entry not in got:
            raise Unverifiable(f"the optimizer's update has no entry {entry!r}")
        self.recomputed = f"one optimizer update ({len(params)} parameters)"
        return self._compare(got[entry], f"the update of {entry}")

    def _phase_state(self) -> dict:
        leaves = self.leaves()
        self.anchor(leaves)
        i = self.v["node"]
        self._claims(("forward", i), leaves)
        got = dict(self.state_before()).get(f"param.{i}")
        if got is None:
            raise Unverifiable(f"node {i} is not a parameter of the state before the step")
        self.recomputed = f"a lookup: parameter {i} in the state of record {self.v['step'] - 1}"
        return self._compare(canonical.array_digest(got), f"parameter node {i}")

    def _rerun(self, leaves: dict) -> nodetrace.StepLeaves:
        """Step k re-run by the task from the proved state before it (no drill)."""
        k = self.v["step"]
        task = tasks.make(self.com["spec"])
        s = task.session(self.engine)
        try:
            s.restore(k - 1, self.state_before())
            return nodetrace.trace_next_step(s, self.com["config_id"], self.record(k)["batch"])
        finally:
            s.close()

    def _phase_data(self) -> dict:
        k = self.v["step"]
        if self.v.get("op") == "batch":
            task = tasks.make(self.com["spec"])
            s = task.session(self.engine)
            try:
                got = canonical.entries_digest(s.batch(k))
            finally:
                s.close()
            rec = self.record(k)
            self.v.setdefault("trainer", {})["digest"] = rec["batch"]
            self.recomputed = f"the task's batch of step {k}"
            return self._compare(got, f"step {k}'s batch")
        leaves = self.leaves()
        self.anchor(leaves)
        i = self.v["node"]
        self._claims(("forward", i), leaves)
        mine = self._rerun(leaves)
        self.recomputed = f"step {k}'s forward (the task's constants)"
        return self._compare(mine.leaves[mine.leaf("forward", i)]["digest"],
                             f"constant node {i}")

    def _phase_graph(self) -> dict:
        leaves = self.leaves()
        self.anchor(leaves)
        _, leaf = leaves.get(("graph", None), (None, None))
        if leaf is None or self.v.get("trainer", {}).get("digest") != leaf.get("digest"):
            raise Unverifiable("the verdict's trainer digest is not the proved graph leaf's")
        mine = self._rerun(leaves)
        self.recomputed = f"step {self.v['step']}'s graph (the task's forward)"
        return self._compare(mine.leaves[1]["digest"], "the step's graph")

    def _phase_init(self) -> dict:
        rec = self.record(0)
        self.v.setdefault("trainer", {})["digest"] = rec["state"]
        s = tasks.make(self.com["spec"]).session(self.engine)
        try:
            got = s.digest()
        finally:
            s.close()
        self.recomputed = "the task's initial state"
        return self._compare(got, "the initial state")

    def _phase_record(self) -> dict:
        k = self.v["step"]
        rec = self.record(k)
        ok = well_formed_record(rec, k, self.com["config_id"])
        self.recomputed = f"a check of record {k}"
        return {"ruling": "trainer" if ok else "auditor",
                "reason": f"record {k} is {'' if ok else 'not '}a record of this run"}

    def _phase_trace(self) -> dict:
        k = self.v["step"]
        leaves = self.leaves()
        rec, prev = self.record(k), self.record(k - 1)
        want = {("start", None): {"kind": "start", "step": k, "config": self.com["config_id"],
                                  "state": prev["state"], "batch": rec["batch"]},
                ("end", None): {"kind": "end", "state": rec["state"],
                                "loss_bits": rec["loss_bits"]}}
        bad = [key for key, w in want.items() if key in leaves and leaves[key][1] != w]
        self.recomputed = f"a comparison of the trace's ends with records {k - 1} and {k}"
        if bad:
            return {"ruling": "auditor", "reason": f"the trainer's trace of step {k} contradicts "
                                                   f"its records at its {bad[0][0]} leaf"}
        return {"ruling": "trainer", "reason": f"the trace of step {k}'s proved ends match its "
                                               "records"}

    def _phase_proof(self) -> dict:
        from .proofcheck import check_failure

        self.recomputed = "a check of the failed proof"
        return check_failure(self, self.v.get("failure"))


def referee(path: Any, engine: str = "numpy") -> dict:
    """Rule on verdict ``path`` (see the module docstring)."""
    return Referee(path, engine).run()
