"""A trainer's commitment: the run directory ``gverify record`` writes and ``gverify serve``
answers from.

Layout of a run directory:

- ``commitment.json``: what the trainer publishes -- the task spec (name and config), the
  run's identity (dtype, inner-product contract, the tape's seed, optimizer and its
  hyperparameters, parameters), the config identity ``config_id`` (SHA-256 of the spec and
  identity's canonical JSON), the step count T and the Merkle root over the step records;
- ``records.jsonl``: T + 1 step records, one canonical JSON line each: ``step`` (0: the
  initial state), ``config`` (the config identity), ``state`` (the digest of parameters and
  optimizer state after the step), ``batch`` (the digest of the step's batch; None at 0) and
  ``loss_bits`` (None at 0);
- ``checkpoints/step-<k>``: gverify checkpoints every K steps (and at 0 and T), from which the
  trainer regenerates any state, batch and node trace it is asked for;
- ``trainer.json``: the trainer's own notes (its engine, the checkpoint interval, a drill):
  never served;
- ``traces/``: node traces computed on demand (a cache).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtensor import describe, files

from . import canonical, merkle, nodetrace
from . import task as tasks
from .checkpoint import read_checkpoint, save_checkpoint
from .faults import Drill
from .runlog import read_log

FORMAT = "gverify-commitment-v1"
COMMITMENT, RECORDS, TRAINER = "commitment.json", "records.jsonl", "trainer.json"


class RunDirError(ValueError):
    """A run directory that cannot be served: missing or damaged files, a path outside it."""


def config_id(spec: dict, identity: dict) -> str:
    """The config identity: SHA-256 of the canonical JSON of the task spec and run identity."""
    return canonical.sha256(canonical.json_bytes({"spec": spec, "identity": identity}))


def record(step: int, config: str, state: str, batch: str | None, loss_bits: str | None
           ) -> dict:
    """One step record (a Merkle leaf: its canonical JSON)."""
    return {"step": step, "config": config, "state": state, "batch": batch,
            "loss_bits": loss_bits}


def leaf_bytes(obj: dict) -> bytes:
    """A record's or trace leaf's leaf bytes (canonical JSON)."""
    return canonical.json_bytes(obj)


def commitment(task: tasks.Task, identity: dict, root: str) -> dict:
    """The published commitment of a run of ``task``."""
    spec = task.spec()
    return {"format": FORMAT, "spec": spec, "identity": identity,
            "config_id": config_id(spec, identity), "steps": task.steps,
            "leaves": task.steps + 1, "root": root}


def runlog_root(path: Any) -> tuple[str, int]:
    """A commitment to a run logged with ``RunLog`` (a tape's or a captured program's): the
    Merkle root over its header and step lines (each as canonical JSON), and the leaf count."""
    header, lines = read_log(path)
    tree = merkle.Tree([canonical.json_bytes(x) for x in [header, *lines]])
    return tree.root.hex(), tree.n


def checkpoint_name(k: int) -> str:
    """The checkpoint directory of step ``k`` (relative to the run directory)."""
    return f"checkpoints/step-{k:08d}"


def record_run(run_dir: Any, task: tasks.Task, backend: str = "numpy", checkpoint_every: int = 20,
               drill: Drill | None = None, progress: Callable[[int, int], None] | None = None
               ) -> dict:
    """Train ``task`` on ``backend`` (with ``drill``, a cheating trainer, if given), writing
    the run directory; returns the commitment."""
    where = "record_run"
    d = Path(run_dir)
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or \
            checkpoint_every < 1:
        raise ValueError(f"{where}: checkpoint_every is {describe(checkpoint_every)}; "
                         "expected an int >= 1")
    if drill is not None and drill.step > task.steps:
        raise ValueError(f"{where}: the drill's step {drill.step} is past the run's "
                         f"{task.steps} steps")
    if d.exists() and any(d.iterdir()):
        raise FileExistsError(f"{where}: {d} exists and is not empty; expected a new directory")
    d.mkdir(parents=True, exist_ok=True)
    s = task.session(backend)
    try:
        identity = s.identity()
        cid = config_id(task.spec(), identity)
        recs = [record(0, cid, s.digest(), None, None)]
        save_checkpoint(d / checkpoint_name(0), s.tp, s.opt, 0)
        probe = drill.probe() if drill is not None else None
        for k in range(1, task.steps + 1):
            batch = canonical.entries_digest(s.batch(k))
            bits = s.step(probe)
            recs.append(record(k, cid, s.digest(), batch, bits))
            if k % checkpoint_every == 0 or k == task.steps:
                save_checkpoint(d / checkpoint_name(k), s.tp, s.opt, k)
            if progress is not None:
                progress(k, task.steps)
    finally:
        s.close()
    tree = merkle.Tree([leaf_bytes(r) for r in recs])
    files.write_atomic(d / RECORDS, lambda f: f.write(b"".join(leaf_bytes(r) + b"\n"
                                                               for r in recs)))
    notes = {"backend": backend, "checkpoint_every": checkpoint_every,
             "drill": None if drill is None else drill.to_dict()}
    files.write_atomic(d / TRAINER, lambda f: f.write(json.dumps(notes, indent=1).encode()))
    com = commitment(task, identity, tree.root.hex())
    files.write_atomic(d / COMMITMENT, lambda f: f.write(json.dumps(com, indent=1).encode()))
    return com


def confined(root: Path, rel: str) -> Path:
    """``root / rel`` resolved, refused (RunDirError) when it leaves ``root`` (``..``, an
    absolute path, a symbolic link pointing out)."""
    base = root.resolve()
    p = (base / rel).resolve()
    if not p.is_relative_to(base):
        raise RunDirError(f"{rel!r} resolves to {p}, outside the run directory {base}; refused")
    return p


class RunDir:
    """A recorded run, read and checked: the trainer's side of the protocol.

    ``state_at(k)``, ``batch_at(k)``, ``trace_at(k)`` regenerate what the trainer is asked for
    from its nearest checkpoint with its own engine and drill (every file read through
    ``confined``). Not thread-safe: the server calls it from one worker thread.
    """

    def __init__(self, path: Any) -> None:
        self.root = Path(path)
        if not self.root.is_dir():
            raise RunDirError(f"RunDir: {self.root} is not a directory")
        self.commitment = self._json(COMMITMENT)
        c = self.commitment
        if not isinstance(c, dict) or c.get("format") != FORMAT:
            raise RunDirError(f"RunDir: {self.root / COMMITMENT} is not a {FORMAT} file")
        notes = self._json(TRAINER)
        try:
            self.backend = notes["backend"]
            self.checkpoint_every = int(notes["checkpoint_every"])
            self.drill = None if notes.get("drill") is None else Drill.from_dict(notes["drill"])
            self.task = tasks.make(c["spec"])
        except (tasks.TaskError, KeyError, TypeError, ValueError) as e:
            raise RunDirError(f"RunDir: {self.root}: {COMMITMENT} or {TRAINER} is damaged "
                              f"({type(e).__name__}: {e})") from None
        text = self._bytes(RECORDS)
        lines = text.split(b"\n")
        if lines[-1] != b"" or len(lines) < 2:
            raise RunDirError(f"RunDir: {self.root / RECORDS} is empty or truncated (no final "
                              "newline)")
        try:
            self.records = [json.loads(x) for x in lines[:-1]]
        except ValueError as e:
            raise RunDirError(f"RunDir: {self.root / RECORDS} is damaged ({e})") from None
        self.tree = merkle.Tree(lines[:-1])
        if len(self.records) != c["leaves"] or self.tree.root.hex() != c["root"]:
            raise RunDirError(f"RunDir: {self.root / RECORDS} does not match the commitment's "
                              f"root and {c['leaves']} leaves")
        if [leaf_bytes(r) for r in self.records] != lines[:-1]:
            raise RunDirError(f"RunDir: {self.root / RECORDS} is not canonical JSON")
        self._session: tasks.Session | None = None
        self._traces: dict[int, nodetrace.StepLeaves] = {}

    def _path(self, rel: str) -> Path:
        return confined(self.root, rel)

    def _bytes(self, rel: str) -> bytes:
        try:
            return self._path(rel).read_bytes()
        except FileNotFoundError:
            raise RunDirError(f"RunDir: {self.root} has no {rel}; expected a run directory "
                              "written by gverify record") from None
        except OSError as e:
            raise RunDirError(f"RunDir: cannot read {self.root / rel} ({e})") from None

    def _json(self, rel: str) -> Any:
        try:
            return json.loads(self._bytes(rel))
        except ValueError as e:
            raise RunDirError(f"RunDir: {self.root / rel} is damaged ({e})") from None

    @property
    def steps(self) -> int:
        """T."""
        return self.task.steps

    def _probe(self) -> Any:
        return None if self.drill is None else self.drill.probe()

    def session_at(self, k: int) -> tasks.Session:
        """A session holding the state after step ``k`` (the live one when it is on the way,
        else one from the nearest checkpoint), run with the trainer's drill."""
        c = min(k // self.checkpoint_every * self.checkpoint_every, self.steps)
        s = self._session
        if s is None or s.done > k or s.done < c:
            if s is not None:
                s.close()
            s = self._session = self.task.session(self.backend)
            ck = read_checkpoint(self._path(checkpoint_name(c)))
            s.restore(ck.step, ck.entries)
        probe = self._probe()
        while s.done < k:
            s.step(probe)
        return s

    def state_at(self, k: int) -> list:
        """The state after step ``k`` (named host arrays; digest = record k's state)."""
        s = self.session_at(k)
        ents = s.entries()
        if canonical.entries_digest(ents) != self.records[k]["state"]:
            print(f"gverify serve: warning: the regenerated state of step {k} does not match "
                  "its record (an engine that is not deterministic?)", file=sys.stderr)
        return ents

    def batch_at(self, k: int) -> list:
        """Step ``k``'s batch (named host arrays)."""
        s = self._session or self.session_at(0)
        return s.batch(k)

    def trace_at(self, k: int) -> nodetrace.StepLeaves:
        """Step ``k``'s node trace (cached in ``traces/``)."""
        if k in self._traces:
            return self._traces[k]
        path = self._path(f"traces/step-{k:08d}.npz")
        if path.exists():
            t = nodetrace.StepLeaves.load(path)
        else:
            s = self.session_at(k - 1)
            t = nodetrace.trace_next_step(s, self.commitment["config_id"],
                                          self.records[k]["batch"], self._probe())
            path.parent.mkdir(parents=True, exist_ok=True)
            t.save(path)
        self._traces = {k: t}  # one kept: a dispute is about one step
        return t

    def honest_record(self, k: int) -> dict:
        """Step ``k``'s record computed without the drill (what the ``inconsistent`` drill
        answers with)."""
        s = self.session_at(k - 1)
        bits = s.step(None)
        rec = record(k, self.commitment["config_id"], s.digest(), self.records[k]["batch"], bits)
        self._session = None
        s.close()
        return rec

    def close(self) -> None:
        """Release the live session."""
        if self._session is not None:
            self._session.close()
            self._session = None
