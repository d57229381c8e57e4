"""The dispute protocol on rung 8's CNN run (880 steps): the messages and bytes a trainer and an
auditor exchange, the auditor's and the referee's time -- against re-running everything.

A trainer records the run on ``--trainer`` (honest, and cheating: the second convolution's
output 1 ulp off at step ``--cheat-step``), serves it on localhost; an auditor on ``--auditor``
audits it (every step re-run, then O(log T) queries), also as a spot check from a checkpoint
and as a lying auditor (a flipped weight bit claimed at ``--lie-step``); a referee on
``--referee`` rules on each verdict by recomputing one op. Prints the table and writes it,
with the command, to benchmarks/results/dispute.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

from gdemos import cnn  # noqa: E402
from gdemos.cnn_task import CNNTask  # noqa: E402
from gverify import commit, faults, server, wire  # noqa: E402
from gverify import verdict as vfile  # noqa: E402
from gverify.audit import audit  # noqa: E402
from gverify.checkpoint import read_checkpoint  # noqa: E402
from gverify.referee import referee  # noqa: E402


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


def main() -> None:
    """Run the disputes, print the table, write benchmarks/results/dispute.md."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=880)
    ap.add_argument("--every", type=int, default=40, help="the trainer's checkpoint interval")
    ap.add_argument("--trainer", default="cpu")
    ap.add_argument("--auditor", default="cpu")
    ap.add_argument("--referee", default="numpy")
    ap.add_argument("--cheat-step", type=int, default=611)
    ap.add_argument("--lie-step", type=int, default=437)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/dispute.md")
    args = ap.parse_args()
    task = CNNTask({"steps": args.steps})
    work = Path(tempfile.mkdtemp(prefix="bench-dispute-"))
    rows: list[str] = []

    # re-running everything: rung 8's own loop (no digests), on the trainer's and the
    # referee's engines (the referee's: the first 40 steps, scaled)
    plain = cnn.train(cnn.CNNConfig(backend=args.trainer, stop=args.steps))
    probe = 40
    ref = cnn.train(cnn.CNNConfig(backend=args.referee, stop=probe))
    ref_all = ref.seconds * args.steps / probe

    t0 = time.perf_counter()
    commit.record_run(work / "honest", task, args.trainer, args.every)
    rec_honest = time.perf_counter() - t0
    cheat = faults.Drill("ulp", args.cheat_step, op="conv2d", which=1, phase="forward")
    commit.record_run(work / "cheat", task, args.trainer, args.every, cheat)
    s = task.session("numpy")  # the committed run is rung 8's run: its final weights' digest
    ck = read_checkpoint(work / "honest" / commit.checkpoint_name(args.steps))
    s.restore(ck.step, ck.entries)
    same = cnn.digest(s.model) == plain.sha256_final
    s.close()
    run_bytes = _size(work / "honest")
    records = (work / "honest" / commit.RECORDS).stat().st_size
    state = len(wire.pack(ck.entries))

    cases = [
        _audit("honest trainer", work / "honest", work, args.auditor, args.referee),
        _audit("cheating trainer", work / "cheat", work, args.auditor, args.referee),
        _audit("spot check (steps 601-640)", work / "cheat", work, args.auditor, args.referee,
               start=600, stop=640),
        _audit("lying auditor", work / "honest", work, args.auditor, args.referee,
               drill=faults.Drill("flip", args.lie_step, bit=30)),
    ]
    trace = commit.RunDir(work / "cheat").trace_at(args.cheat_step)
    trace_bytes = sum(a.nbytes for a in trace.arrays.values())

    rows.append("| dispute | verdict | queries (to the step + to the node) | bytes sent / "
                "received | auditor: re-run + phase 1 + phase 2 = wall | referee "
                "(numpy) | ruling |")
    rows.append("|---|---|---:|---:|---|---|---|")
    for c in cases:
        v, r = c["verdict"], c["ruling"]
        q, b, sec = v["queries"], v["bytes"], v["seconds"]
        p2 = q.get("phase2", 0)
        rows.append(
            f"| {c['name']} | {_where(v)} | {q['total']} ({q.get('phase1', q['total'])} + "
            f"{p2}) | {b['sent']:,} / {b['received']:,} | {sec.get('rerun', 0):.2f} + "
            f"{sec.get('phase1', 0):.3f} + {sec.get('phase2', 0):.2f} = {c['wall']:.2f} s | "
            f"{r['recomputed'] or '-'}: {r['seconds'] * 1e3:.1f} ms | {r['ruling']} |")
    table = "\n".join(rows)
    n, ck_count = args.steps, args.steps // args.every + 1
    base = [
        (f"rung 8's run on `{args.trainer}` (its own loop, no digests)", f"{plain.seconds:.2f} s"),
        (f"the same run on `{args.referee}` (the referee's engine; {probe} steps timed, scaled)",
         f"{ref_all:.1f} s"),
        (f"the trainer's recording (the run, a digest of state and batch every step, "
         f"{ck_count} checkpoints)", f"{rec_honest:.2f} s"),
        ("the committed run is rung 8's run (its final weights' digest is `gdemos cnn`'s "
         "`sha256_final`)", "yes" if same else "NO"),
        ("the run directory (records, checkpoints)", f"{run_bytes:,} bytes"),
        (f"every record ({n + 1} lines: what comparing every step's digest ships)",
         f"{records:,} bytes"),
        ("one state (parameters + Adam moments, one array message)", f"{state:,} bytes"),
        ("every step's state (what re-checking every step from the trainer's states ships)",
         f"{state * n:,} bytes"),
        ("one step's node trace (values, gradients, update: the arrays)",
         f"{trace_bytes:,} bytes"),
        ("every step's node trace (a per-op comparison without the protocol)",
         f"{trace_bytes * n:,} bytes")]
    baseline = "| | |\n|---|---:|\n" + "\n".join(f"| {a} | {b} |" for a, b in base)
    cheated = cases[1]["verdict"]
    text = f"""# The dispute protocol on rung 8's CNN run

A trainer commits to rung 8's CNN run ({args.steps} Adam steps, `gdemos.cnn_task`, checkpoints
every {args.every} steps) on `{args.trainer}`; an auditor on `{args.auditor}` audits it over
HTTP on localhost (`gverify.server` / `gverify.audit`); a referee on `{args.referee}` rules on
each verdict (`gverify.referee`). The cheating trainer's second convolution (node
{cheated.get('node')}) is 1 ulp off at step {args.cheat_step} (`--drill ulp`); the lying auditor
claims a flipped weight bit at step {args.lie_step} of the honest run. docs/verify.md describes
the protocol.

Command (from the repository root):

```
python benchmarks/bench_dispute.py
```

Machine: {platform.machine()}, CPython {platform.python_version()}, {os.cpu_count()} cores,
load average when the run ended {' / '.join(f'{x:.1f}' for x in os.getloadavg())}. **The
machine is shared** (other jobs compile and test on its 2 cores): the seconds are noisy, the
counts of queries and bytes are exact and do not depend on the machine.

{table}

Against re-running everything:

{baseline}

Reading: the honest trainer costs one query. A dispute costs {cheated['queries']['phase1']}
queries to reach the step (⌈log2 {args.steps + 1}⌉ = {(args.steps).bit_length()} levels of the
record tree, the commitment and the proof of records k-1 and k) and
{cheated['queries'].get('phase2', 0)} more to reach the op (the state the step starts from,
the trace root, the levels of the {trace.tree.n}-leaf trace tree, one query proving every leaf
the referee needs, the disputed array); most of its bytes are the state the step starts from.
The auditor's time is the re-run (the spot check re-runs only its 40 steps); the referee
recomputes one convolution or one Adam update in milliseconds instead of re-running the
{args.steps} steps.
"""
    print(table)
    args.out.write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
