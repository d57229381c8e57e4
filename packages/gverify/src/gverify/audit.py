"""The auditor (``gverify audit URL``): re-run a committed training on one's own engine, find
the first step whose record differs in O(log T) queries, and name the step's first differing
node (``audit_step``) -- a verdict a referee can check by recomputing one op.

Phase 1: the commitment names the task and its config; the auditor resolves the task itself
(never code from the trainer), checks that it makes the committed identity, re-runs the
steps (all, or from a checkpoint the trainer proves) and computes its own records. Walking
down the trainer's record tree (``locate.first_difference``) it reaches the first record that
differs; step 0 is a dispute about the initial state ("init"), a record naming another
config is the trainer's own contradiction ("record"), a batch digest that differs is a
dispute about step k's data ("data"); anything else is settled in phase 2 (``audit_step``).

Outcomes: ``agree`` (exit 0), ``dispute`` (exit 1: located, or the trainer failed a proof),
``inconclusive`` (exit 2: the trainer could not be asked or answered malformed messages, the
task is not installed, the commitment names an identity its task does not make).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import canonical, merkle, wire
from . import task as tasks
from .commit import config_id, record
from .faults import Drill
from .locate import HEX, ProofError, RemoteTree, first_difference
from .remote import Remote, TransportError
from .verdict import FORMAT

STEP_KEYS = {"step", "config", "state", "batch", "loss_bits"}


class Inconclusive(Exception):
    """The audit cannot conclude (the message says why)."""


def _is_hex(x: Any) -> bool:
    return isinstance(x, str) and len(x) == 64 and set(x) <= HEX


def well_formed_record(rec: Any, k: int, cid: str) -> bool:
    """Whether ``rec`` is step ``k``'s record of the run ``cid``."""
    return (isinstance(rec, dict) and set(rec) == STEP_KEYS and rec["step"] == k
            and rec["config"] == cid and _is_hex(rec["state"])
            and (rec["batch"] is None if k == 0 else _is_hex(rec["batch"]))
            and (rec["loss_bits"] is None if k == 0 else isinstance(rec["loss_bits"], str)))


def first_entry(a: list[tuple[str, np.ndarray]], b: list[tuple[str, np.ndarray]]) -> str | None:
    """The first entry name at which two lists of named arrays differ (by digest)."""
    da = {n: canonical.array_digest(x) for n, x in a}
    db = {n: canonical.array_digest(x) for n, x in b}
    for n in list(da) + [n for n in db if n not in da]:
        if da.get(n) != db.get(n):
            return n
    return None


class Auditor:
    """One audit of the trainer at ``url`` on ``engine`` (``drill``: a lying auditor)."""

    def __init__(self, url: str, engine: str = "numpy", drill: Drill | None = None,
                 timeout: float = 300.0,
                 progress: Callable[[str, int, int], None] | None = None) -> None:
        self.remote = Remote(url, timeout=timeout)
        self.url, self.engine, self.drill, self.progress = url, engine, drill, progress
        self.blobs: dict[str, bytes] = {}
        self.proofs: dict[str, Any] = {}
        self.evidence: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}
        self.marks: dict[str, int] = {}
        self.step: int | None = None
        self.records: dict[str, dict] = {}  # step -> {"leaf", "path"}: every record proved
        self._states: dict[int, list] = {}
        self.state_blobs: dict[int, str] = {}

    # ------------------------------------------------------------ helpers
    def keep(self, data: bytes) -> str:
        """Keep an evidence blob; its name (SHA-256)."""
        name = canonical.sha256(data)
        self.blobs[name] = data
        return name

    def probe(self) -> Any:
        """A fresh probe of the auditor's own drill (None when honest)."""
        return None if self.drill is None else self.drill.probe()

    def state(self, k: int, rec: dict) -> list[tuple[str, np.ndarray]]:
        """The trainer's state after step ``k``, checked against its (proved) record."""
        if k in self._states:
            return self._states[k]
        limit = 8 * self.param_bytes + (4 << 20)
        data = self.remote.bytes(f"/v1/steps/{k}/state", limit)
        try:
            ents = wire.unpack(data, f"the state after step {k}")
        except wire.WireError as e:
            raise TransportError(str(e)) from None
        name = self.keep(data)
        if canonical.entries_digest(ents) != rec["state"]:
            raise ProofError(f"the state after step {k} the trainer sent does not hash to its "
                             "record's state digest",
                             {"kind": "state", "step": k, "record": rec, "blob": name})
        self._states[k] = ents
        self.state_blobs[k] = name
        return ents

    def restore(self, s: tasks.Session, k: int, ents: list) -> None:
        """Put the trainer's (proved) state after step ``k`` into session ``s``; a state the
        task refuses (another model, another optimizer) makes the audit inconclusive."""
        try:
            s.restore(k, ents)
        except (ValueError, TypeError, KeyError) as e:
            raise Inconclusive(f"the trainer's state after step {k} hashes to its record but "
                               f"does not fit the task ({e})") from None

    # ------------------------------------------------------------ the audit
    def run(self, start: int | None = None, stop: int | None = None) -> dict:
        """Audit steps ``start + 1 .. stop`` (default: all, from step 0); the verdict."""
        t0 = time.perf_counter()
        out: dict[str, Any] = {"format": FORMAT, "url": self.url, "engine": self.engine,
                               "drill": None if self.drill is None else self.drill.to_dict()}
        try:
            out.update(self._audit(start, stop))
        except ProofError as e:
            out.update({"outcome": "dispute", "step": self.step, "phase": "proof",
                        "node": None, "op": None, "detail": str(e), "failure": e.evidence})
        except (TransportError, Inconclusive, tasks.TaskError) as e:
            out.update({"outcome": "inconclusive", "reason": str(e)})
        finally:
            self.remote.close()
        self.seconds["total"] = time.perf_counter() - t0
        out["commitment"] = getattr(self, "commitment", None)
        out["proofs"] = self.proofs
        out["evidence"] = self.evidence
        out["queries"] = {"total": self.remote.queries, **{
            k: v for k, v in self.marks.items()}}
        out["bytes"] = {"sent": self.remote.sent, "received": self.remote.received,
                        "evidence": sum(len(b) for b in self.blobs.values())}
        out["seconds"] = {k: round(v, 4) for k, v in self.seconds.items()}
        return out

    def _commitment(self) -> dict:
        com = self.remote.json("/v1/commitment", limit=1 << 20)
        keys = {"format", "spec", "identity", "config_id", "steps", "leaves", "root"}
        if not isinstance(com, dict) or not keys <= set(com) or not _is_hex(com["root"]) or \
                not _is_hex(com["config_id"]):
            raise TransportError(f"GET /v1/commitment: not a commitment: {str(com)[:200]}")
        return com

    def _audit(self, start: int | None, stop: int | None) -> dict:
        com = self.commitment = self._commitment()
        task = tasks.make(com["spec"])
        s = task.session(self.engine)
        try:
            return self._phase1(com, task, s, start, stop)
        finally:
            s.close()

    def _phase1(self, com: dict, task: tasks.Task, s: tasks.Session, start: int | None,
                stop: int | None) -> dict:
        identity = s.identity()
        cid = config_id(task.spec(), identity)
        if cid != com["config_id"] or identity != com["identity"]:
            raise Inconclusive(f"the commitment's identity {com['identity']} (config id "
                               f"{com['config_id'][:16]}...) is not the one task "
                               f"{task.NAME!r} makes from its config on this install: "
                               f"{identity} ({cid[:16]}...)")
        T = task.steps
        if com["steps"] != T or com["leaves"] != T + 1:
            raise Inconclusive(f"the commitment counts {com['steps']} steps and "
                               f"{com['leaves']} records; its config has {T} steps")
        self.param_bytes = sum(int(np.prod(shape)) for _, shape in identity["params"]) * (
            np.dtype(identity["dtype"]).itemsize)
        b = T if stop is None else stop
        a = 0 if start is None else start + 1
        if not (0 <= a <= b <= T):
            raise ValueError(f"audit: steps {a}..{b} are not within the run's 0..{T}")
        tree = RemoteTree(self.remote, "/v1/steps", bytes.fromhex(com["root"]), T + 1, "steps")
        self.proofs["steps"] = {"root": com["root"], "leaves": T + 1,
                                "transcript": tree.transcript, "records": self.records}
        own: dict[int, dict] = {}
        t0 = time.perf_counter()
        if start is None:
            own[0] = record(0, cid, s.digest(), None, None)
        else:
            got = tree.leaves([start])
            self.records[str(start)] = got[start]
            rec = got[start]["leaf"]
            if not well_formed_record(rec, start, cid):
                raise Inconclusive(f"the trainer's record of step {start} is malformed: {rec}")
            self.restore(s, start, self.state(start, rec))
            self.proofs["start"] = {"step": start, "record": rec}
        probe = self.probe()
        while s.done < b:
            k = s.done + 1
            batch = canonical.entries_digest(s.batch(k))
            bits = s.step(probe)
            own[k] = record(k, cid, s.digest(), batch, bits)
            if self.progress is not None:
                self.progress("re-run", k, b)
        self.seconds["rerun"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        mine = {k: merkle.leaf_hash(canonical.json_bytes(r)) for k, r in own.items()}
        k = first_difference(tree, mine, a, b)
        self.step = k
        result: dict[str, Any] = {"range": [a, b], "steps": T}
        if k is None:
            self.marks["phase1"] = self.remote.queries
            self.seconds["phase1"] = time.perf_counter() - t1
            return {**result, "outcome": "agree",
                    "detail": f"every record of steps {a}..{b} agrees with the commitment "
                              f"(root {com['root'][:16]}...)"}
        ids = [k - 1, k] if k > 0 else [0]
        recs = tree.leaves(ids)
        self.records.update({str(i): v for i, v in recs.items()})
        self.marks["phase1"] = self.remote.queries
        self.seconds["phase1"] = time.perf_counter() - t1
        mine_rec, theirs = own[k], recs[k]["leaf"]
        base = {**result, "outcome": "dispute", "step": k, "node": None, "op": None,
                "entry": None, "auditor": {"record": mine_rec}, "trainer": {"record": theirs}}
        if not well_formed_record(theirs, k, cid):
            return {**base, "phase": "record",
                    "detail": f"the trainer's committed record of step {k} is not a record of "
                              f"this run (config {com['config_id'][:16]}...): {theirs}"}
        if k == 0:
            return {**base, **self._init(own, theirs, s)}
        if theirs["batch"] != mine_rec["batch"]:
            return {**base, **self._data(k, theirs, mine_rec, s)}
        prev = recs[k - 1]["leaf"]
        if not well_formed_record(prev, k - 1, cid):
            return {**base, "step": k - 1, "phase": "record",
                    "detail": f"the trainer's committed record of step {k - 1} is malformed"}
        from .audit_step import StepDispute

        t2 = time.perf_counter()
        found = StepDispute(self, task, cid, k, prev, theirs).run()
        self.seconds["phase2"] = time.perf_counter() - t2
        self.marks["phase2"] = self.remote.queries - self.marks["phase1"]
        return {**base, **found}

    def _init(self, own: dict, theirs: dict, s: tasks.Session) -> dict:
        ents = self.state(0, theirs)
        fresh = s.task.session(self.engine)
        try:
            mine = fresh.entries()
        finally:
            fresh.close()
        entry = first_entry(mine, ents)
        self.evidence["state"] = self.state_blobs[0]
        return {"phase": "init", "entry": entry,
                "node": int(entry.split(".")[1]) if entry and entry.startswith("param.") else None,
                "op": "init", "trainer": {"digest": theirs["state"], "record": theirs},
                "auditor": {"digest": own[0]["state"], "record": own[0]},
                "detail": f"the initial state differs (first at entry {entry}): the config "
                          "defines it, so the referee rebuilds it"}

    def _data(self, k: int, theirs: dict, mine: dict, s: tasks.Session) -> dict:
        data = self.remote.bytes(f"/v1/steps/{k}/batch", max(64 << 20, 8 * self.param_bytes))
        try:
            ents = wire.unpack(data, f"the batch of step {k}")
        except wire.WireError as e:
            raise TransportError(str(e)) from None
        name = self.keep(data)
        if canonical.entries_digest(ents) != theirs["batch"]:
            raise ProofError(f"the batch of step {k} the trainer sent does not hash to its "
                             "record's batch digest",
                             {"kind": "batch", "step": k, "record": theirs, "blob": name})
        entry = first_entry(s.batch(k), ents)
        self.evidence["batch"] = name
        return {"phase": "data", "entry": entry, "op": "batch",
                "trainer": {"digest": theirs["batch"], "record": theirs},
                "auditor": {"digest": mine["batch"], "record": mine},
                "detail": f"step {k}'s batch differs (first at entry {entry}): the config "
                          "defines it, so the referee recomputes it"}


def audit(url: str, engine: str = "numpy", start: int | None = None, stop: int | None = None,
          drill: Drill | None = None, timeout: float = 300.0,
          progress: Callable[[str, int, int], None] | None = None) -> tuple[dict, dict]:
    """Audit the trainer at ``url``: (the verdict, its evidence blobs by SHA-256)."""
    a = Auditor(url, engine, drill, timeout, progress)
    v = a.run(start, stop)
    return v, a.blobs
