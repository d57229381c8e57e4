"""One training step (forward + backward + Adam) of the rung-1 autoencoder, engine by engine.

The d-64-32-64-d autoencoder (relu hidden, linear out, MSE), batch 200, Adam lr 1e-3 with L2 1e-5
on the weights, float64 and float32. Engines (the ``ENGINES`` table; add a row to add a column):
our tape on the numpy, sim and cpu backends, our step captured once and replayed on the cpu
backend (ggpu-replay: one native call per step), hand-written numpy + BLAS, PyTorch eager (CPU),
torch.compile (inductor, CPU) of the whole torch step, JAX jit (when it imports). Each engine
cycles through the same ten minibatches. The engines of one dtype take turns in blocks of 50
timed steps, so load on a shared machine hits all of them alike while each block runs with its
own data in cache; each step is timed (perf_counter_ns) after a warm-up (compilation, for
torch.compile and JAX, happens there: never timed), and we report medians and ratios to torch
eager and to JAX jit. A width sweep (hidden 64 -> 256 -> 1024) times the cpu tape and the
captured cpu step against torch eager and JAX jit, and profiles of the tape steps say where our
time goes.

    python benchmarks/bench_ae_step.py --steps 1000

prints the tables and writes them, with the command and the profiles, to
benchmarks/results/ae_step.md (or --out FILE). The parts: ``ae_engines`` (the step of each
engine), ``_timing`` (interleaved blocks, medians, spreads), ``ae_profile`` (the width sweep and
where the time goes), ``ae_facts`` (the counts the text states) and ``ae_report`` (the file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path
from _timing import round_robin
from ae_engines import COMPILED, ENGINES, SWEEP, check_exact, make_steps
from ae_facts import all_facts
from ae_profile import WIDTHS, cpu_split, matmul_share, profile_tape, width_sweep
from ae_report import report, sweep_table, table, us

ROOT = _paths.ROOT
DTYPES = ("float64", "float32")


def _show_sweep(w: int, dtype: str, row: dict) -> None:
    print(f"width {w:5d} {dtype}: " + ", ".join(f"{k} {us(row[k])}" for k in SWEEP), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run every engine, print the tables, write benchmarks/results/ae_step.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per engine and dtype")
    ap.add_argument("--sim-steps", type=int, default=None, help="timed steps for the sim tape "
                    "(default: --steps)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--profile-steps", type=int, default=200)
    ap.add_argument("--sweep-steps", type=int, default=300,
                    help="timed steps of the width sweep at width 64 (fewer when wider)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ae_step.md")
    ap.add_argument("--sweep-only", action="store_true",
                    help="only the width sweep (both inner-product contracts), written to "
                         "benchmarks/results/ae_sweep.md")
    ap.add_argument("--runs", type=int, default=3,
                    help="separate runs of the width sweep (--sweep-only; default 3)")
    args = ap.parse_args(argv)
    if args.sweep_only:
        return _sweep_only(args, argv)
    rows: dict[str, dict[str, tuple[float, float, int] | str]] = {}
    compile_s: dict[str, float] = {}
    for dtype in DTYPES:
        steps, failed = make_steps({e.name: e.make for e in ENGINES}, dtype)
        for name, why in failed.items():
            rows.setdefault(name, {})[dtype] = why
            print(f"{dtype:8s} {name:30s} {why}", flush=True)
        if hasattr(steps.get(COMPILED), "compile_s"):
            compile_s[dtype] = steps[COMPILED].compile_s
        counts = {e.name: (args.sim_steps or args.steps) if e.slow else args.steps
                  for e in ENGINES if e.name in steps}
        for name, res in round_robin(steps, counts, args.warmup).items():
            rows.setdefault(name, {})[dtype] = res
            print(f"{dtype:8s} {name:30s} median {res[0]:9.1f} us (IQR {res[1]:.1f}, "
                  f"{res[2]} steps)", flush=True)
    rows = {e.name: rows[e.name] for e in ENGINES if e.name in rows}
    exact = {dt: check_exact(dt) for dt in DTYPES}
    print(f"exact engines' first losses: {exact}", flush=True)
    sweep = width_sweep(WIDTHS, args.sweep_steps, args.warmup, _show_sweep)
    plain = matmul_share(args.profile_steps)
    split = cpu_split(args.profile_steps)
    profiles = {b: profile_tape(b, args.profile_steps) for b in ("numpy", "sim", "cpu")}
    facts = all_facts()
    print(table(rows))
    print(sweep_table(sweep))
    print(plain, split, {b: p[1] for b, p in profiles.items()}, facts)
    cmd = "python benchmarks/bench_ae_step.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(cmd, args, rows, sweep, plain, split, profiles, exact, compile_s,
                               facts))
    print(f"wrote {args.out}")
    return 0


def _sweep_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The width sweep alone, ``--runs`` separate times, with its command, to
    benchmarks/results/ae_sweep.md."""
    import os

    from ae_sweep_runs import ratio_table, repeated_sweeps, times_table

    def show(r: int, w: int, dtype: str, row: dict) -> None:
        print(f"run {r + 1}/{args.runs} ", end="")
        _show_sweep(w, dtype, row)

    sweeps = repeated_sweeps(WIDTHS, args.sweep_steps, args.warmup, args.runs, show)
    cmd = "python benchmarks/bench_ae_step.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    ratios, times = ratio_table(sweeps), times_table(sweeps)
    print(ratios)
    text = f"""# The AE step's width sweep, both inner-product contracts

One training step of rung 1's autoencoder (forward + backward + Adam with L2, batch 200) at
hidden widths (w, w/2, w): the exact cpu tape, the captured cpu step (per-node plan, one native
call) and the compiled captured step (ggpu-fuse's plan lowered to one compiled C++ function)
under the plain contract and under the fma contract (`g.Tape("cpu", inner="fma")`;
docs/semantics.md), against torch eager (all threads, one thread) and JAX jit where installed.

{args.runs} separate runs; in each, every engine is made afresh and the engines of one width and
dtype take turns in blocks of timed steps ({args.sweep_steps} timed steps at w=64, fewer when
wider, at least 20; medians). A ratio below is the median of the {args.runs} per-run ratios of
two engines' medians, with the lowest and highest run beside it. On a shared 2-core host
(load average at the end: {load}): compare ratios, not absolute times. The fma engines give other
bits than the plain ones by definition (each contract is bitwise across engines: tests, not
this table).

Command (from the repository root):

```
{cmd}
```

## Ratios (median of {args.runs} runs)

{ratios}

## Step times (us: median over the runs of each run's median, lowest - highest run)

{times}
"""
    out = ROOT / "benchmarks" / "results" / "ae_sweep.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
