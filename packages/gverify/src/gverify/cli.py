"""The ``gverify`` command (also ``python -m gverify``).

- ``gverify compare A.jsonl B.jsonl``: exit 0 when every common step's digest and loss bits
  agree, 1 with the first differing step;
- ``gverify locate TRACE_A TRACE_B``: the first differing node as a readable report; exit 0
  when no node differs, 1 when one does;
- ``gverify replay CHECKPOINT --steps N --backend B``: re-run N steps from a checkpoint on
  another engine (the runner the checkpoint names) and compare with the recorded log; exit 0
  equal, 1 differing;
- ``gverify record | serve | audit | referee``: the dispute protocol (``cli_dispute``).

Exit 2: a usage error or input that cannot be judged (a damaged or truncated log, logs of
different runs, traces of different graphs, a damaged checkpoint): never a verdict.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gtensor

from . import cli_dispute
from .checkpoint import read_checkpoint
from .runlog import common_steps, compare_logs
from .steptrace import first_divergence, load_trace, report

EXIT_EQUAL, EXIT_DIFFER, EXIT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gverify", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="the first step at which two run logs differ")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--json", action="store_true", help="print the verdict as one JSON line")
    loc = sub.add_parser("locate", help="the first node at which two step traces differ")
    loc.add_argument("a", type=Path)
    loc.add_argument("b", type=Path)
    loc.add_argument("--json", action="store_true", help="print the verdict as one JSON line")
    r = sub.add_parser("replay", help="re-run steps from a checkpoint and compare with its log")
    r.add_argument("checkpoint", type=Path)
    r.add_argument("--steps", type=int, required=True, help="steps to re-run (>= 1)")
    r.add_argument("--backend", choices=gtensor.BACKENDS, default="numpy",
                   help="the engine the referee runs on (default: numpy, the reference)")
    r.add_argument("--runner", default=None,
                   help="module:function that resumes the program (default: the one the "
                        "checkpoint names)")
    r.add_argument("--log", type=Path, default=None,
                   help="the recorded log to compare with (default: the one the checkpoint "
                        "names)")
    r.add_argument("--out", type=Path, default=None,
                   help="where the referee's log is written (default: a temporary file)")
    cli_dispute.add_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gverify`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "compare":
            return _compare(args.a, args.b, args.json)
        if args.command == "locate":
            return _locate(args)
        if args.command == "replay":
            return _replay(args)
        return cli_dispute.run(args)
    except (ValueError, TypeError, OSError, ImportError, AttributeError) as e:
        print(f"gverify {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR


def _compare(a: Path, b: Path, as_json: bool = False) -> int:
    d = compare_logs(a, b)
    steps = common_steps(a, b)
    if as_json:
        print(json.dumps({"equal": d is None, "steps_compared": len(steps),
                          "first_step": steps[0], "last_step": steps[-1],
                          "divergence": None if d is None else d.__dict__}))
    elif d is None:
        print(f"equal: {len(steps)} common steps ({steps[0]}..{steps[-1]}), every digest and "
              "loss bit identical")
    else:
        print(f"first differing step: {d.step} ({d.what})\n  a: digest {d.digest_a} loss "
              f"{d.loss_bits_a}\n  b: digest {d.digest_b} loss {d.loss_bits_b}")
    return EXIT_EQUAL if d is None else EXIT_DIFFER


def _locate(args: argparse.Namespace) -> int:
    ta, tb = load_trace(args.a), load_trace(args.b)
    d = first_divergence(ta, tb)
    if args.json:
        print(json.dumps({"equal": d is None, "divergence": None if d is None else d.to_dict()}))
    else:
        print(report(d, ta))
    return EXIT_EQUAL if d is None else EXIT_DIFFER


def _replay(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise ValueError(f"--steps is {args.steps}; expected an int >= 1")
    ck = read_checkpoint(args.checkpoint)  # refuses a damaged checkpoint before any work
    name = args.runner or ck.meta.get("runner")
    if not name or ":" not in name:
        raise ValueError(f"{args.checkpoint} names no runner (module:function); pass --runner")
    module, _, func = name.partition(":")
    runner = getattr(importlib.import_module(module), func)
    recorded = args.log
    if recorded is None:
        if "log" not in ck.meta:
            raise ValueError(f"{args.checkpoint} names no recorded log; pass --log")
        recorded = (ck.path / ck.meta["log"]).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "referee.jsonl"
        runner(ck.path, args.steps, args.backend, out)
        print(f"referee: {args.steps} steps from step {ck.step} on {args.backend} "
              f"({name}); log {out if args.out else '(temporary)'}")
        return _compare(Path(recorded), out)
