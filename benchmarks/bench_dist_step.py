"""gdist's training step: Local against DataParallel on 1 and 2 workers, and torch DDP (gloo).

Two models (``dist_models``): the digits MLP 64-1024-10 of ``gdemos dp`` (batch 96 = 4
microbatches of 24, Adam, L2, clipping) and a char GPT of rung 9's size (batch 16 sequences = 4
microbatches of 4, dropout, AdamW with groups, torch's clipping); float64 and float32; cpu
backend, every step captured (``capture=True``), data resident (``load_data``: a step sends 96
or 16 row indices). Engines (``dist_engines``), every process with ONE compute thread
(GTENSOR_CPU_THREADS=1, torch.set_num_threads(1), the BLAS pools at 1): ``Local``;
``DataParallel`` on a LocalCluster with 1 worker and with 2 workers (and, for A/Bs in the same
round robin, 1 worker with the driver asleep for replies, ``reply_wait="sleep"``; 2 workers
with the tree's values on the links' sockets, ``shared_memory=False``; 2 workers on Dask's
comms, ``transport="dask"``); torch in one process;
torch DDP with gloo over 2 processes (each half of every batch). Each run makes every engine
afresh, warms it up, then the engines take turns in blocks of ``--block`` timed steps until
each has ``--steps`` (``_timing``'s scheme: the machine's load hits all of them alike);
``--runs`` runs; we report each engine's median over runs of its per-run median, and the median
(lowest, highest) over runs of the per-run ratios. The gdist engines must end every run on one
sha256 (checked). The load average (``os.getloadavg``) is recorded at each run's start and end.
Then the cost model's terms are measured (``dist_cost``) and its predictions printed, and the
1-worker step is split into replica compute and the rest (where the overhead goes), with a
profile.

    python benchmarks/bench_dist_step.py --runs 3 --steps 30

prints the tables and writes them, with the command and the machine, to
benchmarks/results/dist_step.md.
"""

from __future__ import annotations

import os

os.environ["GTENSOR_CPU_THREADS"] = "1"  # before gtensor is imported: one compute thread
os.environ["OMP_NUM_THREADS"] = "1"
# numpy's and torch's BLAS pools too: left at the core count, their idle threads spin after
# each call and took the cores from the other engines (a 2-worker GPT step 53 -> 42 ms, torch
# DDP's 78 -> 63, with these set; 2026-12-05, the 2-core host)
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import _paths  # noqa: E402  (first of ours: puts the repository's packages on sys.path)
import numpy as np  # noqa: E402

ROOT = _paths.ROOT

import dist_cost  # noqa: E402
import dist_models  # noqa: E402
import gdist  # noqa: E402
import gopt  # noqa: E402
from _machine import cpu_name  # noqa: E402
from _timing import profile  # noqa: E402
from dist_engines import Ours, TorchDDP, TorchOne  # noqa: E402

LOCAL, DP1, DP1S, DP2, DP2T, DP2D, T1, DDP = (
    "Local", "DataParallel, 1 worker", "DataParallel, 1 worker, driver asleep",
    "DataParallel, 2 workers", "DataParallel, 2 workers, values on sockets",
    "DataParallel, 2 workers, Dask's comms", "torch, 1 process", "torch DDP (gloo), 2 processes")
COLUMNS = (LOCAL, DP1, DP1S, DP2, DP2T, DP2D, T1, DDP)
WORKER_ENV = {"GTENSOR_CPU_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}


def trainer(cls, model: str, dtype: str, hidden: int, **kw):
    """A gdist trainer of ``model`` (captured on cpu)."""
    common = dict(backend="cpu", dtype=dtype, capture=True, **kw)
    if model == "mlp":
        init = dist_models.mlp_case(hidden, 1)[1]
        return cls(dist_models.mlp_loss, init, gopt.Adam, {"lr": 3e-2}, microbatch=24,
                   l2={"W1": 1e-4, "W2": 1e-4}, clip=5.0, **common)
    return cls(dist_models.gpt_loss, dist_models.gpt_factory, gopt.AdamW,
               {"lr": 3e-3, "betas": (0.9, 0.95)}, microbatch=4,
               param_groups=dist_models.gpt_groups(), clip=1.0, clip_rule="torch", **common)


def engines(model: str, dtype: str, hidden: int, case, client, torch: bool) -> dict:
    """Every engine of one run, made afresh."""
    ws = sorted(client.nthreads())
    out = {LOCAL: Ours(trainer(gdist.Local, model, dtype, hidden), case),
           DP1: Ours(trainer(gdist.DataParallel, model, dtype, hidden, client=client,
                             workers=ws[:1], check_every=0), case),
           DP1S: Ours(trainer(gdist.DataParallel, model, dtype, hidden, client=client,
                              workers=ws[:1], check_every=0, reply_wait="sleep"), case),
           DP2: Ours(trainer(gdist.DataParallel, model, dtype, hidden, client=client,
                             workers=ws[:2], check_every=0), case),
           DP2T: Ours(trainer(gdist.DataParallel, model, dtype, hidden, client=client,
                              workers=ws[:2], check_every=0, shared_memory=False), case),
           DP2D: Ours(trainer(gdist.DataParallel, model, dtype, hidden, client=client,
                              workers=ws[:2], check_every=0, transport="dask"), case)}
    if torch:
        out[T1] = TorchOne(model, dtype, hidden, case)
        out[DDP] = TorchDDP(model, dtype, hidden, case)
    return out


def one_run(model: str, dtype: str, hidden: int, case, client, args) -> dict:
    """One run: engines made, warmed up, timed in interleaved blocks; medians (ms)."""
    load0 = os.getloadavg()
    es = engines(model, dtype, hidden, case, client, not args.no_torch)
    try:
        for e in es.values():
            e.block(args.warmup)
        times: dict[str, list[int]] = {n: [] for n in es}
        while any(len(t) < args.steps for t in times.values()):
            for n, e in es.items():
                times[n] += e.block(min(args.block, args.steps - len(times[n])))
        digests = {n: e.digest() for n, e in es.items() if isinstance(e, Ours)}
        assert len(set(digests.values())) == 1, f"the gdist engines differ: {digests}"
        split = _split(es[DP1], times[DP1])
    finally:
        for e in es.values():
            e.close()
    return {"ms": {n: statistics.median(t) / 1e6 for n, t in times.items()},
            "load": (load0, os.getloadavg()), "digest": next(iter(digests.values())),
            "split": split}


def _split(e: Ours, times: list[int]) -> dict[str, float]:
    """The 1-worker step's median split (ms): the replica's parts and what is left (the
    request, the reply, process wake-ups: the distributed path's overhead)."""
    parts = [next(iter(r.values())) for r in e.replica[-len(times):]]
    out = {k: statistics.median(p[k] for p in parts) * 1e3 for k in parts[0]}
    out["rest"] = statistics.median(t / 1e6 - sum(p.values()) * 1e3
                                    for t, p in zip(times, parts))
    return out


def ratio(runs: list[dict], a: str, b: str) -> tuple[float, float, float]:
    """Median, lowest and highest over runs of ms[a] / ms[b]."""
    rs = [r["ms"][a] / r["ms"][b] for r in runs if a in r["ms"] and b in r["ms"]]
    return (statistics.median(rs), min(rs), max(rs)) if rs else (float("nan"),) * 3


def fmt(r: tuple[float, float, float], x: bool = True) -> str:
    s = "x" if x else ""
    return f"{r[0]:.2f}{s} ({r[1]:.2f}-{r[2]:.2f})"


def cost_model(client, hidden: int, results: dict) -> tuple[list[str], dict]:
    """The model's terms measured here (through a 2-worker DataParallel of the MLP) and its
    predictions for the char GPT and a 124M-parameter GPT."""
    t = trainer(gdist.DataParallel, "mlp", "float64", hidden, client=client,
                workers=sorted(client.nthreads())[:2], check_every=0)
    try:
        p = sum(v.nbytes for v in t.params.values())
        terms = dist_cost.probe(t._replicas, p)
    finally:
        t.close()
    terms["add"] = dist_cost.add_rate()
    lines = ["| term | measured |", "|---|---:|",
             f"| R_d, driver-worker round trip (empty request) | "
             f"{terms['driver_rtt'] * 1e3:.2f} ms |",
             f"| L, worker-worker latency (half an empty round trip) | "
             f"{terms['latency'] * 1e3:.2f} ms |",
             f"| B, worker-worker throughput ({terms['payload_bytes'] / 2**20:,.0f} MiB "
             "messages, localhost) | "
             f"{terms['bandwidth'] / 1e9:.2f} GB/s |",
             f"| F, addition throughput (numpy, f64) | {terms['add'] / 1e9:.2f} GB/s |"]
    models = {}
    for key, name in (("gpt", "char GPT (rung 9 size), f64"), ("mlp", "mlp 64-1024-10, f64")):
        got = results.get((key, "float64"))
        if not got:
            continue
        split = statistics.median(r["split"]["leaves"] for r in got) / 1e3
        apply = statistics.median(r["split"]["apply"] for r in got) / 1e3
        pbytes = got[0]["pbytes"]
        models[name] = {"p": pbytes, "k": 4, "t_g": split / 4, "t_opt": apply}
        lines.append(f"| {name}: t_g (one microbatch), t_opt | {split / 4 * 1e3:.1f} ms, "
                     f"{apply * 1e3:.1f} ms |")
    if "char GPT (rung 9 size), f64" in models:  # scaled by parameters x tokens (6 N T FLOP)
        g = models["char GPT (rung 9 size), f64"]
        n_small, tok_small = g["p"] / 8, 4 * dist_models.BLOCK
        n, tok = 124e6, 1024  # GPT-2 small: one 1024-token sequence per microbatch
        models["GPT-2 124M, f64, 512 x 1024 tokens"] = {
            "p": n * 8, "k": 512, "t_g": g["t_g"] * (n * tok) / (n_small * tok_small),
            "t_opt": g["t_opt"] * n / n_small}
    return lines + [""] + dist_cost.predictions(terms, models), terms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per engine and run")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--models", default="mlp,gpt")
    ap.add_argument("--dtypes", default="float64,float32")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                    "dist_step.md")
    args = ap.parse_args()
    import distributed

    cases = {"mlp": dist_models.mlp_case(args.hidden, 200)[0],
             "gpt": dist_models.gpt_case(200)}
    results: dict[tuple[str, str], list[dict]] = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=logging.ERROR,
                                  env=WORKER_ENV) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=300)
        for model in args.models.split(","):
            for dtype in args.dtypes.split(","):
                runs = results.setdefault((model, dtype), [])
                for r in range(args.runs):
                    got = one_run(model, dtype, args.hidden, cases[model], client, args)
                    got["pbytes"] = _pbytes(model, dtype, args.hidden)
                    runs.append(got)
                    print(f"{model} {dtype} run {r + 1}: " + ", ".join(
                        f"{n} {ms:.1f} ms" for n, ms in got["ms"].items())
                        + f"; load {got['load'][0][0]:.1f} -> {got['load'][1][0]:.1f}",
                        flush=True)
        cost, terms = cost_model(client, args.hidden, results)
        prof = _profile(client, args.hidden, cases["mlp"])
    write(args, results, cost, prof)


def _pbytes(model: str, dtype: str, hidden: int) -> int:
    """The model's parameter (= gradient) bytes."""
    return sum(v.nbytes for v in trainer(gdist.Local, model, dtype, hidden).params.values())


def _profile(client, hidden: int, case) -> str:
    """cProfile of the driver over 1-worker steps of the MLP (f64)."""
    t = Ours(trainer(gdist.DataParallel, "mlp", "float64", hidden, client=client,
                     workers=sorted(client.nthreads())[:1], check_every=0), case)
    try:
        t.block(5)
        text, _ = profile(lambda: t.block(1), 20)
    finally:
        t.close()
    return text


def write(args, results: dict, cost: list[str], prof: str) -> None:
    """The tables, the command and the machine, to ``args.out`` (and stdout)."""
    import distributed
    import torch

    lines = ["| model | dtype | " + " | ".join(COLUMNS) + " | 1 worker's "
             "overhead (DP1 / Local) | 2 workers' speedup (Local / DP2) | DP2 vs DDP steps/s "
             "(DDP / DP2) | direct links vs Dask's comms (DP2 Dask / DP2) | the driver polling "
             "vs asleep (DP1 asleep / DP1) | shared memory vs sockets (DP2 sockets / DP2) |",
             "|---|---|" + "---:|" * (len(COLUMNS) + 6)]
    per_run = ["| model | dtype | run | " + " | ".join(COLUMNS) +
               " | load avg (start -> end) | sha256 |",
               "|---|---|---:|" + "---:|" * len(COLUMNS) + "---|---|"]
    splits = ["| model | dtype | leaves | adds | wait | apply | rest (request, reply, wake-ups) |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for (model, dtype), runs in results.items():
        med = {n: statistics.median(r["ms"][n] for r in runs) for n in runs[0]["ms"]}
        cells = [f"{med[n]:.1f} ms" if n in med else "-" for n in COLUMNS]
        name = dist_models.mlp_case(args.hidden, 1)[0].name if model == "mlp" else \
            dist_models.gpt_case(1).name
        lines.append(f"| {name} | {dtype} | " + " | ".join(cells) + f" | "
                     f"{fmt(ratio(runs, DP1, LOCAL))} | {fmt(ratio(runs, LOCAL, DP2))} | "
                     f"{fmt(ratio(runs, DDP, DP2)) if DDP in med else '-'} | "
                     f"{fmt(ratio(runs, DP2D, DP2))} | {fmt(ratio(runs, DP1S, DP1))} | "
                     f"{fmt(ratio(runs, DP2T, DP2))} |")
        for i, r in enumerate(runs):
            per_run.append(f"| {name} | {dtype} | {i + 1} | " + " | ".join(
                f"{r['ms'][n]:.1f}" if n in r["ms"] else "-" for n in COLUMNS)
                + f" | {r['load'][0][0]:.2f} -> {r['load'][1][0]:.2f} | {r['digest'][:16]} |")
        sp = {k: statistics.median(r["split"][k] for r in runs) for k in runs[0]["split"]}
        splits.append(f"| {name} | {dtype} | " + " | ".join(
            f"{sp[k]:.2f}" for k in ("leaves", "adds", "wait", "apply", "rest")) + " |")
    cmd = "python benchmarks/bench_dist_step.py " + " ".join(sys.argv[1:])
    text = "\n".join([
        "# gdist: one data-parallel training step, Local vs DataParallel vs torch DDP", "",
        f"Command: `{cmd.strip()}`  ",
        f"Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs shared with other "
        "jobs while "
        f"measured (load averages below), Python {platform.python_version()}, numpy "
        f"{np.__version__}, dask.distributed {distributed.__version__}, torch "
        f"{torch.__version__}; every process one compute thread", "",
        "Step times: each engine's median over runs of its per-run median; ratios: median "
        "(lowest-highest) over runs of the per-run ratio.", "", *lines, "",
        "Per run (ms):", "", *per_run, "",
        "Where a 1-worker step goes (ms, medians): the replica's parts (its microbatches, the "
        "tree's additions, waiting for other replicas, the optimizer step) and the rest:", "",
        *splits, "", "Cost model terms (docs/distributed.md) and predictions:", "", *cost, "",
        "Profile of the driver, 20 one-worker MLP steps (f64):", "", "```text", prof, "```",
        ""])
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
