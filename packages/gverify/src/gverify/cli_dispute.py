"""The dispute commands of ``gverify``: ``record``, ``serve``, ``audit``, ``referee``.

- ``gverify record RUN_DIR --task example [--set key=value] [--backend B] [--drill ...]``:
  train and write a run directory (commitment, records, checkpoints); drill flags make a
  cheating trainer (``--drill ulp|flip|inconsistent --step K --op OP --phase P ...``);
- ``gverify serve RUN_DIR --host 127.0.0.1 --port N``: the trainer service;
- ``gverify audit URL --engine numpy|cpu|sim [--from-checkpoint K] [--out VERDICT.json]``:
  exit 0 agree, 1 dispute, 2 inconclusive (drill flags make a lying auditor);
- ``gverify referee VERDICT.json --engine numpy``: exit 0 for the trainer, 1 against it,
  2 inconclusive.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import gtensor

from . import audit_step, commit, faults, server
from . import task as tasks
from . import verdict as vfile


def _add_drill(p: argparse.ArgumentParser, who: str) -> None:
    g = p.add_argument_group(f"drill ({who})")
    g.add_argument("--drill", choices=faults.DRILLS, default=None,
                   help="ulp: move one node by --ulps at --step in --phase; flip: flip --bit of "
                        "a parameter after --step's update; inconsistent: ulp, then answer "
                        "the query for --step's record with the honest record")
    g.add_argument("--step", type=int, default=None, help="the step the drill acts at")
    g.add_argument("--op", default=None, help="the op whose --which-th node moves (ulp)")
    g.add_argument("--which", type=int, default=0, help="which node of --op (default 0)")
    g.add_argument("--phase", choices=faults.PHASES, default="forward",
                   help="forward: the node's value; backward: its gradient; update: the "
                        "updated parameter --node (default forward)")
    g.add_argument("--ulps", type=int, default=1, help="ulps to move by (default 1)")
    g.add_argument("--node", type=int, default=None, help="the node (instead of --op)")
    g.add_argument("--bit", type=int, default=0, help="the bit to flip (flip; default 0)")
    g.add_argument("--element", type=int, default=None, help="one flat element only")


def _drill(args: argparse.Namespace) -> faults.Drill | None:
    if args.drill is None:
        return None
    if args.step is None:
        raise ValueError("--drill needs --step (the step it acts at)")
    return faults.Drill(args.drill, args.step, op=args.op, which=args.which, phase=args.phase,
                        ulps=args.ulps, node=args.node, bit=args.bit, element=args.element)


def add_parsers(sub: Any) -> None:
    """Add the four dispute subcommands to ``gverify``'s parser."""
    r = sub.add_parser("record", help="train and commit a run directory (a trainer)")
    r.add_argument("run_dir", type=Path)
    r.add_argument("--task", default="example", help="the task (default: example)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config value of the task (JSON), e.g. --set steps=40")
    r.add_argument("--backend", choices=gtensor.BACKENDS, default="numpy")
    r.add_argument("--checkpoint-every", type=int, default=20, metavar="K")
    _add_drill(r, "a cheating trainer")
    s = sub.add_parser("serve", help="serve a run directory to auditors (the trainer service)")
    s.add_argument("run_dir", type=Path)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    a = sub.add_parser("audit", help="audit a trainer service: the first wrong step and op")
    a.add_argument("url")
    a.add_argument("--engine", choices=gtensor.BACKENDS, default="numpy",
                   help="the engine the auditor re-runs the training on (default numpy)")
    a.add_argument("--from-checkpoint", type=int, default=None, metavar="K",
                   help="spot-check: start from the trainer's state after step K (proved by "
                        "its record) instead of step 0")
    a.add_argument("--to-step", type=int, default=None, metavar="M",
                   help="stop the re-run at step M (default: the last)")
    a.add_argument("--out", type=Path, default=Path("verdict.json"),
                   help="the verdict file (evidence beside it in VERDICT.evidence/)")
    a.add_argument("--timeout", type=float, default=300.0, help="seconds per query")
    a.add_argument("--json", action="store_true", help="print the verdict JSON")
    a.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_drill(a, "a lying auditor")
    f = sub.add_parser("referee", help="rule on a verdict by recomputing the disputed op")
    f.add_argument("verdict", type=Path)
    f.add_argument("--engine", choices=gtensor.BACKENDS, default="numpy")
    f.add_argument("--json", action="store_true", help="print the ruling JSON")


def _config(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _progress(what: str, k: int, n: int) -> None:
    if k == n or k % max(1, n // 10) == 0:
        print(f"  {what}: step {k}/{n}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run one dispute command; its exit code."""
    if args.command == "record":
        task = tasks.find(args.task)(_config(args.set))
        com = commit.record_run(args.run_dir, task, args.backend, args.checkpoint_every,
                                _drill(args), lambda k, n: _progress("record", k, n))
        print(f"recorded {args.run_dir}: task {com['spec']['task']}, {com['steps']} steps on "
              f"{args.backend}, root {com['root']}")
        return 0
    if args.command == "serve":
        server.serve(args.run_dir, args.host, args.port)
        return 0
    if args.command == "audit":
        from .audit import audit

        prog = None if args.quiet else _progress
        v, blobs = audit(args.url, args.engine, args.from_checkpoint, args.to_step,
                         _drill(args), args.timeout, prog)
        vfile.write(args.out, v, blobs)
        print(json.dumps(v, indent=1) if args.json else audit_step.summary(v))
        print(f"verdict: {args.out}", file=sys.stderr)
        return vfile.EXIT[v["outcome"]]
    from .referee import RULING_EXIT, referee

    r = referee(args.verdict, args.engine)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"ruling: {r['ruling']}: {r.get('reason', '')} (recomputed: "
              f"{r['recomputed'] or 'nothing'}; {r['seconds']} s)")
    return RULING_EXIT[r["ruling"]]
