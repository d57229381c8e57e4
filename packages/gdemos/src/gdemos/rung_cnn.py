"""Rung 8 (``gdemos cnn``): a LeNet-style CNN trained exactly on sklearn's digits; rung 8b
(``gdemos cnn --model resnet``): a small ResNet (BasicBlocks with BatchNorm, a strided
projection shortcut, global average pooling), its running statistics part of every digest.

The full run trains on ``--backend`` (the tape engine) and must reach its model's accuracy
bar (the default configuration: ``cnn.BARS``, ``cnn.EPOCHS``). The verdict's second half is
bits: the same training with its step captured (ggpu-replay) must end on the same parameter
digest, and the first ``CHECK_STEPS`` steps on every other engine of numpy, cpu and sim must
reach the digest the full run had after that step. Outputs: ``OUT/cnn_summary.json`` and
``OUT/cnn.png`` (rung 8b: ``resnet_summary.json``, ``resnet.png``): loss and test accuracy per
epoch, and the misclassified test digits with their predicted labels.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from gtensor import files

from . import cnn, report

CHECK_STEPS = 20  # the prefix the slower engines re-run (the full run's digest after it)
SHORT_ENGINES = ("numpy", "cpu", "sim")


@dataclass
class CNNRun:
    """A finished rung: the main result, the bit checks, the files written."""

    result: cnn.CNNResult
    checks: list[dict] = field(default_factory=list)
    bar_binds: bool = True
    seconds: float = 0.0
    summary_path: Path | None = None
    plot_path: Path | None = None

    @property
    def bar(self) -> float:
        """The model's accuracy bar."""
        return cnn.BARS[self.result.config.model]

    @property
    def accurate(self) -> bool:
        """The accuracy bar met (or not binding: a shortened or non-default run)."""
        return not self.bar_binds or self.result.test_accuracy >= self.bar

    @property
    def bits_equal(self) -> bool:
        """Every engine check landed on the main run's digest."""
        return all(c["equal"] for c in self.checks)

    @property
    def passed(self) -> bool:
        """The accuracy bar and every bit check."""
        return self.accurate and self.bits_equal

    def verdict_detail(self) -> str:
        """One line: accuracy, digest, the checks."""
        r, cfg = self.result, self.result.config
        bar = (f"bar {self.bar:g} {'ok' if self.accurate else 'MISSED'}"
               if self.bar_binds else "bar not binding (not the default run)")
        checks = ", ".join(f"{c['engine']} ({c['steps']} steps) "
                           f"{'equal' if c['equal'] else 'DIFFERS'}" for c in self.checks
                           ) or "no bit checks run"
        return (f"test accuracy {r.test_accuracy:.4f} ({bar}) after {r.steps} Adam steps, "
                f"{r.seconds:.1f} s on {cfg.backend}/{cfg.dtype}; sha256 "
                f"{r.sha256_final[:16]}; {checks}; {self.seconds:.1f} s in all; plot "
                f"{self.plot_path}")


def replay_backend(backend: str) -> str:
    """Where the captured step runs: the ladder's backend when it runs kernels, else cpu."""
    return backend if backend in ("cpu", "sim", "cuda") else "cpu"


def run(cfg: cnn.CNNConfig, out: Path, progress: bool = True, checks: bool = True,
        replay: str | None = "auto", short: tuple[str, ...] = SHORT_ENGINES) -> CNNRun:
    """Train ``cfg``, run the bit checks, write the summary and the plot.

    Checks (unless ``checks`` is False): the full run replayed on ``replay`` ("auto":
    ``replay_backend(cfg.backend)``; None: no replay) and the first ``CHECK_STEPS`` steps on
    each backend of ``short`` other than ``cfg.backend``.
    """
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    k = min(CHECK_STEPS, cnn.total_steps(cfg), CHECK_STEPS if cfg.stop is None else cfg.stop)
    main = cnn.train(cfg, _bar(progress), digest_at=k)
    done: list[dict] = []
    if checks and replay is not None:
        rb = replay_backend(cfg.backend) if replay == "auto" else replay
        rep = cnn.train(replace(cfg, engine="replay", backend=rb))
        done.append({"engine": f"replay-{rb}", "steps": rep.steps,
                     "sha256": rep.sha256_final, "seconds": round(rep.seconds, 3),
                     "equal": rep.sha256_final == main.sha256_final and
                     rep.losses == main.losses})
    for b in short if checks else ():
        if b == cfg.backend:
            continue
        s = cnn.train(replace(cfg, backend=b, stop=k))
        done.append({"engine": f"tape-{b}", "steps": s.steps, "sha256": s.sha256_final,
                     "seconds": round(s.seconds, 3),
                     "equal": s.sha256_final == main.digests[k] and s.losses == main.losses[:k]})
    binds = cfg.epochs == cnn.EPOCHS[cfg.model] and cfg.dtype == "float64" and cfg.stop is None
    res = CNNRun(main, done, binds)
    name = "cnn" if cfg.model == "lenet" else cfg.model
    res.plot_path = plot(out / f"{name}.png", main, cnn.digits(cfg.seed)[2:])
    res.seconds = time.perf_counter() - start
    summary = {"rung": name, **main.summary(), "accuracy_bar": res.bar,
               "bar_binds": binds, f"sha256_after_{k}_steps": main.digests[k],
               "checks": done, "bits_equal": res.bits_equal, "passed": res.passed,
               "misclassified": misclassified(main, cnn.digits(cfg.seed)[3]),
               "total_seconds": round(res.seconds, 3), "plot": str(res.plot_path)}
    res.summary_path = report.write_summary(out / f"{name}_summary.json", summary)
    return res


def misclassified(r: cnn.CNNResult, labels: np.ndarray) -> list[dict]:
    """The test images the final model gets wrong: index, label, prediction."""
    wrong = np.flatnonzero(r.predictions != labels)
    return [{"index": int(i), "label": int(labels[i]), "predicted": int(r.predictions[i])}
            for i in wrong]


def _bar(progress: bool) -> Any:
    if not progress:
        return None
    if sys.stderr.isatty():
        from tqdm import tqdm

        def make(total: int, epochs: int) -> Any:
            return tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True,
                        desc=f"epoch 0/{epochs}")
        return make
    return lambda total, epochs: report.EpochLog(sys.stderr, epochs, every=5)


def plot(path: Path, r: cnn.CNNResult, test: tuple[np.ndarray, np.ndarray]) -> Path:
    """Loss and test accuracy per epoch (top) and up to 16 misclassified test digits with
    their predicted labels (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = test
    wrong = np.flatnonzero(r.predictions != y)[:16]
    fig = plt.figure(figsize=(9, 6.4), dpi=110)
    top = fig.add_gridspec(2, 1, height_ratios=[1.0, 0.9], hspace=0.35)
    charts = top[0].subgridspec(1, 2, wspace=0.3)
    epochs = range(1, len(r.epoch_loss) + 1)
    ax = fig.add_subplot(charts[0])
    ax.semilogy(epochs, r.epoch_loss, "o-", ms=3)
    ax.set(xlabel="epoch", ylabel="mean minibatch cross-entropy", title="training loss")
    ax.grid(True, which="both", alpha=0.3)
    ax = fig.add_subplot(charts[1])
    ax.plot(epochs, r.epoch_accuracy, "o-", ms=3, color="C2", label="test accuracy")
    bar = cnn.BARS[r.config.model]
    ax.axhline(bar, color="k", ls="--", lw=0.8, label=f"bar {bar:g}")
    ax.set(xlabel="epoch", ylabel="accuracy", title="test accuracy (360 images)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    grid = top[1].subgridspec(2, 8, wspace=0.15, hspace=0.5)
    for j in range(16):
        ax = fig.add_subplot(grid[j // 8, j % 8])
        ax.set_axis_off()
        if j < len(wrong):
            i = wrong[j]
            ax.imshow(x[i, 0], cmap="gray_r", vmin=0.0, vmax=1.0)
            ax.set_title(f"{r.predictions[i]} (is {y[i]})", fontsize=8, color="C3")
    cfg = r.config
    what = "rung 8: LeNet-style CNN" if cfg.model == "lenet" else "rung 8b: ResNet"
    fig.suptitle(f"{what} on digits, {cfg.backend}/{cfg.dtype}: test accuracy "
                 f"{r.test_accuracy:.4f}; {len(np.flatnonzero(r.predictions != y))} "
                 "misclassified (predicted, true label)", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return path


def add_parser(sub: Any, common: Any) -> None:
    """Add the ``cnn`` subcommand to the ``gdemos`` argument parser."""
    d = cnn.CNNConfig()
    a = sub.add_parser("cnn", parents=[common],
                       help="rung 8: a LeNet-style CNN on sklearn's digits to 97%% test "
                            "accuracy; the same parameter bits on numpy, cpu, sim and replay")
    a.add_argument("--model", choices=cnn.MODELS, default=d.model,
                   help="lenet (rung 8, bar 0.97) or resnet (rung 8b: BasicBlocks with "
                        "BatchNorm, bar 0.98)")
    a.add_argument("--epochs", type=int, default=None,
                   help=f"passes over the 1,437 training images (1 to 1000; default "
                        f"{cnn.EPOCHS}; the accuracy bar binds the default)")
    a.add_argument("--seed", type=int, default=d.seed,
                   help=f"seed of the split, the initial weights, the batch order and dropout "
                        f"(default {d.seed})")
    a.add_argument("--dtype", choices=["float64", "float32"], default=d.dtype,
                   help=f"the tape's dtype (default {d.dtype})")
    a.add_argument("--no-checks", action="store_true",
                   help="skip the bit checks (replay and the other engines)")


def main(args: Any) -> int:
    """Run ``gdemos cnn``; exit 0 when the bar (where it binds) and every bit check hold."""
    if args.epochs is None:
        args.epochs = cnn.EPOCHS[args.model]
    if not 1 <= args.epochs <= 1000:
        raise SystemExit(f"gdemos cnn: --epochs is {args.epochs}; expected 1 to 1000")
    if args.seed < 0:
        raise SystemExit(f"gdemos cnn: --seed is {args.seed}; expected an int >= 0")
    cfg = cnn.CNNConfig(backend=args.backend, dtype=args.dtype, seed=args.seed,
                        epochs=args.epochs, model=args.model)
    name = "cnn" if args.model == "lenet" else args.model
    r = run(cfg, args.out / name, progress=not args.no_progress, checks=not args.no_checks)
    rung = cnn.RUNG if args.model == "lenet" else cnn.RESNET_RUNG
    print(f"{rung}: {'PASS' if r.passed else 'FAIL'}: {r.verdict_detail()}")
    print(f"  sha256 initial {r.result.sha256_initial}")
    print(f"  sha256 final   {r.result.sha256_final}")
    for c in r.checks:
        print(f"  {c['engine']:12s} {c['steps']:4d} steps  {c['seconds']:6.2f} s  "
              f"{'equal' if c['equal'] else 'DIFFERS'}  {c['sha256'][:16]}")
    print(f"  summary: {r.summary_path}")
    print(f"  plot:    {r.plot_path}")
    return 0 if r.passed else 1


def ladder_verdict(out: Path, progress: bool, backend: str, model: str = "lenet"
                   ) -> tuple[bool, str, tuple[str, ...]]:
    """The ladder's run (the defaults of ``model`` on ``backend``): (passed, detail,
    unchecked)."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return True, "scikit-learn is not installed (its digits data set)", ("cnn: sklearn",)
    cfg = cnn.CNNConfig(backend=backend, model=model, epochs=cnn.EPOCHS[model])
    r = run(cfg, out, progress=progress)
    return r.passed, r.verdict_detail(), ()
