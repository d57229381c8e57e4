"""Single kernels of the exact cpu backend against peers in the same run: matmul, transpose, tanh.

Each case times our cpu backend's op (into a preallocated ``out=``) and the peer doing the same
job: torch.matmul (oneDNN/BLAS with FMA, its own order), numpy's contiguous transpose copy, and
numpy's and torch's tanh. Engines alternate in rounds so that load on a shared machine hits them
alike; we report medians and the ratio ours / peer. Shapes are those of the LoRA rung (128
tokens, hidden 256, MLP 704, vocab 4096) and a square one.

    python benchmarks/bench_cpu_kernels.py [--rounds 7] [--reps 15]

prints the table and writes it, with the command, to benchmarks/results/cpu_kernels.md.

    python benchmarks/bench_cpu_kernels.py --peak [--rounds 7] [--reps 15]

times the matmul under both inner-product contracts (``inner="plain"``: a multiply and an add
per term; ``inner="fma"``: one fused multiply-add) on ONE thread, in GMAC/s, against the
machine's measured peak per thread (``_peak.py``: a probe of the FMA and of the mul+add rate),
and writes benchmarks/results/cpu_matmul_peak.md.

    python benchmarks/bench_cpu_kernels.py --conv [--rounds 5] [--reps 3] [--batch 8]

times the exact conv2d forward and both gradients against the exact matmul of the same
multiply-adds (the forward's product: (O, C*KH*KW) @ (C*KH*KW, N*OH*OW)), same contract and
dtype, on ONE thread, in GMAC/s of CPU time, the four interleaved in every round (medians over
rounds), at ResNet-like shapes; writes benchmarks/results/cpu_conv.md with `uptime`.
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
from _machine import cpu_name  # noqa: E402

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


def _times(fn: Callable[[], object], reps: int) -> list[tuple[float, float]]:
    """(thread CPU seconds, wall seconds) of ``reps`` calls (after one untimed call). On one
    thread the kernel runs on the caller's, so its CPU time leaves out the time the shared
    host's other processes held the core (they still share its caches and SMT sibling)."""
    fn()
    ts = []
    for _ in range(reps):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        ts.append((time.thread_time() - c0, time.perf_counter() - t0))
    return ts


def peak_table(rounds: int, reps: int) -> tuple[list[str], dict]:
    """Rows of matmul GMAC/s per thread, both contracts, as fractions of the probed peak."""
    from _peak import peak

    os.environ["GTENSOR_CPU_THREADS"] = "1"  # read at every launch
    be = gtensor.backend("cpu")
    lines = ["| dtype | matmul m x k x n | contract | GMAC/s median | GMAC/s best | "
             "GMAC/s wall median | peak (GMAC/s/thread) | median / peak | best / peak |",
             "|---|---|---|---:|---:|---:|---|---:|---:|"]
    peaks = {}
    for dtype in ("float64", "float32"):
        rng = np.random.default_rng(0)
        pk = peak(dtype)
        peaks[dtype] = pk
        for m, k, n in MATMULS:
            ca = be.asarray(rng.standard_normal((m, k)).astype(dtype))
            cb = be.asarray(rng.standard_normal((k, n)).astype(dtype))
            times: dict[str, list[tuple[float, float]]] = {"plain": [], "fma": []}
            outs = {inner: be.matmul(ca, cb, inner=inner) for inner in times}
            for _ in range(rounds):  # the contracts alternate, so load hits both alike
                for inner, ts in times.items():
                    ts += _times(lambda i=inner, a=ca, b=cb, o=outs: be.matmul(a, b, inner=i,
                                                                               out=o[i]), reps)
            for inner, ts in times.items():
                macs = m * k * n
                cpu_s = [c for c, _ in ts]
                med, best = macs / statistics.median(cpu_s) / 1e9, macs / min(cpu_s) / 1e9
                wall = macs / statistics.median([w for _, w in ts]) / 1e9
                p = pk["fma"] / 1e9  # the machine's multiply-add peak: the FMA rate
                row = (f"| {dtype} | {m}x{k}x{n} | {inner} | {med:.1f} | {best:.1f} | "
                       f"{wall:.1f} | fma {p:.1f} (mul+add {pk['muladd'] / 1e9:.1f}) | "
                       f"{med / p:.0%} | {best / p:.0%} |")
                print(row, flush=True)
                lines.append(row)
    return lines, peaks


CONVS = [(64, 64, 32, 3), (16, 16, 8, 3)]  # (C, O, H = W, kernel), padding 1: ResNet blocks


def _conv_calls(be, arrays: tuple, hw: int, kk: int, inner: str) -> dict[str, Callable]:
    """The four timed calls of one conv shape and contract, each into its own ``out=``."""
    x, w, g, a, b = arrays
    outs = {"matmul": be.matmul(a, b, inner=inner),
            "conv2d": be.conv2d(x, w, padding=1, inner=inner),
            "grad_input": be.conv2d_grad_input(g, w, padding=1, size=(hw, hw), inner=inner),
            "grad_weight": be.conv2d_grad_weight(g, x, padding=1, kernel=kk, inner=inner)}
    return {
        "matmul": lambda: be.matmul(a, b, inner=inner, out=outs["matmul"]),
        "conv2d": lambda: be.conv2d(x, w, padding=1, inner=inner, out=outs["conv2d"]),
        "grad_input": lambda: be.conv2d_grad_input(g, w, padding=1, size=(hw, hw),
                                                   inner=inner, out=outs["grad_input"]),
        "grad_weight": lambda: be.conv2d_grad_weight(g, x, padding=1, kernel=kk, inner=inner,
                                                     out=outs["grad_weight"])}


def conv_table(rounds: int, reps: int, batch: int) -> list[str]:
    """Rows: conv2d, conv2d_grad_input, conv2d_grad_weight and the matmul of the same
    multiply-adds, GMAC/s per thread (CPU time), interleaved in every round; medians."""
    os.environ["GTENSOR_CPU_THREADS"] = "1"  # read at every launch
    be = gtensor.backend("cpu")
    lines = ["| dtype | contract | shape (N, C, H, W) -> O, kernel | matmul GMAC/s | conv2d | "
             "grad_input | grad_weight | conv2d / matmul | grad_input / matmul | "
             "grad_weight / matmul |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for dtype in ("float64", "float32"):
        for c, o, hw, kk in CONVS:
            rng = np.random.default_rng(0)
            x = be.asarray(rng.standard_normal((batch, c, hw, hw)).astype(dtype))
            w = be.asarray(rng.standard_normal((o, c, kk, kk)).astype(dtype))
            g = be.asarray(rng.standard_normal((batch, o, hw, hw)).astype(dtype))
            a = be.asarray(rng.standard_normal((o, c * kk * kk)).astype(dtype))
            b = be.asarray(rng.standard_normal((c * kk * kk, batch * hw * hw)).astype(dtype))
            macs = batch * o * hw * hw * c * kk * kk
            for inner in ("plain", "fma"):
                calls = _conv_calls(be, (x, w, g, a, b), hw, kk, inner)
                per: dict[str, list[float]] = {k: [] for k in calls}
                for _ in range(rounds):  # the four interleaved: load hits them alike
                    for k, fn in calls.items():
                        per[k].append(statistics.median(cpu for cpu, _ in _times(fn, reps)))
                rate = {k: macs / statistics.median(v) / 1e9 for k, v in per.items()}
                m = rate["matmul"]
                row = (f"| {dtype} | {inner} | ({batch}, {c}, {hw}, {hw}) -> {o}, {kk}x{kk} | "
                       f"{m:.2f} | {rate['conv2d']:.2f} | {rate['grad_input']:.2f} | "
                       f"{rate['grad_weight']:.2f} | {rate['conv2d'] / m:.0%} | "
                       f"{rate['grad_input'] / m:.0%} | {rate['grad_weight'] / m:.0%} |")
                print(row, flush=True)
                lines.append(row)
    return lines


def write_conv(args: argparse.Namespace) -> None:
    """The --conv table, with its command and the machine's load, to
    benchmarks/results/cpu_conv.md."""
    import subprocess

    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = conv_table(args.rounds, args.reps, args.batch)
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    cmd = f"python benchmarks/bench_cpu_kernels.py --conv --rounds {args.rounds} " \
          f"--reps {args.reps} --batch {args.batch}"
    table = "\n".join(lines)
    text = f"""# The exact cpu conv against the exact matmul, per thread

conv2d, conv2d_grad_input and conv2d_grad_weight (padding 1, stride 1) on the cpu backend,
each output in its defined order (docs/semantics.md, "Convolution"), against the exact
matmul of the same multiply-adds ((O, C*KH*KW) @ (C*KH*KW, N*H*W)), under the same
inner-product contract and dtype. Since issue 41 the cpu conv kernels run the matmul kernel's
own product (``gtensor.ops.inner.cpu_product``: its tiles, packed panels, k blocks) on
im2col matrices (per image; small images in chunks, one product per chunk; the forward's made
a panel at a time by the product's pack hook, the weight gradient's a share of the taps per
thread), so the target is the matmul's rate (issue 41's bar: at least 70% of it at
ResNet-like shapes). One thread
(`GTENSOR_CPU_THREADS=1`); GMAC/s = multiply-adds / the calling thread's CPU seconds; in each
of {args.rounds} rounds the four ops run {args.reps} calls each, one after another (the median
call), and the table gives the median over rounds. The host is shared by several engineers'
builds and tests: absolute rates move with its load (CPU time does not count the time others
held the core, but does count their share of its caches and pipes); the ratios, taken from
interleaved rounds, are what this table is for.

Command (from the repository root):

```
{cmd}
```

`uptime` before: `{before}`
`uptime` after: `{after}`

Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs, numpy {np.__version__}.

{table}
"""
    out = ROOT / "benchmarks/results/cpu_conv.md"
    out.write_text(text)
    print(f"wrote {out}")


def write_functions(args: argparse.Namespace) -> None:
    """The --functions table, with its command and the load, to
    benchmarks/results/cpu_functions.md."""
    import subprocess

    import _functions

    before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = _functions.table(args.rounds, args.reps)
    after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    cmd = (f"python benchmarks/bench_cpu_kernels.py --functions --rounds {args.rounds} "
           f"--reps {args.reps}")
    table = "\n".join(lines)
    text = f"""# The elementwise functions on the cpu backend: ns per element, one thread

Ours: the correctly rounded functions (issue 38; docs/semantics.md, "Correctly rounded
functions"), each op on the cpu backend. Today's: the fdlibm-based definitions the ops had
before (``gtensor.scalar.transcendental``, within 0.62-0.83 ulp), compiled into cpu map kernels
the same way. glibc: its libm in a plain C loop (gcc -O2, one call per element; not correctly
rounded, ~1 ulp). numpy: its ufuncs (SIMD where it has them; erf from scipy.special when
installed; sigmoid as ``1/(1 + exp(-x))``). One thread (`GTENSOR_CPU_THREADS=1`), {_functions.N}
elements (inputs uniform over each function's busy range, `_functions.FUNCTIONS`); ns per
element = the calling thread's CPU time of a call / n, the median call of {args.reps} per round,
the median over {args.rounds} rounds in which the engines alternate. The host is shared: the
ratios, taken in interleaved rounds, are what this table is for. The bars of issue 38: ours /
today's <= 1.5x for exp, log, tanh, sigmoid; ours within 2x of glibc's / numpy's for the new
functions.

Command (from the repository root):

```
{cmd}
```

`uptime` before: `{before}`
`uptime` after: `{after}`

Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs, numpy {np.__version__}.

{table}
"""
    out = ROOT / "benchmarks/results/cpu_functions.md"
    out.write_text(text)
    print(f"wrote {out}")


def write_peak(args: argparse.Namespace) -> None:
    """The --peak table, with its command, to benchmarks/results/cpu_matmul_peak.md."""
    lines, _ = peak_table(args.rounds, args.reps)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    cmd = "python benchmarks/bench_cpu_kernels.py --peak" + (
        f" --rounds {args.rounds}" if args.rounds != 7 else "") + (
        f" --reps {args.reps}" if args.reps != 15 else "")
    table = "\n".join(lines)
    text = f"""# The exact cpu matmul per thread, both inner-product contracts, against the peak

`inner="plain"`: `acc = a[i,0]*b[0,j]`, then `acc = acc + a[i,k]*b[k,j]` (a vector multiply
and a vector add per term); `inner="fma"`: `acc = +0.0`, then `acc = fma(a[i,k], b[k,j], acc)`
(one vfmadd per term). Both exact (each output's chain over k in order; docs/semantics.md).
One thread (`GTENSOR_CPU_THREADS=1`), {args.rounds} rounds of {args.reps} calls, the two
contracts alternating; GMAC/s = m*k*n / the calling thread's CPU seconds (the kernel runs on
it), median and best call, and the wall-clock median beside it. The peak is measured on this
machine by `benchmarks/_peak.py` (16-30 independent 64-byte accumulators, short runs, best of
80; the FMA rate, and the separate multiply + add rate, per thread). The host is shared
(load average at the end: {load}; 2 vCPUs): CPU time leaves out the time other processes held
the core, not their share of its caches and SMT pipes, so the medians still move with load.

Command (from the repository root):

```
{cmd}
```

Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs,
numpy {np.__version__}.

{table}
"""
    out = ROOT / "benchmarks/results/cpu_matmul_peak.md"
    out.write_text(text)
    print(f"wrote {out}")


def main() -> None:
    """Time every case, print the table and write benchmarks/results/cpu_kernels.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    ap.add_argument("--reps", type=int, default=15, help="timed calls per round (default 15)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/cpu_kernels.md")
    ap.add_argument("--peak", action="store_true",
                    help="only the matmul GMAC/s per thread of both contracts vs the peak")
    ap.add_argument("--conv", action="store_true",
                    help="only the conv ops' GMAC/s per thread against the matmul's")
    ap.add_argument("--batch", type=int, default=8, help="--conv: images per batch (8)")
    ap.add_argument("--functions", action="store_true",
                    help="only the elementwise functions, ns per element on one thread: ours "
                         "(correctly rounded) vs today's (fdlibm-based), glibc and numpy")
    args = ap.parse_args()
    if args.functions:
        write_functions(args)
        return
    if args.peak:
        write_peak(args)
        return
    if args.conv:
        write_conv(args)
        return
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

Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs
(load average at the end: {load}),
numpy {np.__version__}, torch {torch.__version__} (2 threads); our kernels use
`$GTENSOR_CPU_THREADS` (default: every CPU).

{table}
"""
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
