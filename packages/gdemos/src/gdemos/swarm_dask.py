"""Rung 5 on a Dask cluster: per-example rows from the emitted C, compiled once per worker.

Each iteration submits one task per partition ``[lo, hi)`` of the examples. A task is a pure
function of (emitted source, data key, params, lo, hi): the worker compiles the source on
first use (cached per process by its hash), regenerates the seeded data on first use (cached),
and returns that partition's per-example losses and gradient rows. A worker that dies loses
nothing Dask cannot recompute: its tasks rerun elsewhere and return the same bits. The driver
puts the rows back in example order and hands them to ``swarm.step``: the reduction order is
ours, never Dask's.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .swarm import History, Progress, SwarmConfig, emit_source, make_data, train

_COMPILED: dict[str, Any] = {}  # per worker process: source hash -> gemit.GradFn
_DATA: dict[tuple, np.ndarray] = {}  # per worker process: data key -> examples


def partition(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering [0, n), sizes differing by at most one."""
    if not 1 <= parts <= max(n, 1):
        raise ValueError(f"partition: parts is {parts}; expected 1 <= parts <= n = {n}")
    cuts = [n * k // parts for k in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def check_partition(n: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted; ValueError unless they tile [0, n) exactly (any sizes, any order)."""
    out = sorted((int(lo), int(hi)) for lo, hi in ranges)
    at = 0
    for lo, hi in out:
        if lo != at or hi <= lo:
            raise ValueError(f"partition: ranges {out} do not tile [0, {n}) (gap or overlap "
                             f"at {at})")
        at = hi
    if at != n:
        raise ValueError(f"partition: ranges {out} end at {at}; expected {n}")
    return out


def worker_rows(source: str, cfg: SwarmConfig, params: np.ndarray, lo: int,
                hi: int) -> dict:
    """On a worker: rows [lo, hi) through the emitted C (compiled here once per process)."""
    from gemit import compile_c

    key = hashlib.sha256(source.encode()).hexdigest()
    compiled = key not in _COMPILED
    if compiled:
        work = tempfile.mkdtemp(prefix=f"gdemos-swarm-{os.getpid()}-")
        _COMPILED[key] = compile_c(source, "grad", cfg.dtype, cfg.d + 1, cfg.d + 1, work)
    if cfg.key() not in _DATA:
        _DATA[cfg.key()] = make_data(cfg)[0]
    losses, grads = _COMPILED[key].batch(params, _DATA[cfg.key()][lo:hi])
    return {"lo": lo, "hi": hi, "losses": losses, "grads": grads, "pid": os.getpid(),
            "compiled": compiled}


class ClusterRows:
    """``rows(params)`` computed by tasks on a Dask client, one per partition range."""

    def __init__(self, client: Any, cfg: SwarmConfig, ranges: Sequence[tuple[int, int]],
                 on_submit: Callable[[int, list], None] | None = None) -> None:
        self.client, self.cfg = client, cfg
        self.ranges = check_partition(cfg.n, ranges)
        self.source = emit_source(cfg)
        self.on_submit = on_submit
        self.iteration = 0
        self.compiles: dict[int, int] = {}  # worker pid -> compiles seen
        self.tasks_by_pid: dict[int, int] = {}

    def __call__(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every example's (loss, gradient row), in example order, from the cluster."""
        futures = [self.client.submit(worker_rows, self.source, self.cfg, params, lo, hi,
                                      pure=False, key=f"swarm-{self.iteration}-{lo}-{hi}-"
                                      f"{os.urandom(4).hex()}")
                   for lo, hi in self.ranges]
        if self.on_submit is not None:
            self.on_submit(self.iteration, futures)
        parts = self.client.gather(futures)
        self.iteration += 1
        for p in parts:
            self.tasks_by_pid[p["pid"]] = self.tasks_by_pid.get(p["pid"], 0) + 1
            self.compiles[p["pid"]] = self.compiles.get(p["pid"], 0) + int(p["compiled"])
        parts.sort(key=lambda p: p["lo"])
        losses = np.concatenate([p["losses"] for p in parts])
        grads = np.concatenate([p["grads"] for p in parts], axis=0)
        if losses.shape[0] != self.cfg.n:
            raise RuntimeError(f"ClusterRows: got {losses.shape[0]} rows; expected {self.cfg.n}")
        return losses, grads


def train_cluster(cfg: SwarmConfig, client: Any, ranges: Sequence[tuple[int, int]] | None = None,
                  progress: Progress | None = None,
                  on_submit: Callable[[int, list], None] | None = None) -> History:
    """The training with every iteration's rows from the cluster (default: 4 ranges/worker)."""
    if ranges is None:
        workers = max(1, len(client.scheduler_info()["workers"]))
        ranges = partition(cfg.n, min(cfg.n, 4 * workers))
    rows = ClusterRows(client, cfg, ranges, on_submit)
    h = train(cfg, rows, "dask", progress)
    h.extra = {"partitions": len(rows.ranges), "tasks_by_pid": rows.tasks_by_pid,
               "compiles_by_pid": rows.compiles}
    return h


VERBOSE = {"on": False}  # Dask's own logging: quiet unless ``gdemos --verbose`` (set_verbose)


def set_verbose(on: bool) -> None:
    """Let Dask's own logging through (``--verbose``), or keep it to errors (the default)."""
    import logging

    VERBOSE["on"] = bool(on)
    for name in ("distributed", "dask"):
        logging.getLogger(name).setLevel(logging.INFO if on else logging.ERROR)


def local_cluster(workers: int) -> tuple[Any, Any]:
    """(cluster, client): a LocalCluster of ``workers`` single-threaded worker processes
    (their logs silenced below ERROR unless verbose)."""
    import logging

    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0",
                           silence_logs=logging.INFO if VERBOSE["on"] else logging.ERROR)
    return cluster, Client(cluster)
