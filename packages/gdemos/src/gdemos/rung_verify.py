"""Rung 6 (``gdemos verify``): prove a training run, then catch a faked one.

Phase 0: rung 1's autoencoder trains on the ladder's backend (cpu by default) for a few
epochs, writing a gverify run log (a digest of parameters + Adam state per step) and a
checkpoint every K steps. The referee re-runs every K-step segment on the numpy reference,
from scratch and from each checkpoint, in this process: every digest and loss bit equal.

Drills: the same run with one op moved by 1 ulp at step k (``gverify.faults.perturb``; one
forward drill, one backward drill). Phase 1: ``compare_logs`` names step k. Phase 2: both
parties re-run step k from their last checkpoint before it with a per-node trace;
``first_divergence`` names the perturbed node, its op and phase, with its inputs agreeing.
Outputs: a plot of digest agreement per step (and the divergence points), a summary JSON.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import ae, report

EPOCHS = 3  # 30 steps: a few seconds for the run, the referee and both drills
EVERY = 10  # a checkpoint every EVERY steps
DRILLS = (("forward", "matmul", 1, 17), ("backward", "relu", 0, 24))  # phase, op, which, step


@dataclass
class VerifyRun:
    """A finished verify rung: the verdicts, the files written."""

    passed: bool
    referee_equal: bool
    drills: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0
    backend: str = "cpu"
    summary_path: Path | None = None
    plot_path: Path | None = None

    def verdict_detail(self) -> str:
        """One line: the referee's verdict and each drill's."""
        drills = "; ".join(
            f"drill {d['phase']} {d['op']} node {d['node']} @ step {d['step']}: found step "
            f"{d['found_step']}, node {d['found_node']} ({d['found_op']}, {d['found_phase']}, "
            f"{d['max_ulp']} ulp)" for d in self.drills)
        return (f"{self.steps} steps on {self.backend}, re-run by a referee on numpy in "
                f"{-(-self.steps // EVERY)} segments (from scratch and from each checkpoint): "
                f"{'every digest equal' if self.referee_equal else 'DIFFERS'}; {drills}; "
                f"{self.seconds:.1f} s; plot {self.plot_path}")


class _Drill:
    """A probe: one op (the ``which``-th node of ``op``) moved by 1 ulp at ``step`` in
    ``phase``; a per-node trace of step ``trace_at``."""

    def __init__(self, phase: str | None, op: str, which: int, step: int, trace_at: int
                 ) -> None:
        self.phase, self.op, self.which, self.step, self.trace_at = phase, op, which, step, trace_at
        self.node: int | None = None
        self.trace: Any = None

    def forward(self, step: int, tp: Any, loss: Any) -> None:
        if step == self.step and self.phase is not None:
            from gverify import faults

            self.node = [n.index for n in tp.nodes() if n.name == self.op][self.which]
            faults.perturb(tp, self.node, 1, self.phase)

    def backward(self, step: int, tp: Any, loss: Any) -> None:
        if step == self.trace_at:
            from gverify import trace_step

            self.trace = trace_step(tp, loss, meta={"step": step})

    def update(self, step: int, tp: Any, opt: Any) -> None:
        if step == self.trace_at:
            self.trace.add_update(tp, opt)


def replay_runner(checkpoint: Any, steps: int, backend: str, log: Any) -> None:
    """``gverify replay``'s runner for gdemos ae checkpoints: resume on ``backend`` and log
    ``steps`` more steps."""
    from gverify import read_checkpoint

    ck = read_checkpoint(checkpoint)
    cfg = ae.AEConfig(**ck.meta["config"])
    engine = cfg.engine if backend in ("sim", "cuda", "cpu") and cfg.engine == "replay" else "tape"
    cfg = replace(cfg, backend=backend, engine=engine)
    ae.train(cfg, ctl=ae.Control(log=Path(log), resume=ck.path, stop=ck.step + steps))


def run(out: Path, backend: str = "cpu", epochs: int = EPOCHS) -> VerifyRun:
    """The rung: train + log + checkpoints, the referee, the drills, the plot and summary."""
    from gverify import compare_logs, first_divergence, read_log

    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    cfg = ae.AEConfig(backend=backend, epochs=epochs)
    ck = out / "checkpoints"
    log_a = out / "run.jsonl"
    total = ae.train(cfg, ctl=ae.Control(log=log_a, checkpoint_every=EVERY,
                                         checkpoint_dir=ck)).steps
    ref = replace(cfg, backend="numpy")
    mine = {ln["step"]: ln["digest"] for ln in read_log(log_a)[1]}
    referee = []  # per segment: (first step, last step, equal)
    seen: dict[int, str] = {}
    for seg in range(0, total, EVERY):
        resume = None if seg == 0 else ck / f"step-{seg:08d}"
        path = out / f"referee-{seg:04d}.jsonl"
        ae.train(ref, ctl=ae.Control(log=path, resume=resume, stop=seg + EVERY))
        referee.append((seg + 1, min(seg + EVERY, total), compare_logs(log_a, path) is None))
        seen.update({ln["step"]: ln["digest"] for ln in read_log(path)[1]})
    drills = []
    agree = {"referee (numpy)": [float(seen.get(s) == mine[s]) for s in range(1, total + 1)]}
    for phase, op, which, k in DRILLS:
        path = out / f"drill-{phase}.jsonl"
        ae.train(cfg, ctl=ae.Control(log=path, checkpoint_every=EVERY,
                                     checkpoint_dir=out / f"checkpoints-{phase}",
                                     probe=_Drill(phase, op, which, k, -1)))
        step = compare_logs(log_a, path)  # phase 1: the first differing step
        found = step.step if step is not None else None
        # phase 2: each party re-runs the disputed step from its last checkpoint, traced
        base = ((found - 1) // EVERY) * EVERY if found else 0
        traces = []
        for _who, ckdir, probe in (
                ("honest", ck, _Drill(None, op, which, k, found or 0)),
                ("drill", out / f"checkpoints-{phase}", _Drill(phase, op, which, k, found or 0))):
            resume = None if base == 0 else ckdir / f"step-{base:08d}"
            ae.train(cfg, ctl=ae.Control(resume=resume, stop=found, probe=probe))
            traces.append(probe)
        d = first_divergence(traces[0].trace, traces[1].trace) if found else None
        node = traces[1].node
        rows = {ln["step"]: ln["digest"] for ln in read_log(path)[1]}
        agree[f"drill {phase}"] = [float(rows[s] == mine[s]) for s in range(1, total + 1)]
        ok = (found == k and d is not None and d.index == node and d.op == op
              and d.phase == phase and d.inputs_agree)
        drills.append({"phase": phase, "op": op, "node": node, "step": k, "ulps": 1,
                       "found_step": found, "found_node": None if d is None else d.index,
                       "found_op": None if d is None else d.op,
                       "found_phase": None if d is None else d.phase,
                       "max_ulp": None if d is None else d.max_ulp,
                       "count": None if d is None else d.count,
                       "inputs_agree": None if d is None else d.inputs_agree, "located": ok})
    referee_equal = all(eq for _, _, eq in referee)
    passed = referee_equal and all(d["located"] for d in drills)
    seconds = time.perf_counter() - start
    res = VerifyRun(passed, referee_equal, drills, seconds, total, backend)
    res.plot_path = _plot(out / "verify.png", agree, drills, backend)
    summary = {"rung": "verify", "passed": passed, "backend": backend, "steps": total,
               "checkpoint_every": EVERY, "config": asdict(cfg), "referee": {
                   "backend": "numpy", "segments": [
                       {"steps": [a, b], "equal": eq} for a, b, eq in referee]},
               "drills": drills, "seconds": round(seconds, 3), "plot": str(res.plot_path)}
    res.summary_path = report.write_summary(out / "verify_summary.json", summary)
    return res


def _plot(path: Path, agree: dict[str, list[float]], drills: list[dict], backend: str) -> Path:
    def draw(ax: Any) -> None:
        for k, (name, ys) in enumerate(agree.items()):
            steps = range(1, len(ys) + 1)
            ax.step(steps, [y - 0.04 * k for y in ys], where="mid", label=name)
        for d in drills:
            if d["found_step"]:
                ax.axvline(d["found_step"], color="red", linestyle=":", linewidth=1)
                ax.annotate(f"{d['phase']}: node {d['found_node']} ({d['found_op']})",
                            (d["found_step"], 0.5), rotation=90, fontsize=7, color="red")
        ax.set_yticks([0, 1], ["differs", "equal"])
        ax.legend(fontsize=8, loc="center left")

    return report.plot(path, f"rung 6: digest agreement per step with the {backend} run",
                       "step", "digest vs the run", draw)


def add_parser(sub: Any, common: Any) -> None:
    """Add the ``verify`` subcommand to the ``gdemos`` argument parser."""
    a = sub.add_parser("verify", parents=[common],
                       help="rung 6: a run's digests re-checked by a referee on numpy; two "
                            "1-ulp drills located (step, node, op, phase)")
    a.add_argument("--epochs", type=int, default=EPOCHS,
                   help=f"epochs of the autoencoder (10 steps each; default {EPOCHS})")


def main(args: Any) -> int:
    """Run ``gdemos verify``; exit code 0 when the referee agreed and both drills were found."""
    if not 3 <= args.epochs <= 100:
        raise SystemExit(f"gdemos verify: --epochs is {args.epochs}; expected 3 to 100 (the "
                         "drills sit at steps 17 and 24)")
    r = run(args.out / "verify", args.backend, args.epochs)
    print(f"rung 6 verify: {'PASS' if r.passed else 'FAIL'}: {r.verdict_detail()}")
    print(f"  summary: {r.summary_path}")
    return 0 if r.passed else 1
