"""The cost model of a gdist step, its terms measured on this machine, and what it predicts.

One step on W replicas, k microbatches in contiguous blocks, P the gradient's bytes:

    T(W) = R_d                                the driver's request and the loss back
         + ceil(k / W) * t_g                  the microbatches, W at a time
         + (k / W - 1) * P / F                the additions inside a replica's block
         + ceil(log2 W) * (L + P / B + P / F) the tree's cross-replica levels (one message, one
                                              addition each)
         + ceil(log2 (W / 2)) * (L + P / B)   the root down the binomial tree (the top level's
                                              two replicas both add the root)
         + t_opt                              each replica's optimizer step (in parallel)

R_d: a driver-to-worker round trip; t_g: one microbatch's forward and backward; F: addition
throughput (bytes/s); L: a worker-to-worker message's latency; B: the bandwidth between
workers; t_opt: the optimizer step. Only the compute shrinks with W; the tree adds ~2 log2 W
hops, each a message of P bytes; the driver moves the loss and B row indices, whatever W is.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np


def step_time(w: int, k: int, p: float, t_g: float, t_opt: float, lat: float, bw: float,
              add: float, r_d: float) -> float:
    """T(W) in seconds (see the module docstring)."""
    levels = math.ceil(math.log2(w)) if w > 1 else 0
    down = math.ceil(math.log2(w / 2)) if w > 2 else 0
    per = max(math.ceil(k / w), 1)
    return (r_d + per * t_g + (per - 1) * p / add + levels * (lat + p / bw + p / add)
            + down * (lat + p / bw) + t_opt)


def add_rate(nbytes: int = 8 << 20, reps: int = 20) -> float:
    """Bytes per second of an elementwise float64 add of two arrays into a new one."""
    a, b = np.ones(nbytes // 8), np.ones(nbytes // 8)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.add(a, b)
        ts.append(time.perf_counter() - t0)
    return nbytes / statistics.median(ts)


BANDWIDTH_BYTES = 16 << 20  # the bandwidth probe's smallest payload: far above the RTT's noise


def probe(replicas: Any, nbytes: int, n: int = 40) -> dict[str, float]:
    """Round trips measured the way a step's messages travel (gdist's direct links on a
    tcp:// cluster, ``Replicas.ping``): driver to worker (empty), worker to worker (empty,
    and carrying max(``nbytes``, BANDWIDTH_BYTES)): seconds (medians) and the bandwidth they
    imply (the payload over the difference of the two medians; NaN when the payload's round
    trip is not the longer, a difference the probe cannot resolve)."""
    a, b = replicas.addresses[0], replicas.addresses[-1]
    size = max(nbytes, BANDWIDTH_BYTES)
    r_d = statistics.median(replicas.ping(a, n))
    empty = statistics.median(replicas.ping(a, n, to=b))
    full = statistics.median(replicas.ping(a, max(n // 4, 5), to=b,
                                           payload=np.zeros(size // 8)))
    return {"driver_rtt": r_d, "worker_rtt": empty, "worker_rtt_payload": full,
            "payload_bytes": size,
            "bandwidth": size / (full - empty) if full > empty else float("nan"),
            "latency": empty / 2}


def predictions(terms: dict[str, float], models: dict[str, dict], workers=(8, 64, 512),
                nets=(("10 Gb/s", 1.25e9), ("100 Gb/s", 12.5e9))) -> list[str]:
    """Markdown rows: each model's predicted step time and speedup over one worker, per
    network and worker count (the message latency and the serialization throughput are this
    machine's; the link bandwidth the network's, capped by that throughput)."""
    rows = ["| model | P (MB) | k | t_g | network | " + " | ".join(f"W={w}" for w in workers)
            + " |", "|---|---:|---:|---:|---|" + "---:|" * len(workers)]
    for name, m in models.items():
        for net, bw in nets:
            link = min(bw, terms["bandwidth"])
            one = step_time(1, m["k"], m["p"], m["t_g"], m["t_opt"], terms["latency"], link,
                            terms["add"], terms["driver_rtt"])
            cells = []
            for w in workers:
                t = step_time(w, m["k"], m["p"], m["t_g"], m["t_opt"], terms["latency"], link,
                              terms["add"], terms["driver_rtt"])
                cells.append(f"{_secs(t)} ({one / t:.0f}x)")
            rows.append(f"| {name} | {m['p'] / 1e6:,.1f} | {m['k']} | {_secs(m['t_g'])} | "
                        f"{net} | " + " | ".join(cells) + " |")
    return rows


def _secs(t: float) -> str:
    return f"{t * 1e3:.1f} ms" if t < 1 else (f"{t:.1f} s" if t < 600 else f"{t / 60:.0f} min")
