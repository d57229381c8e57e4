"""``gdemos swarm``: rung 5's command: train on a Dask cluster (or GPU), verify, report."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gtensor import files

from .report import due, write_summary
from .swarm import History, SwarmConfig, make_data, same_bits, train_local

ENGINES = ("dask", "cuda")


@dataclass
class SwarmRun:
    """A finished rung-5 run: the engine's history, the reference's, and where the report is."""

    cfg: SwarmConfig
    run: History
    reference: History | None
    summary_path: Path
    plot_path: Path
    summary: dict

    @property
    def bitwise(self) -> bool | None:
        """Whether every iteration's parameters equal the local tape run's (None: not checked)."""
        return None if self.reference is None else same_bits(self.run, self.reference)

    @property
    def passed(self) -> bool:
        """Bitwise equal to the local tape run (when checked) and trained to the noise floor."""
        return self.bitwise is not False and self.summary["converged"]

    def verdict_detail(self) -> str:
        """One line: the loss, the verification and the setting."""
        s = self.summary
        check = {True: f"bitwise identical to the local tape run "
                       f"({s.get('reference_backend')})",
                 False: "DIFFERS from the local tape run",
                 None: "not verified (--no-verify)"}[self.bitwise]
        return (f"loss {s['losses'][0]:.4g} -> {s['final_loss']:.4g} in {self.cfg.iterations} "
                f"iterations, N={self.cfg.n} d={self.cfg.d}, {s['engine_desc']}; {check}; "
                f"max |w - w_true| {s['max_param_error']:.3g}")


def _plot(path: Path, run: History, ref: History | None, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    its = np.arange(len(run.losses))
    ax.semilogy(its, run.losses, "o-", label=f"{run.engine} (emitted code)")
    if ref is not None:
        ax.semilogy(its, ref.losses, "x--", label="local tape (reference)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean per-example loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    files.write_atomic(path, lambda f: fig.savefig(f, dpi=110, format="png"))
    plt.close(fig)
    return path


def report(cfg: SwarmConfig, run: History, ref: History | None, out: Path,
           engine_desc: str) -> SwarmRun:
    """Write ``swarm.json`` and ``swarm_loss.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    _, w_true, b_true = make_data(cfg)
    truth = np.concatenate([w_true, [b_true]])
    final = run.final.astype(np.float64)
    noise_floor = cfg.noise ** 2
    summary: dict[str, Any] = {
        "config": cfg.as_dict(), "engine": run.engine, "engine_desc": engine_desc,
        "losses": run.losses, "final_loss": run.losses[-1],
        "noise_floor": noise_floor, "converged": bool(run.losses[-1] < 2 * noise_floor),
        "params": {"w": final[:cfg.d].tolist(), "b": float(final[cfg.d])},
        "true_params": {"w": w_true.tolist(), "b": b_true},
        "max_param_error": float(np.max(np.abs(final - truth))),
        "seconds_per_iteration": run.seconds, "run_extra": _jsonable(run.extra),
        "bitwise_equal_to_local_tape": None if ref is None else same_bits(run, ref),
        "final_params_hex": [float(v).hex() for v in run.final],
    }
    if ref is not None:
        summary["reference_seconds_per_iteration"] = ref.seconds
        summary["reference_backend"] = ref.extra.get("backend", "numpy")
    path = write_summary(out / "swarm.json", summary)
    plot = _plot(out / "swarm_loss.png", run, ref,
                 f"rung 5: linear regression, N={cfg.n}, d={cfg.d}")
    return SwarmRun(cfg, run, ref, path, plot, summary)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    return x


def _printer(name: str, total: int):
    tty = sys.stderr.isatty()

    def progress(it: int, loss: float, seconds: float) -> None:
        if tty or due(it + 1, total):  # off a terminal: every 10th and the last
            print(f"  [{name}] iteration {it + 1:3d}/{total}: loss {loss:.6g} "
                  f"({seconds:.2f} s)", file=sys.stderr, flush=True)

    return progress


def run(cfg: SwarmConfig, out: Path, engine: str = "dask", workers: int = 2,
        scheduler: str | None = None, partitions: int | None = None, verify: bool = True,
        progress: bool = True, backend: str = "numpy") -> SwarmRun:
    """Train with ``engine``, then (``verify``) the same training locally on the tape (on
    ``backend``); write the report."""
    if engine not in ENGINES:
        raise ValueError(f"gdemos swarm: engine {engine!r}; expected one of {ENGINES}")
    show = _printer(engine, cfg.iterations) if progress else None
    if engine == "cuda":
        try:
            import cupy  # noqa: F401

            from .swarm_gpu import train_gpu
        except ImportError as e:
            raise SystemExit(f"gdemos swarm --engine cuda needs cupy and a GPU: {e}") from None
        h, desc = train_gpu(cfg, show), "emit_cuda on the GPU (cupy), one thread per example"
    else:
        h, desc = _run_dask(cfg, workers, scheduler, partitions, show)
    ref = None
    if verify:
        t0 = time.perf_counter()
        ref = train_local(cfg, _printer(f"local tape, {backend}", cfg.iterations)
                          if progress else None, backend)
        ref.extra["seconds"] = time.perf_counter() - t0
        ref.extra["backend"] = backend
    return report(cfg, h, ref, out, desc)


def _run_dask(cfg: SwarmConfig, workers: int, scheduler: str | None, partitions: int | None,
              show) -> tuple[History, str]:
    from .swarm_dask import local_cluster, partition, train_cluster

    if scheduler:
        from distributed import Client

        cluster, client = None, Client(scheduler)
        where = f"the cluster at {scheduler}"
    else:
        cluster, client = local_cluster(workers)
        where = f"a LocalCluster of {workers} worker processes"
    try:
        n_workers = len(client.scheduler_info()["workers"])
        parts = partitions or min(cfg.n, 4 * max(1, n_workers))
        h = train_cluster(cfg, client, partition(cfg.n, parts), show)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return h, f"emitted C on {where} ({parts} partitions)"


def add_parser(sub, common) -> None:
    """Add the ``swarm`` subcommand to the ``gdemos`` argument parser."""
    d = SwarmConfig()
    a = sub.add_parser("swarm", parents=[common],
                       help="rung 5: linear regression whose per-example gradients run as "
                            "emitted C on a Dask cluster, bitwise equal to the local tape run")
    a.add_argument("--n", type=int, default=d.n, help=f"examples (default {d.n})")
    a.add_argument("--d", type=int, default=d.d, help=f"features (default {d.d})")
    a.add_argument("--iterations", type=int, default=d.iterations)
    a.add_argument("--lr", type=float, default=d.lr)
    a.add_argument("--seed", type=int, default=d.seed)
    a.add_argument("--dtype", choices=["float64", "float32"], default=d.dtype)
    a.add_argument("--workers", type=int, default=2,
                   help="worker processes of the LocalCluster the demo starts (default 2)")
    a.add_argument("--scheduler", default=None,
                   help="address of an existing Dask scheduler (its workers need gdemos)")
    a.add_argument("--partitions", type=int, default=None,
                   help="tasks per iteration (default: 4 per worker)")
    a.add_argument("--engine", choices=ENGINES, default="dask",
                   help="dask: emitted C on the cluster; cuda: emit_cuda on this GPU")
    a.add_argument("--no-verify", action="store_true",
                   help="skip the local tape run (the run is then not verified: exit 3)")


def main(args) -> int:
    """Run ``gdemos swarm``; exit 0 verified and converged, 1 failed, 3 not verified."""
    if args.n < 1 or args.d < 1 or args.iterations < 1 or args.workers < 1:
        raise SystemExit("gdemos swarm: --n, --d, --iterations and --workers must be >= 1")
    cfg = SwarmConfig(n=args.n, d=args.d, iterations=args.iterations, lr=args.lr,
                      seed=args.seed, dtype=args.dtype)
    r = run(cfg, args.out, args.engine, args.workers, args.scheduler, args.partitions,
            verify=not args.no_verify, progress=not args.no_progress, backend=args.backend)
    print(f"rung 5 swarm: {r.verdict_detail()}")
    print(f"  summary: {r.summary_path}")
    print(f"  plot:    {r.plot_path}")
    if not r.passed:
        return 1
    return 3 if r.bitwise is None else 0


def ladder_verdict(out: Path, progress: bool,
                   backend: str = "numpy") -> tuple[bool, str, tuple[str, ...]]:
    """The ladder's run (N=2,000, 6 iterations, 2 workers): (passed, detail, unchecked)."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return True, "dask.distributed is not installed (pip install 'gdemos[swarm]')", \
            ("swarm: dask.distributed",)
    r = run(SwarmConfig(n=2_000, iterations=6), out, progress=progress, backend=backend)
    return r.passed, r.verdict_detail(), ()
