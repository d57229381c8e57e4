"""The dispute protocol on rung 8's CNN run (880 steps) and rung 9's GPT run (300 steps): the
messages and bytes a trainer and an auditor exchange, the auditor's and the referee's time --
against re-running everything.

For each task (``--tasks cnn,gpt``) a trainer records the run on ``--trainer`` (honest, and
cheating: one op's output 1 ulp off at a chosen step -- the CNN's second convolution, the GPT's
second attention, qkv_attention), serves it on localhost; an auditor on ``--auditor`` audits it
(every step re-run, then O(log T) queries), also as a spot check from a checkpoint and as a
lying auditor (a flipped weight bit claimed at another step); a referee on ``--referee`` rules
on each verdict by recomputing one op. Prints the tables and writes them, with the command, to
benchmarks/results/dispute.md.

    python benchmarks/bench_dispute.py
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

from gdemos import cnn, gpt  # noqa: E402
from gdemos.cnn_task import CNNTask  # noqa: E402
from gdemos.gpt_task import GPTTask  # noqa: E402
from gverify import commit, faults, server, wire  # noqa: E402
from gverify import verdict as vfile  # noqa: E402
from gverify.audit import audit  # noqa: E402
from gverify.checkpoint import read_checkpoint  # noqa: E402
from gverify.referee import referee  # noqa: E402
from gverify.task import Task  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One task's run: how to make it, which op the cheat moves, where the drills fall, and
    the rung's own loop (seconds, final digest) to compare with."""

    title: str
    steps: int
    every: int
    op: str
    which: int
    what: str  # the cheated op, in words
    cheat_step: int
    lie_step: int
    make: Callable[[int], Task]
    plain: Callable[[str, int], tuple[float, str]]  # (backend, steps) -> (seconds, sha256)
    model_digest: Callable[[object], str]


def _cnn_plain(backend: str, steps: int) -> tuple[float, str]:
    r = cnn.train(cnn.CNNConfig(backend=backend, stop=steps))
    return r.seconds, r.sha256_final


def _gpt_plain(backend: str, steps: int) -> tuple[float, str]:
    r = gpt.train(gpt.GPTRun(backend=backend, engine="tape", stop=steps, eval_every=0))
    return r.seconds, r.sha256_final


CASES = {
    "cnn": Case("rung 8's CNN", 880, 40, "conv2d", 1, "second convolution", 611, 437,
                lambda n: CNNTask({"steps": n}), _cnn_plain, lambda s: cnn.digest(s.model)),
    "gpt": Case("rung 9's GPT", 300, 20, "qkv_attention", 1, "second attention (qkv_attention)",
                211, 137,
                lambda n: GPTTask({"steps": n}), _gpt_plain, lambda s: gpt.digest(s.model)),
}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _audit(name: str, run_dir: Path, work: Path, engine: str, ref_engine: str,
           **kw: object) -> dict:
    with server.Server(run_dir) as srv:
        t0 = time.perf_counter()
        v, blobs = audit(srv.url, engine, timeout=3600.0, **kw)
        wall = time.perf_counter() - t0
    path = vfile.write(work / f"{name}.json", v, blobs)
    r = referee(path, ref_engine)
    return {"name": name, "verdict": v, "wall": wall, "ruling": r}


def _where(v: dict) -> str:
    if v["outcome"] != "dispute":
        return v["outcome"]
    node = f", node {v['node']} ({v['op']})" if v.get("node") is not None else ""
    return f"step {v['step']}, {v['phase']}{node}"


def section(c: Case, args: argparse.Namespace, work: Path) -> str:
    """Run one task's disputes; its markdown section (printed as it goes)."""
    steps = args.steps or c.steps
    every = args.every or c.every
    cheat_step, lie_step = min(c.cheat_step, steps), min(c.lie_step, steps - 1)
    task = c.make(steps)
    work = work / task.NAME
    # re-running everything: the rung's own loop (no digests), on the trainer's and the
    # referee's engines (the referee's: a tenth of the run at most, scaled)
    plain_s, plain_sha = c.plain(args.trainer, steps)
    probe = max(1, min(40, steps // 10))
    ref_all = c.plain(args.referee, probe)[0] * steps / probe

    t0 = time.perf_counter()
    commit.record_run(work / "honest", task, args.trainer, every)
    rec_honest = time.perf_counter() - t0
    cheat = faults.Drill("ulp", cheat_step, op=c.op, which=c.which, phase="forward")
    commit.record_run(work / "cheat", task, args.trainer, every, cheat)
    s = task.session("numpy")  # the committed run is the rung's run: its final weights' digest
    ck = read_checkpoint(work / "honest" / commit.checkpoint_name(steps))
    s.restore(ck.step, ck.entries)
    same = c.model_digest(s) == plain_sha
    s.close()
    run_bytes = _size(work / "honest")
    records = (work / "honest" / commit.RECORDS).stat().st_size
    state = len(wire.pack(ck.entries))
    spot = (cheat_step - 1) // every * every  # the checkpoint before the cheat
    spot_stop = min(steps, spot + every)

    cases = [
        _audit("honest trainer", work / "honest", work, args.auditor, args.referee),
        _audit("cheating trainer", work / "cheat", work, args.auditor, args.referee),
        _audit(f"spot check (steps {spot + 1}-{spot_stop})", work / "cheat", work,
               args.auditor, args.referee, start=spot, stop=spot_stop),
        _audit("lying auditor", work / "honest", work, args.auditor, args.referee,
               drill=faults.Drill("flip", lie_step, bit=30)),
    ]
    trace = commit.RunDir(work / "cheat").trace_at(cheat_step)
    trace_bytes = sum(a.nbytes for a in trace.arrays.values())

    rows = ["| dispute | verdict | queries (to the step + to the node) | bytes sent / "
            "received | auditor: re-run + phase 1 + phase 2 = wall | referee "
            f"({args.referee}) | ruling |", "|---|---|---:|---:|---|---|---|"]
    for case in cases:
        v, r = case["verdict"], case["ruling"]
        q, b, sec = v["queries"], v["bytes"], v["seconds"]
        p2 = q.get("phase2", 0)
        rows.append(
            f"| {case['name']} | {_where(v)} | {q['total']} ({q.get('phase1', q['total'])} + "
            f"{p2}) | {b['sent']:,} / {b['received']:,} | {sec.get('rerun', 0):.2f} + "
            f"{sec.get('phase1', 0):.3f} + {sec.get('phase2', 0):.2f} = {case['wall']:.2f} s"
            f" | {r['recomputed'] or '-'}: {r['seconds'] * 1e3:.1f} ms | {r['ruling']} |")
    table = "\n".join(rows)
    print(table)
    ck_count = steps // every + 1
    base = [
        (f"the rung's run on `{args.trainer}` (its own loop, no digests)", f"{plain_s:.2f} s"),
        (f"the same run on `{args.referee}` (the referee's engine; {probe} steps timed, "
         "scaled)", f"{ref_all:.1f} s"),
        (f"the trainer's recording (the run, a digest of state and batch every step, "
         f"{ck_count} checkpoints)", f"{rec_honest:.2f} s"),
        ("the committed run is the rung's run (its final weights' digest is the rung's "
         "`sha256_final`)", "yes" if same else "NO"),
        ("the run directory (records, checkpoints)", f"{run_bytes:,} bytes"),
        (f"every record ({steps + 1} lines: what comparing every step's digest ships)",
         f"{records:,} bytes"),
        ("one state (parameters + optimizer moments, one array message)", f"{state:,} bytes"),
        ("every step's state (what re-checking every step from the trainer's states ships)",
         f"{state * steps:,} bytes"),
        ("one step's node trace (values, gradients, update: the arrays)",
         f"{trace_bytes:,} bytes"),
        ("every step's node trace (a per-op comparison without the protocol)",
         f"{trace_bytes * steps:,} bytes")]
    baseline = "| | |\n|---|---:|\n" + "\n".join(f"| {a} | {b} |" for a, b in base)
    cheated = cases[1]["verdict"]
    return f"""## {c.title} ({steps} steps, task `{task.NAME}`)

A trainer commits to {c.title}'s run ({steps} steps, `gdemos.{task.NAME}_task`, checkpoints
every {every} steps) on `{args.trainer}`; an auditor on `{args.auditor}` audits it over HTTP on
localhost; a referee on `{args.referee}` rules on each verdict. The cheating trainer's
{c.what} (node {cheated.get('node')}) is 1 ulp off at step {cheat_step} (`--drill ulp`); the
lying auditor claims a flipped weight bit at step {lie_step} of the honest run.

{table}

Against re-running everything:

{baseline}

Reading: the honest trainer costs one query. The dispute costs {cheated['queries']['phase1']}
queries to reach the step (⌈log2 {steps + 1}⌉ = {steps.bit_length()} levels of the record
tree, the commitment and the proof of records k-1 and k) and
{cheated['queries'].get('phase2', 0)} more to reach the op (the state the step starts from,
the trace root, the levels of the {trace.tree.n}-leaf trace tree, one query proving every leaf
the referee needs, the disputed array); most of its bytes are the state the step starts from.
The auditor's time is the re-run (the spot check re-runs only its {spot_stop - spot} steps);
the referee recomputes one op in milliseconds instead of re-running the {steps} steps.
"""


def main() -> None:
    """Run the disputes of every task, print the tables, write benchmarks/results/dispute.md."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="cnn,gpt", help="comma-separated: cnn, gpt")
    ap.add_argument("--steps", type=int, default=0, help="the run's steps (0: the task's)")
    ap.add_argument("--every", type=int, default=0,
                    help="the trainer's checkpoint interval (0: the task's)")
    ap.add_argument("--trainer", default="cpu")
    ap.add_argument("--auditor", default="cpu")
    ap.add_argument("--referee", default="numpy")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/dispute.md")
    args = ap.parse_args()
    names = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in names if t not in CASES]
    if unknown or not names:
        ap.error(f"--tasks {args.tasks!r}: expected some of {sorted(CASES)}")
    work = Path(tempfile.mkdtemp(prefix="bench-dispute-"))
    t0 = time.perf_counter()
    sections = [section(CASES[t], args, work) for t in names]
    wall = time.perf_counter() - t0
    command = "python benchmarks/bench_dispute.py" + "".join(
        f" {a}" for a in sys.argv[1:])
    text = f"""# The dispute protocol on the rungs' runs

docs/verify.md describes the protocol: a trainer serves its committed run directory
(`gverify.server`), an auditor re-runs and bisects over HTTP (`gverify.audit`), a referee
recomputes one op (`gverify.referee`).

Command (from the repository root), {wall / 60:.0f} minutes:

```
{command}
```

Machine: {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores,
load average when the run ended {' / '.join(f'{x:.1f}' for x in os.getloadavg())}. The machine
is shared (other jobs may compile and test on its cores): the seconds are noisy; the counts of
queries and bytes are exact and do not depend on the machine.

""" + "\n".join(sections)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
