"""Single kernels of the exact cpu backend against peers in the same run: matmul, transpose, tanh.

Each case times our cpu backend's op (into a preallocated ``out=``) and the peer doing the same
job: torch.matmul (oneDNN/BLAS with FMA, its own order), numpy's contiguous transpose copy, and
numpy's and torch's tanh. Engines alternate in rounds so that load on a shared machine hits them
alike; we report medians and the ratio ours / peer. Shapes are those of the LoRA rung (128
tokens, hidden 256, MLP 704, vocab 4096) and a square one.

    python benchmarks/bench_cpu_kernels.py [--rounds 7] [--reps 15]

prints the table and writes it, with the command, to benchmarks/results/cpu_kernels.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

import gtensor  # noqa: E402
import numpy as np  # noqa: E402

MATMULS = [(128, 256, 704), (128, 704, 256), (128, 256, 4096), (512, 512, 512)]
TRANSPOSES = [(256, 704), (704, 256), (256, 4096)]
TANH = (1024, 1024)


def _time(fn: Callable[[], object], reps: int) -> float:
    """Median seconds of ``reps`` calls (after one untimed call)."""
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def cases(dtype: str) -> list[tuple[str, Callable, str, Callable]]:
    """(what, ours, peer name, peer) for every case of ``dtype``."""
    import torch

    be = gtensor.backend("cpu")
    rng = np.random.default_rng(0)
    out = []
    for m, k, n in MATMULS:
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        ca, cb = be.asarray(a), be.asarray(b)
        cc = be.matmul(ca, cb)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        tc = torch.matmul(ta, tb)
        out.append((f"matmul {m}x{k}x{n}", lambda ca=ca, cb=cb, cc=cc: be.matmul(ca, cb, out=cc),
                    "torch.matmul", lambda ta=ta, tb=tb, tc=tc: torch.matmul(ta, tb, out=tc)))
    for r, c in TRANSPOSES:
        x = rng.standard_normal((r, c)).astype(dtype)
        cx = be.asarray(x)
        cy = be.transpose(cx)
        out.append((f"transpose {r}x{c}", lambda cx=cx, cy=cy: be.transpose(cx, out=cy),
                    "numpy copy of x.T", lambda x=x: np.ascontiguousarray(x.T)))
    x = rng.standard_normal(TANH).astype(dtype)
    cx = be.asarray(x)
    cy = be.tanh(cx)
    tx = torch.from_numpy(x)
    ty = torch.tanh(tx)
    out.append((f"tanh {TANH[0]}x{TANH[1]}", lambda: be.tanh(cx, out=cy),
                "numpy.tanh", lambda: np.tanh(x)))
    out.append((f"tanh {TANH[0]}x{TANH[1]}", lambda: be.tanh(cx, out=cy),
                "torch.tanh", lambda: torch.tanh(tx, out=ty)))
    return out


def main() -> None:
    """Time every case, print the table and write benchmarks/results/cpu_kernels.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    ap.add_argument("--reps", type=int, default=15, help="timed calls per round (default 15)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cpu_kernels.md")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    lines = ["| dtype | op | ours (us) | peer | peer (us) | ours / peer |",
             "|---|---|---:|---|---:|---:|"]
    for dtype in ("float64", "float32"):
        for what, ours, peer_name, peer in cases(dtype):
            mine, theirs = [], []
            for _ in range(args.rounds):
                mine.append(_time(ours, args.reps))
                theirs.append(_time(peer, args.reps))
            a, b = statistics.median(mine), statistics.median(theirs)
            row = (f"| {dtype} | {what} | {a * 1e6:,.1f} | {peer_name} | {b * 1e6:,.1f} | "
                   f"{a / b:.2f}x |")
            print(row, flush=True)
            lines.append(row)
    table = "\n".join(lines)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    cmd = "python benchmarks/bench_cpu_kernels.py" + (
        f" --rounds {args.rounds}" if args.rounds != 7 else "") + (
        f" --reps {args.reps}" if args.reps != 15 else "")
    text = f"""# Single kernels of the exact cpu backend against peers

Our cpu backend's op (exact: each output in its defined order, no FMA; see
`docs/semantics.md`, "The cpu backend") against a peer doing the same job, in the same run,
engines alternating in {args.rounds} rounds of {args.reps} calls; medians. torch.matmul uses
oneDNN/BLAS with FMA in its own order; numpy's tanh and torch's are libm/SLEEF-style, ours is
the scalar language's (< 1 ulp, bit-identical on every backend).

Command (from the repository root):

```
{cmd}
```

Machine: {platform.machine()}, {os.cpu_count()} CPUs (load average at the end: {load}),
numpy {np.__version__}, torch {torch.__version__} (2 threads); our kernels use
`$GTENSOR_CPU_THREADS` (default: every CPU).

{table}
"""
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
