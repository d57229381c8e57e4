"""Rung 6b (``gdemos dispute``): rung 6's two-phase check as a protocol between parties over
HTTP -- a trainer commits to rung 8's CNN run, an auditor who trusts nothing it sent finds the
first wrong step and op in O(log T) queries, a referee rules by recomputing one op.

Three disputes, each trainer served on localhost (``gverify serve``'s server on an
ephemeral port): an honest trainer (the audit agrees in one query); a cheating trainer whose
second convolution's output is 1 ulp off at step ``CHEAT.step`` (the audit names the step, node,
op and phase; the referee, on numpy, recomputes that convolution and rules against the
trainer); and a lying auditor who claims a weight of the honest run went bad at step
``LIE.step`` (the referee recomputes that Adam update and rules for the trainer). The
trainer runs on the ladder's backend, the auditor on numpy (the reference), the referee on
numpy. Outputs: ``dispute_summary.json`` (every verdict, its queries and bytes) and
``dispute.png`` (bytes exchanged per dispute against the run's records and states).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import report

STEPS = 44  # one epoch of rung 8's run (its first 44 of 880 steps)
EVERY = 11  # the trainer's checkpoint interval
CHEAT = {"kind": "ulp", "step": 31, "op": "conv2d", "which": 1, "phase": "forward"}
LIE = {"kind": "flip", "step": 17, "bit": 30}


@dataclass
class DisputeRun:
    """A finished rung: one row per dispute, the files written."""

    passed: bool
    cases: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    backend: str = "cpu"
    steps: int = STEPS
    summary_path: Path | None = None
    plot_path: Path | None = None

    def verdict_detail(self) -> str:
        """One line: each dispute's verdict and ruling, with what it cost."""
        parts = []
        for c in self.cases:
            where = (f"step {c['step']}, node {c['node']} ({c['op']}, {c['phase']})"
                     if c["outcome"] == "dispute" else c["outcome"])
            parts.append(f"{c['name']}: {where}, {c['queries']} queries, "
                         f"{c['bytes']:,} bytes; referee: {c['ruling']}")
        return (f"rung 8's CNN, {self.steps} steps, trainer on {self.backend}, auditor and "
                f"referee on numpy: " + "; ".join(parts) + f"; {self.seconds:.1f} s")


def _case(name: str, run_dir: Path, out: Path, drill: Any, auditor: str) -> dict:
    from gverify import server
    from gverify import verdict as vfile
    from gverify.audit import audit
    from gverify.referee import referee

    with server.Server(run_dir) as srv:
        t0 = time.perf_counter()
        v, blobs = audit(srv.url, auditor, drill=drill, timeout=600.0)
        seconds = time.perf_counter() - t0
    path = vfile.write(out / f"verdict-{name}.json", v, blobs)
    r = referee(path, "numpy")
    return {"name": name, "outcome": v["outcome"], "step": v.get("step"),
            "phase": v.get("phase"), "node": v.get("node"), "op": v.get("op"),
            "entry": v.get("entry"), "max_ulp": v.get("max_ulp"),
            "queries": v["queries"]["total"], "queries_phase1": v["queries"].get("phase1"),
            "bytes": v["bytes"]["sent"] + v["bytes"]["received"],
            "audit_seconds": round(seconds, 3), "ruling": r["ruling"],
            "recomputed": r["recomputed"], "referee_seconds": r["seconds"],
            "verdict": str(path), "reason": v.get("reason")}


def run(out: Path, backend: str = "cpu", auditor: str = "numpy", steps: int = STEPS,
        cheat_step: int = CHEAT["step"], lie_step: int = LIE["step"], every: int = EVERY
        ) -> DisputeRun:
    """Record the honest and the cheating run, the three audits and rulings, the report
    (``steps``, the drills' steps and the checkpoint interval: shorter runs for tests)."""
    from gverify import commit, faults

    from .cnn_task import CNNTask

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    task = CNNTask({"steps": steps})
    cheat = faults.Drill(**{**CHEAT, "step": cheat_step})
    lie = faults.Drill(**{**LIE, "step": lie_step})
    runs = {"honest": out / "run-honest", "cheat": out / "run-cheat"}
    for name, drill in (("honest", None), ("cheat", cheat)):
        shutil.rmtree(runs[name], ignore_errors=True)  # this rung's own directories
        commit.record_run(runs[name], task, backend, every, drill)
    cases = [_case("honest trainer", runs["honest"], out, None, auditor),
             _case("cheating trainer", runs["cheat"], out, None, auditor),
             _case("lying auditor", runs["honest"], out, lie, auditor)]
    conv = _node_of(task, "conv2d", 1)
    honest, cheated, lied = cases
    passed = (honest["outcome"] == "agree" and honest["ruling"] == "trainer"
              and (cheated["step"], cheated["phase"], cheated["node"], cheated["op"]) ==
              (cheat.step, "forward", conv, "conv2d") and cheated["ruling"] == "auditor"
              and (lied["step"], lied["phase"]) == (lie.step, "update")
              and lied["ruling"] == "trainer")
    res = DisputeRun(passed, cases, time.perf_counter() - start, backend, steps)
    full = sum(p.stat().st_size for p in runs["honest"].rglob("*") if p.is_file())
    res.plot_path = _plot(out / "dispute.png", cases, full, steps)
    summary = {"rung": "dispute", "passed": passed, "backend": backend, "auditor": auditor,
               "referee": "numpy", "task": task.spec(), "checkpoint_every": every,
               "cheat": cheat.to_dict(), "lie": lie.to_dict(), "cases": cases,
               "run_dir_bytes": full,
               "seconds": round(res.seconds, 3), "plot": str(res.plot_path)}
    res.summary_path = report.write_summary(out / "dispute_summary.json", summary)
    return res


def _node_of(task: Any, op: str, which: int) -> int:
    """The ``which``-th node of ``op`` in the task's step graph."""
    names: list[str] = []

    class Probe:
        def forward(self, k: int, tp: Any, loss: Any) -> None:
            names.extend(n.name for n in tp.nodes())

    s = task.session("numpy")
    try:
        s.step(Probe())
    finally:
        s.close()
    return [i for i, n in enumerate(names) if n == op][which]


def _plot(path: Path, cases: list[dict], full: int, steps: int) -> Path:
    def draw(ax: Any) -> None:
        names = [c["name"] for c in cases] + ["the run directory"]
        sizes = [c["bytes"] for c in cases] + [full]
        bars = ax.barh(names, sizes, color=["C0", "C3", "C1", "0.6"], label="bytes exchanged "
                       "(the run directory: every record, checkpoint and trace)")
        ax.set_xscale("log")
        for b, c in zip(bars, cases):
            ax.annotate(f"{c['queries']} queries, referee: {c['ruling']}",
                        (b.get_width(), b.get_y() + b.get_height() / 2), fontsize=8,
                        xytext=(4, 0), textcoords="offset points", va="center")

    return report.plot(path, f"rung 6b: bytes exchanged per dispute ({steps} CNN steps)",
                       "bytes (log scale)", "", draw)


def add_parser(sub: Any, common: Any) -> None:
    """Add the ``dispute`` subcommand to the ``gdemos`` argument parser."""
    text = ("rung 6b: a trainer commits to rung 8's CNN run over HTTP; an auditor finds a "
            "1-ulp cheat in O(log T) queries; a referee recomputes one op")
    a = sub.add_parser("dispute", parents=[common], help=text, description=text)
    a.add_argument("--auditor", choices=("numpy", "cpu", "sim"), default="numpy",
                   help="the auditor's engine (default numpy)")


def main(args: Any) -> int:
    """Run ``gdemos dispute``; exit 0 when every verdict and ruling is right."""
    r = run(args.out / "dispute", args.backend, args.auditor)
    print(f"rung 6b dispute: {'PASS' if r.passed else 'FAIL'}: {r.verdict_detail()}")
    for c in r.cases:
        print(f"  {c['name']:17s} {c['outcome']:8s} "
              + (f"step {c['step']} node {c['node']} ({c['op']}, {c['phase']}) "
                 if c["outcome"] == "dispute" else "")
              + f"{c['queries']} queries ({c['queries_phase1']} to the step), "
                f"{c['bytes']:,} bytes; referee ({c['recomputed']}): {c['ruling']}")
    print(f"  summary: {r.summary_path}")
    print(f"  plot:    {r.plot_path}")
    return 0 if r.passed else 1
