"""The floor under the AE step at width 1024: what no exact engine on this machine can beat.

For hidden widths (w, w/2, w) it counts the step's multiply-adds (forward, the weight
gradients, the input gradients below the first layer), measures on this machine

* the FMA peak per thread (``_peak.py``'s probe) times the threads the kernels use,
* the exact fma-contract matmul's own rate on the step's matmul shapes (2 threads, the
  backward's shapes included), and
* the copy bandwidth over parameter-sized arrays (the optimizer's passes stream from memory),

and from them the least time of the step's arithmetic (at peak, and at the kernel's rate) and
of Adam's unavoidable traffic (read p, g, m, v; write p, m, v: 7 passes over the parameters).
Beside it, torch eager's and JAX jit's step times measured in the same run (interleaved,
medians) give the lowest ratio an exact engine could reach: the floor, not a forecast.

    python benchmarks/bench_ae_floor.py

writes benchmarks/results/ae_floor.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import _paths  # noqa: F401 - first of ours: puts the repository's packages on sys.path
import gtensor
import numpy as np
from _common import problem
from _peak import peak
from _timing import round_robin
from ae_engines import jax_step, torch_step

ROOT = _paths.ROOT
BATCH = 200


def layer_dims(w: int) -> list[int]:
    """The AE's layer sizes at hidden widths (w, w/2, w)."""
    _, init = problem((w, w // 2, w))
    return [init[0].shape[0]] + [init[i].shape[1] for i in range(0, len(init), 2)]


def matmul_shapes(dims: list[int], batch: int = BATCH) -> list[tuple[int, int, int]]:
    """(m, k, n) of every matmul of one step: forward, the weight gradients and the input
    gradients of every layer but the first (its input is data)."""
    pairs = list(zip(dims[:-1], dims[1:]))
    fwd = [(batch, i, o) for i, o in pairs]
    grad_w = [(i, batch, o) for i, o in pairs]
    grad_x = [(batch, o, i) for i, o in pairs[1:]]
    return fwd + grad_w + grad_x


def kernel_seconds(shapes: list[tuple[int, int, int]], dtype: str, reps: int = 7) -> float:
    """The exact fma matmul's time for all ``shapes`` (median of ``reps`` rounds, wall)."""
    be = gtensor.backend("cpu")
    rng = np.random.default_rng(0)
    ops = [(be.asarray(rng.standard_normal((m, k)).astype(dtype)),
            be.asarray(rng.standard_normal((k, n)).astype(dtype))) for m, k, n in shapes]
    outs = [be.matmul(a, b, inner="fma") for a, b in ops]
    rounds = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for (a, b), out in zip(ops, outs):
            be.matmul(a, b, inner="fma", out=out)
        rounds.append(time.perf_counter() - t0)
    return statistics.median(rounds)


def copy_bandwidth(nbytes: int, reps: int = 9) -> float:
    """Bytes per second moved (read + write) copying an array of ``nbytes`` (median)."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(time.perf_counter() - t0)
    return 2 * a.nbytes / statistics.median(ts)


def floor_row(w: int, dtype: str, threads: int, steps: int, warmup: int) -> dict:
    """The floor's figures at width ``w`` in ``dtype``, and the peers' measured steps."""
    dims = layer_dims(w)
    shapes = matmul_shapes(dims)
    macs = sum(m * k * n for m, k, n in shapes)
    params = sum(i * o + o for i, o in zip(dims[:-1], dims[1:]))
    item = np.dtype(dtype).itemsize
    pk = peak(dtype)["fma"] * threads
    kern = kernel_seconds(shapes, dtype)
    bw = copy_bandwidth(params * item * 4)  # cold-ish: larger than the parameters
    adam = 7 * params * item / bw
    peers = {"torch": torch_step(dtype, (w, w // 2, w)), "jax": None}
    try:
        peers["jax"] = jax_step(dtype, (w, w // 2, w))
    except Exception as err:  # noqa: BLE001 - an engine that cannot run here gets its reason
        peers["jax"] = str(err) or type(err).__name__
    stepfns = {k: v for k, v in peers.items() if callable(v)}
    res = round_robin(stepfns, {k: steps for k in stepfns}, warmup, max(5, steps // 4))
    return {"w": w, "dtype": dtype, "macs": macs, "params": params, "peak": pk,
            "at_peak": macs / pk, "kernel": kern, "adam": adam, "bw": bw,
            "torch": res.get("torch"), "jax": res.get("jax", peers["jax"])}


def report(rows: list[dict], cmd: str, threads: int) -> str:
    """The results file: the figures per width and dtype, and the floor ratios."""
    lines = ["| hidden | dtype | MACs per step | params | FMA peak, "
             f"{threads} threads (GMAC/s) | arithmetic at peak (ms) | exact fma matmuls, "
             "measured (ms) | Adam's 7 passes at the copy bandwidth (ms) | floor: matmuls + "
             "Adam (ms) | torch eager (ms) | floor / torch | JAX jit (ms) | floor / JAX |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        fl = r["kernel"] + r["adam"]
        t = r["torch"][0] / 1e3 if isinstance(r["torch"], tuple) else None
        j = r["jax"][0] / 1e3 if isinstance(r["jax"], tuple) else None
        lines.append(
            f"| {r['w']}, {r['w'] // 2}, {r['w']} | {r['dtype']} | {r['macs'] / 1e6:,.0f} M | "
            f"{r['params']:,} | {r['peak'] / 1e9:.1f} | {1e3 * r['at_peak']:.1f} | "
            f"{1e3 * r['kernel']:.1f} | {1e3 * r['adam']:.1f} ({r['bw'] / 1e9:.0f} GB/s) | "
            f"{1e3 * fl:.1f} | " + (f"{t:.1f} | {1e3 * fl / t:.2f}x" if t else "- | -")
            + " | " + (f"{j:.1f} | {1e3 * fl / j:.2f}x" if j else f"{r['jax']} | -") + " |")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"""# The floor under the AE step: what no exact engine here can beat

Per width: the step's multiply-adds (forward, weight gradients, input gradients of every layer
but the first; batch {BATCH}), the machine's FMA peak (the `_peak.py` probe, per thread, times
{threads} threads), the exact fma-contract matmuls' measured time on exactly the step's matmul
shapes ({threads} threads, wall, median of 7 rounds), and the least memory traffic of the
optimizer (Adam reads p, g, m, v and writes p, m, v: 7 passes over the parameters) at the
copy bandwidth measured over arrays 4x the parameters' size. The floor is the matmuls'
measured time plus Adam's traffic, leaving out every other op (the bias adds, relus, their
gradients, the loss): no step built on this exact matmul kernel is shorter, and with the
arithmetic at the peak column instead (a kernel at 100% of the FMA peak) no exact step at all.
torch eager and JAX jit ran in the same process, interleaved (medians). A target ratio below
"floor / peer" cannot be met here with this kernel; only a matmul closer to the peak column
(or a slower peer run) moves it. Load average at the end: {load}.

Command (from the repository root):

```
{cmd}
```

{chr(10).join(lines)}
"""


def main(argv: list[str] | None = None) -> int:
    """Measure the floor at the given widths and write benchmarks/results/ae_floor.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="1024", help="comma-separated hidden widths")
    ap.add_argument("--steps", type=int, default=40, help="timed peer steps per engine")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/ae_floor.md")
    args = ap.parse_args(argv)
    threads = int(os.environ.get("GTENSOR_CPU_THREADS") or len(os.sched_getaffinity(0)))
    rows = [floor_row(int(w), dt, threads, args.steps, args.warmup)
            for w in args.widths.split(",") for dt in ("float64", "float32")]
    cmd = "python benchmarks/bench_ae_floor.py " + " ".join(argv if argv is not None
                                                           else sys.argv[1:])
    text = report(rows, cmd.strip(), threads)
    print(text)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
