"""Step time over a long float32 run, as weights decay into the subnormal range.

The rung-1 AE at hidden (64, 32, 64), float32, Adam with L2 on the weights (the sweep's step),
trained for ``--steps`` steps by three engines taking turns in blocks of 50 steps: our captured
cpu step compiled by ggpu-fuse (fma contract; IEEE arithmetic, subnormals kept), PyTorch eager
on one thread (subnormals kept) and JAX jit (which flushes subnormals to zero on the CPU). Per
window of steps: each engine's median step time and, for ours and torch, how many weights are
subnormal at the window's end. Also whether each engine keeps a float32 subnormal product
(``1e-39 * 1.0``).

    python benchmarks/bench_subnormal_drift.py [--steps 3000] [--window 500]

prints the table and writes it, with the command, to benchmarks/results/subnormal_drift.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path
import numpy as np
from _common import B1, B2, EPS, LR, add_l2, problem, torch_ae_loss
from ae_engines import _torch_problem, jax_step

ROOT = _paths.ROOT
HIDDEN = (64, 32, 64)
DTYPE = "float32"
TINY = np.finfo(np.float32).tiny


def _subnormal(arrays: list[np.ndarray]) -> int:
    """How many entries of ``arrays`` are nonzero and below the smallest normal float32."""
    return int(sum(np.count_nonzero((a != 0) & (np.abs(a) < TINY)) for a in arrays))


def ours() -> tuple[Callable[[], float], Callable[[], int]]:
    """Our compiled captured cpu step (fma contract) and its count of subnormal weights."""
    import itertools

    import gtape as g
    from gdemos import model
    from ggpu_fuse import fuse
    from ggpu_replay import capture

    batches, init = problem(HIDDEN)
    tp = g.Tape("numpy", DTYPE, inner="fma")
    ps = [tp.param(a) for a in init]
    x = tp.const(batches[0])
    prog = fuse(capture(tp, g.mse(model.forward(x, ps), x), backend="cpu"))
    opt = add_l2(prog.adam(lr=LR, betas=(B1, B2), eps=EPS), ps)
    xs = itertools.cycle(batches)

    def step() -> float:
        prog.set_input(x, next(xs))
        prog.step(opt)
        return prog.loss()
    return step, lambda: _subnormal([prog.value(p) for p in ps[::2]])


def torch_engine() -> tuple[Callable[[], float], Callable[[], int]]:
    """PyTorch eager on one thread (the sweep's torch step) and its count of subnormal weights."""
    import torch

    xs, ps, opt = _torch_problem(DTYPE, HIDDEN)

    def step() -> float:
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            loss = torch_ae_loss(ps, next(xs))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.item()
        finally:
            torch.set_num_threads(n)
    return step, lambda: _subnormal([w.detach().numpy() for w in ps[0::2]])


def keeps_subnormals() -> dict[str, bool]:
    """Whether each engine keeps a float32 subnormal product (1e-39 * 1.0 != 0)."""
    import gtape as g
    import jax
    import jax.numpy as jnp
    import torch

    tp = g.Tape("cpu", DTYPE)
    a, b = tp.const(np.float32([1e-39])), tp.const(np.float32([1.0]))
    out = {"ours": float(tp.value(a * b)[0]) != 0.0}
    out["torch"] = float((torch.tensor([1e-39]) * torch.tensor([1.0]))[0]) != 0.0
    f = jax.jit(lambda u, v: u * v)
    out["jax"] = float(f(jnp.float32(1e-39), jnp.float32(1.0))) != 0.0
    return out


def main() -> int:
    """Run the three engines in turns, print the table, write results/subnormal_drift.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--window", type=int, default=500)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "subnormal_drift.md")
    args = ap.parse_args()
    if args.steps < args.window or args.window < 50 or args.steps % args.window:
        ap.error("--steps must be a multiple of --window, and --window at least 50")
    o_step, o_count = ours()
    t_step, t_count = torch_engine()
    j_step = jax_step(DTYPE, HIDDEN)
    engines = {"ours": o_step, "torch": t_step, "jax": j_step}
    for f in engines.values():  # compile / warm up (untimed, counted as steps)
        f()
    times: dict[str, list[float]] = {k: [] for k in engines}
    rows = []
    for w0 in range(0, args.steps, args.window):
        for _ in range(0, args.window, 50):
            for name, f in engines.items():
                for _ in range(50):
                    t = time.perf_counter()
                    f()
                    times[name].append(time.perf_counter() - t)
        med = {k: float(np.median(v[w0:w0 + args.window])) for k, v in times.items()}
        rows.append((w0, w0 + args.window, med, o_count(), t_count()))
        print(f"steps {w0}-{w0 + args.window}: " + ", ".join(
            f"{k} {v * 1e6:.0f} us" for k, v in med.items()) + f"; subnormal weights ours "
            f"{rows[-1][3]}, torch {rows[-1][4]}", flush=True)
    keep = keeps_subnormals()
    lines = ["| steps | ours (us) | torch eager, 1 thread (us) | JAX jit (us) | subnormal "
             "weights, ours | subnormal weights, torch |", "|---|---:|---:|---:|---:|---:|"]
    for a, b, med, oc, tc in rows:
        lines.append(f"| {a:,}-{b:,} | {med['ours'] * 1e6:,.0f} | {med['torch'] * 1e6:,.0f} | "
                     f"{med['jax'] * 1e6:,.0f} | {oc} | {tc} |")
    table = "\n".join(lines)
    print(table)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    cmd = "python benchmarks/bench_subnormal_drift.py" + (
        f" --steps {args.steps}" if args.steps != 3000 else "") + (
        f" --window {args.window}" if args.window != 500 else "")
    kept = ", ".join(f"{k} {'keeps' if v else 'flushes to 0'}" for k, v in keep.items())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"""# Step time as weights become subnormal (float32, long run)

The rung-1 AE at hidden {HIDDEN}, float32, batch 200, Adam (lr {LR:g}) with L2 on the weights,
trained by three engines in turns of 50 steps each: our captured cpu step compiled by
ggpu-fuse (fma contract), PyTorch eager on one thread, JAX jit. Median step time per window
and the weights that are subnormal at the window's end. Weights of hidden units the relu no
longer reaches get only the L2 gradient, and Adam moves them toward zero geometrically until
they are subnormal; a multiply or FMA with a subnormal operand or result then takes a
microcode assist on many x86 cores (Intel's; AMD's Zen 4 takes them at full speed).
`1e-39 * 1.0` in float32: {kept}. IEEE arithmetic (ours, torch) computes those numbers and,
on such cores, pays for them; JAX's CPU backend flushes them to zero, so it
computes other numbers and keeps its speed. Our bits are the contract, so the mode stays IEEE
(docs/semantics.md, "The floating-point environment").

Command (from the repository root):

```
{cmd}
```

Machine: {platform.machine()}, {os.cpu_count()} CPUs; numpy {np.__version__}; load average at
the end {load}.

{table}
""")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
