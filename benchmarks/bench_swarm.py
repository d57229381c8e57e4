"""Rung 5's gradient pass: per-example rows of N=10,000 examples (d=16), engine by engine.

One "pass" = every example's loss and gradient at the current parameters (what one full-batch
GD iteration needs before the fixed-order reduction). Engines: the emitted C on a Dask
LocalCluster of 1, 2 and 4 single-threaded worker processes (4 partitions per worker; compile and
data are warmed up by one pass first, then `--passes` passes are timed), the emitted C in this
process (one thread, no Dask), the local tape (one episode per example; timed on the first
`--tape-examples` examples), and numpy's vectorized closed-form full-batch gradient
2/N X^T (Xw + b - y) (not per-example, not bit-defined: the speed ceiling for this problem).

    python benchmarks/bench_swarm.py

prints the table and writes it, with the command and the machine, to benchmarks/results/swarm.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import _paths  # first of ours: puts the repository's packages on sys.path
import numpy as np

ROOT = _paths.ROOT

from gdemos.swarm import SwarmConfig, TapeRows, emit_source, make_data  # noqa: E402
from gdemos.swarm_dask import ClusterRows, local_cluster, partition  # noqa: E402
from gemit import compile_c  # noqa: E402


def _params(cfg: SwarmConfig) -> np.ndarray:
    return np.random.default_rng(1).normal(size=cfg.d + 1)


def bench_dask(cfg: SwarmConfig, workers: int, passes: int) -> float:
    """Examples per second of ClusterRows on a fresh LocalCluster of ``workers`` processes."""
    cluster, client = local_cluster(workers)
    try:
        client.wait_for_workers(workers, timeout=120)
        rows = ClusterRows(client, cfg, partition(cfg.n, 4 * workers))
        p = _params(cfg)
        rows(p)  # warm-up: every worker compiles the source and builds the data once
        t0 = time.perf_counter()
        for _ in range(passes):
            rows(p)
        return cfg.n * passes / (time.perf_counter() - t0)
    finally:
        client.close()
        cluster.close()


def bench_c(cfg: SwarmConfig, passes: int) -> float:
    """Examples per second of the emitted C called in this process (GradFn.batch)."""
    fn = compile_c(emit_source(cfg), "grad", cfg.dtype, cfg.d + 1, cfg.d + 1)
    ex, p = make_data(cfg)[0], _params(cfg)
    fn.batch(p, ex)
    t0 = time.perf_counter()
    for _ in range(passes):
        fn.batch(p, ex)
    return cfg.n * passes / (time.perf_counter() - t0)


def bench_tape(cfg: SwarmConfig, examples: int) -> float:
    """Examples per second of the local tape, one episode per example."""
    tape = TapeRows(cfg)
    ex, p = make_data(cfg)[0][:examples], _params(cfg)
    tape(p, ex[:10])
    t0 = time.perf_counter()
    tape(p, ex)
    rate = examples / (time.perf_counter() - t0)
    tape.close()
    return rate


def bench_numpy(cfg: SwarmConfig, passes: int) -> float:
    """Examples per second of numpy's closed-form full-batch gradient."""
    ex, p = make_data(cfg)[0], _params(cfg)
    X, y = ex[:, :cfg.d], ex[:, cfg.d]
    w, b = p[:cfg.d], p[cfg.d]

    def grad() -> np.ndarray:
        r = X @ w + b - y
        return np.concatenate([2.0 / cfg.n * (X.T @ r), [2.0 / cfg.n * r.sum()]])

    grad()
    t0 = time.perf_counter()
    for _ in range(passes):
        grad()
    return cfg.n * passes / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--tape-examples", type=int, default=2000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    cfg = SwarmConfig()
    rows = []
    for w in args.workers:
        rows.append((f"emitted C on Dask, {w} worker process{'es' if w > 1 else ''}",
                     bench_dask(cfg, w, args.passes)))
    rows.append(("emitted C in-process (one thread, no Dask)", bench_c(cfg, args.passes * 10)))
    rows.append(("local tape (numpy backend), one episode per example",
                 bench_tape(cfg, args.tape_examples)))
    rows.append(("numpy closed-form full-batch gradient (not per-example)",
                 bench_numpy(cfg, args.passes * 100)))
    tape_rate = rows[-2][1]
    table = ["| engine | examples/s | vs local tape |", "|---|---:|---:|"]
    table += [f"| {name} | {rate:,.0f} | {rate / tape_rate:,.1f}x |" for name, rate in rows]
    cmd = "python benchmarks/bench_swarm.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# Rung 5: per-example gradient pass, N=10,000, d=16, float64", "",
        f"Command: `{cmd.strip()}`  ", f"Machine: {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared with other jobs while measured), Python {platform.python_version()}, "
        f"numpy {np.__version__}", "",
        *table, "",
        f"One pass of the emitted C costs {1e3 * cfg.n / rows[len(args.workers)][1]:.2f} ms "
        f"in-process and {1e3 * cfg.n / rows[0][1]:.1f} ms through Dask with one worker: at "
        "this size the cluster's per-task overhead, not the arithmetic, is the cost. "
        "Dask rows include the task round trip and shipping each partition's per-example rows "
        "(N x 17 float64) back to the driver, which reduces them in example order; the cluster "
        "runs on this one machine, so more worker processes than free cores cannot help. The "
        "numpy row computes only the mean gradient, vectorized, with BLAS' summation order: fast, "
        "but not a bit-defined per-example result.", ""])
    out = ROOT / "benchmarks" / "results" / "swarm.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
