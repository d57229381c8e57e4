"""gdist's training step: gdist.Local vs DataParallel on Dask LocalClusters of 1 and 2 workers.

Two models, one definition each (the digits classifier of ``gdemos dp``, relu MLP 64-H-10,
cross-entropy, Adam with L2 and clipping): H=32 (2,410 params) and H=1024 (76,810 params);
batch 96 cut into 4 microbatches of 24; float64; backend ``--backend`` (default cpu). Each
engine takes ``--warmup`` steps, then ``--steps`` timed steps (median). For Dask: single-threaded
worker processes on this machine, microbatches placed round-robin, the tree added on the workers
(default) and, for 2 workers, also on the driver (``tree_on="driver"``). Bytes per step: the
payload the driver sends (params + the batch rows) and the bytes the workers send (Dask's
``transfer_outgoing_bytes_total``: params and partial sums between workers, the root to the
driver). Every engine's final params are checked to have the same sha256 as Local's.

    python benchmarks/bench_dist_step.py

prints the table and writes it, with the command and the machine, to
benchmarks/results/dist_step.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time

import _paths  # first of ours: puts the repository's packages on sys.path
import numpy as np

ROOT = _paths.ROOT

import gdist  # noqa: E402
import gopt  # noqa: E402
from gdemos.dp import DPConfig, digits_loss, load, round_robin  # noqa: E402


def _outgoing(dask_worker) -> int:
    return dask_worker.transfer_outgoing_bytes_total


def bench(t, batches, warmup: int, steps: int, client=None) -> dict:
    """Median step time and bytes per step of the trainer ``t`` over ``batches``."""
    for b in batches[:warmup]:
        t.step(b)
    before = sum(client.run(_outgoing).values()) if client is not None else 0
    times = []
    for b in batches[warmup:warmup + steps]:
        t0 = time.perf_counter()
        t.step(b)
        times.append(time.perf_counter() - t0)
    after = sum(client.run(_outgoing).values()) if client is not None else 0
    return {"step": statistics.median(times), "sent": t.last_step["payload_sent_bytes"],
            "workers_sent": (after - before) / steps, "digest": t.digest(),
            "params": sum(v.size for v in t.params.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--hidden", type=int, nargs="+", default=[32, 1024])
    args = ap.parse_args()
    import distributed

    rows = []
    for hidden in args.hidden:
        cfg = DPConfig(hidden=hidden, backend=args.backend, epochs=2)
        init, batches, _ = load(cfg)
        assert len(batches) >= args.warmup + args.steps, "more steps than batches"
        common = dict(microbatch=cfg.microbatch, backend=cfg.backend, dtype=cfg.dtype,
                      l2={"W1": cfg.l2, "W2": cfg.l2}, clip=cfg.clip)
        res = {"Local (one process, no Dask)": bench(
            gdist.Local(digits_loss, init, gopt.Adam, {"lr": cfg.lr}, **common),
            batches, args.warmup, args.steps)}
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                      dashboard_address=None,
                                      silence_logs=logging.ERROR) as cluster, \
                distributed.Client(cluster) as client:
            for n in (1, 2):
                cluster.scale(n)
                client.wait_for_workers(n, timeout=120)
                for tree_on in ("workers", "driver") if n == 2 else ("workers",):
                    name = (f"Dask, {n} worker{'s' if n > 1 else ''}, tree on the "
                            f"{tree_on}")
                    res[name] = bench(gdist.DataParallel(
                        digits_loss, init, gopt.Adam, {"lr": cfg.lr}, client=client,
                        placement=round_robin, tree_on=tree_on, **common),
                        batches, args.warmup, args.steps, client)
        ref = res["Local (one process, no Dask)"]
        for name, r in res.items():
            assert r["digest"] == ref["digest"], f"{name}: params differ from Local's"
            rows.append((f"64-{hidden}-10 ({r['params']:,} params)", name, r, ref))
    table = ["| model | engine | step (ms) | examples/s | vs Local | driver sends (bytes/step) "
             "| workers send (bytes/step) |", "|---|---|---:|---:|---:|---:|---:|"]
    for model, name, r, ref in rows:
        sent = f"{r['sent']:,}" if name.startswith("Dask") else "-"
        wsent = f"{r['workers_sent']:,.0f}" if name.startswith("Dask") else "-"
        table.append(f"| {model} | {name} | {1e3 * r['step']:.1f} | {96 / r['step']:,.0f} | "
                     f"{ref['step'] / r['step']:.2f}x | {sent} | {wsent} |")
    cmd = "python benchmarks/bench_dist_step.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# gdist: one data-parallel training step (batch 96 = 4 microbatches of 24, float64, "
        f"{args.backend} backend)", "",
        f"Command: `{cmd.strip()}`  ", f"Machine: {platform.machine()}, {os.cpu_count()} CPUs "
        f"(shared with other jobs while measured), Python {platform.python_version()}, "
        f"numpy {np.__version__}, dask.distributed {distributed.__version__}", "",
        *table, "",
        f"Medians of {args.steps} steps after {args.warmup} warm-up steps. Every engine ended on "
        "Local's sha256 (checked). A Dask step is 1 params task + 4 microbatch tasks + 3 tree "
        "tasks (tree on the workers) or 1 + 4 with the 4 results gathered (tree on the driver). "
        "\"driver sends\" is the payload (params and the batch rows); \"workers send\" counts "
        "every byte the workers' transfer layer sent: params to the other worker, partial sums "
        "between workers, the result(s) to the driver. On this machine the cluster's per-task "
        "latency (milliseconds per task round trip, two cores shared by every process) is the "
        "cost, not the arithmetic: see docs/distributed.md for the model of a real cluster.", ""])
    out = ROOT / "benchmarks" / "results" / "dist_step.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
