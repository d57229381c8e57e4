"""``gdemos dp``: the digits classifier trained data-parallel by gdist, the same bits anywhere.

One training definition (a relu MLP on sklearn's 8x8 digits, Adam with L2 and clipping,
batches of 96 rows cut into 4 microbatches of 24) runs with ``gdist.Local`` (one process, no Dask)
and with ``gdist.DataParallel`` on LocalClusters of 1, 2 and 3 worker processes (or on a
running cluster, ``--scheduler``): persistent replicas, one per worker, each holding the
training rows (``load_data``: a step sends only 96 row indices), reducing the microbatch
gradients among themselves in the fixed tree and stepping their own optimizer; on a kernel
backend each replica replays its captured step. The oracle is ``Local``: every run must reach
the same parameter digest (sha256 of the params' bytes) with the same loss at every step.
Writes ``OUT/dp.json`` and ``OUT/dp_loss.png`` (the loss curves drawn over each other).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import report

RUNG = "rung 7 dp"
ACCURACY_BAR = 0.9  # held-out accuracy every run must reach (they are the same bits anyway)


@dataclass(frozen=True)
class DPConfig:
    """The training definition (shared by every engine) and the engines to compare."""

    hidden: int = 32
    batch: int = 96
    microbatch: int = 24
    epochs: int = 2
    lr: float = 3e-2
    l2: float = 1e-4
    clip: float = 5.0
    seed: int = 0
    dtype: str = "float64"
    backend: str = "numpy"
    workers: tuple[int, ...] = (1, 2, 3)


def digits_loss(tp: Any, params: dict, batch: dict) -> Any:
    """The model: ``cross_entropy(relu(x W1 + b1) W2 + b2, y)`` on one microbatch."""
    import gtape as g

    h = g.relu(batch["x"] @ params["W1"] + params["b1"])
    return g.cross_entropy(h @ params["W2"] + params["b2"], batch["y"])


@functools.lru_cache(maxsize=4)
def load(cfg: DPConfig) -> tuple[dict, dict, list[np.ndarray], dict]:
    """(init params, the training rows, the batches as row indices into them in order, the
    held-out split) from load_digits (cached: every engine trains on the same arrays; treat
    them as read-only)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(d.target))
    x, y = d.data[order] / 16.0, d.target[order].astype(np.int64)
    n_train = (1440 // cfg.batch) * cfg.batch
    train = {"x": x[:n_train], "y": y[:n_train]}
    test = {"x": x[1440:], "y": y[1440:]}
    batches = []
    for _ in range(cfg.epochs):
        perm = rng.permutation(n_train)
        batches += [perm[lo:lo + cfg.batch] for lo in range(0, n_train, cfg.batch)]
    b1, b2 = 1 / np.sqrt(64), 1 / np.sqrt(cfg.hidden)
    init = {"W1": rng.uniform(-b1, b1, (64, cfg.hidden)), "b1": np.zeros((1, cfg.hidden)),
            "W2": rng.uniform(-b2, b2, (cfg.hidden, 10)), "b2": np.zeros((1, 10))}
    return init, train, batches, test


def accuracy(params: dict, data: dict) -> float:
    """Held-out accuracy of the params (argmax of the logits, numpy)."""
    h = np.maximum(data["x"] @ params["W1"] + params["b1"], 0.0)
    return float(np.mean(np.argmax(h @ params["W2"] + params["b2"], axis=1) == data["y"]))


KERNEL_BACKENDS = ("sim", "cpu", "cuda")  # where each replica replays its captured step


def trainer(cfg: DPConfig, client: Any = None, **kw: Any) -> Any:
    """The definition's trainer: Local when ``client`` is None, else DataParallel."""
    import gdist
    import gopt

    init = load(cfg)[0]
    common = dict(microbatch=cfg.microbatch, backend=cfg.backend, dtype=cfg.dtype,
                  l2={"W1": cfg.l2, "W2": cfg.l2}, clip=cfg.clip,
                  capture=cfg.backend in KERNEL_BACKENDS, **kw)
    if client is None:
        return gdist.Local(digits_loss, init, gopt.Adam, {"lr": cfg.lr}, **common)
    return gdist.DataParallel(digits_loss, init, gopt.Adam, {"lr": cfg.lr}, client=client,
                              **common)


def train(cfg: DPConfig, client: Any = None, progress: Any = None) -> dict:
    """One run of the definition: Local when ``client`` is None, else DataParallel (its
    replicas hold the training rows; each step sends them 96 row indices)."""
    import gdist

    _, rows, batches, test = load(cfg)
    t = trainer(cfg, client)
    before = {} if client is None else client.run(gdist.worker_stats)
    t0 = time.perf_counter()
    t.load_data(rows)
    losses = []
    for i, idx in enumerate(batches):
        losses.append(t.step(idx))
        if progress is not None:
            progress(i + 1, len(batches), losses[-1])
    seconds = time.perf_counter() - t0
    out = {"losses": losses, "digest": t.digest(), "seconds": seconds,
           "accuracy": accuracy(t.params, test), "steps": t.steps,
           "driver_bytes_per_step": t.last_step["payload_sent_bytes"]}
    if client is not None:
        stats = client.run(gdist.worker_stats)
        out["microbatches_per_worker"] = {
            a: s["microbatches"] - before.get(a, {}).get("microbatches", 0)
            for a, s in sorted(stats.items())}
        out["workers"] = t.workers
        t.close()
    return out


def quiet_dask(verbose: bool) -> int:
    """The log level for Dask (ERROR unless ``verbose``), applied to its loggers."""
    level = logging.INFO if verbose else logging.ERROR
    for name in ("distributed", "distributed.scheduler", "distributed.nanny",
                 "distributed.worker", "distributed.core", "distributed.http.proxy"):
        logging.getLogger(name).setLevel(level)
    return level


def run(cfg: DPConfig, out: Path, scheduler: str | None = None, verbose: bool = False,
        progress: bool = True) -> dict:
    """Every engine of ``cfg`` (or the cluster at ``scheduler``), compared; the report."""
    import distributed

    level = quiet_dask(verbose)
    runs: dict[str, dict] = {}

    def one(name: str, client: Any) -> None:
        t0 = time.perf_counter()
        runs[name] = train(cfg, client, _printer(name) if progress else None)
        runs[name]["wall_seconds"] = time.perf_counter() - t0

    one("local", None)
    if scheduler:
        with distributed.Client(scheduler) as client:
            one(f"dask {scheduler}", client)
    else:  # one LocalCluster, scaled to each size in turn (workers start once)
        with distributed.LocalCluster(n_workers=cfg.workers[0], threads_per_worker=1,
                                      processes=True, dashboard_address=None,
                                      silence_logs=level) as cluster, \
                distributed.Client(cluster) as client:
            for n in cfg.workers:
                t0 = time.perf_counter()
                cluster.scale(n)
                client.wait_for_workers(n, timeout=120)
                while len(client.nthreads()) != n:  # scaling down retires workers
                    time.sleep(0.05)
                name = f"dask {n} worker{'s' if n > 1 else ''}"
                one(name, client)
                runs[name]["cluster_ready_seconds"] = time.perf_counter() - t0 - runs[name][
                    "wall_seconds"]
    ref = runs["local"]
    same = all(r["digest"] == ref["digest"] and r["losses"] == ref["losses"]
               for r in runs.values())
    summary = {"config": asdict(cfg), "runs": runs, "all_equal": same,
               "accuracy_bar": ACCURACY_BAR,
               "passed": same and all(r["accuracy"] >= ACCURACY_BAR for r in runs.values())}
    out.mkdir(parents=True, exist_ok=True)
    summary["summary_path"] = str(report.write_summary(out / "dp.json", summary))
    summary["plot_path"] = str(_plot(out / "dp_loss.png", runs, cfg))
    return summary


def _printer(name: str):
    def show(i: int, n: int, loss: float) -> None:
        if i == n or i % 10 == 0:
            print(f"  [{name}] step {i:3d}/{n}: loss {loss:.6g}", flush=True)

    return show


def _plot(path: Path, runs: dict, cfg: DPConfig) -> Path:
    styles = ["-", "--", ":", "-."]

    def draw(ax: Any) -> None:
        for k, (name, r) in enumerate(runs.items()):
            ax.semilogy(range(1, len(r["losses"]) + 1), r["losses"], styles[k % 4],
                        lw=2.4 - 0.5 * k, label=f"{name} ({r['digest'][:12]})")

    return report.plot(path, f"digits MLP 64-{cfg.hidden}-10, batch {cfg.batch}, microbatch "
                       f"{cfg.microbatch}: one curve per engine", "Adam step",
                       "batch cross-entropy", draw)


def verdict_detail(s: dict) -> str:
    """One line: the loss, the engines, the digest check."""
    ref = s["runs"]["local"]
    engines = ", ".join(s["runs"])
    check = "all final digests equal" if s["all_equal"] else "digests DIFFER"
    return (f"CE {ref['losses'][0]:.4g} -> {ref['losses'][-1]:.4g} in {ref['steps']} Adam steps "
            f"(digits, {s['config']['backend']}/{s['config']['dtype']}), held-out accuracy "
            f"{ref['accuracy']:.3f}; {engines}: {check} (sha256 {ref['digest'][:16]}); plot "
            f"{s['plot_path']}")


def add_parser(sub: Any, common: Any) -> None:
    """Add the ``dp`` subcommand to the ``gdemos`` argument parser."""
    d = DPConfig()
    a = sub.add_parser("dp", parents=[common],
                       help="the digits classifier trained by gdist with Local and 1, 2, 3 Dask "
                            "workers: every run the same bits")
    a.add_argument("--workers", default="1,2,3",
                   help="LocalCluster sizes to run, comma-separated (default 1,2,3)")
    a.add_argument("--scheduler", default=None,
                   help="address of a running Dask scheduler to use instead (its workers need "
                        "gdist and gdemos installed)")
    a.add_argument("--epochs", type=int, default=d.epochs)
    a.add_argument("--batch", type=int, default=d.batch)
    a.add_argument("--microbatch", type=int, default=d.microbatch)
    a.add_argument("--hidden", type=int, default=d.hidden)
    a.add_argument("--dtype", choices=["float64", "float32"], default=d.dtype)
    # --verbose (Dask's own logs) is one of the common flags


def main(args: Any) -> int:
    """Run ``gdemos dp``; exit 0 when every run has Local's bits and reaches the bar."""
    try:
        workers = tuple(int(w) for w in args.workers.split(","))
    except ValueError:
        raise SystemExit(f"gdemos dp: --workers {args.workers!r}; expected e.g. 1,2,3") from None
    if not workers or min(workers) < 1 or args.epochs < 1 or args.hidden < 1:
        raise SystemExit("gdemos dp: --workers, --epochs and --hidden must be >= 1")
    if args.microbatch < 1 or args.batch % args.microbatch or args.batch > 1440:
        raise SystemExit(f"gdemos dp: --batch {args.batch} must be a multiple of --microbatch "
                         f"{args.microbatch} and at most 1440")
    cfg = DPConfig(hidden=args.hidden, batch=args.batch, microbatch=args.microbatch,
                   epochs=args.epochs, dtype=args.dtype, backend=args.backend, workers=workers)
    s = run(cfg, args.out, args.scheduler, args.verbose, progress=not args.no_progress)
    print(f"{RUNG}: {verdict_detail(s)}")
    for name, r in s["runs"].items():
        print(f"  {name:16s} sha256 {r['digest']}  {r['seconds']:.2f} s "
              f"({1000 * r['seconds'] / r['steps']:.1f} ms/step)")
    print(f"  summary: {s['summary_path']}")
    print(f"  plot:    {s['plot_path']}")
    return 0 if s["passed"] else 1


def ladder_verdict(out: Path, progress: bool,
                   backend: str = "numpy") -> tuple[bool, str, tuple[str, ...]]:
    """The ladder's run (the defaults): (passed, detail, unchecked)."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return True, "scikit-learn is not installed (its digits data set)", ("dp: sklearn",)
    s = run(DPConfig(backend=backend), out, progress=progress)
    return s["passed"], verdict_detail(s), ()
