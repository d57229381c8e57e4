"""Where the cpu tape's LoRA step spends its time: per-op wall time of bench_lora_step's step.

Wraps ``CpuBackend.apply`` with a timer keyed by op name and input shapes, and runs the
backward pass op by op (``Tape.adjust_next_backward`` with an identity hook: a replayed
backward would be one native call, invisible to the timer), so every forward, backward and
Adam op is timed; prints per-op totals per step (medians over ``--steps``) and the costliest
calls. Op-by-op backward allocates fresh outputs, so allocation and first-touch costs that the
replayed step avoids are included.

    python benchmarks/profile_lora_step.py [--dtype float64] [--inner fma] [--steps 3] [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from typing import Any

import _paths  # noqa: F401  (first of ours: puts the repository's packages on sys.path)
import bench_lora_step as bench  # noqa: E402
from gtensor.backends.cpu_backend import CpuBackend  # noqa: E402


def profile(dtype: str, inner: str, steps: int) -> tuple[dict, list[tuple[float, ...]]]:
    """({(op, shapes, attrs): [calls, seconds]} summed over ``steps``, per-step phase times)."""
    stats: dict[tuple, list] = collections.defaultdict(lambda: [0, 0.0])
    on = [False]
    plain_apply = CpuBackend.apply

    def timed(self: Any, op: Any, inputs: Any, out: Any = None, **attrs: Any) -> Any:
        if not on[0]:
            return plain_apply(self, op, inputs, out, **attrs)
        t = time.perf_counter()
        result = plain_apply(self, op, inputs, out, **attrs)
        dt = time.perf_counter() - t
        name = op if isinstance(op, str) else op.name
        key = (name, tuple(tuple(x.shape) for x in inputs),
               tuple(sorted((k, str(v)) for k, v in attrs.items() if k != "inner")))
        stats[key][0] += 1
        stats[key][1] += dt
        return result

    setup = bench.tape_setup("cpu", dtype, inner)
    tp, timing = setup[1], [False]

    def before() -> None:
        tp.adjust_next_backward(lambda i, g: g)  # op by op: every backward op is timed
        on[0] = timing[0]

    def after() -> None:
        on[0] = False

    timed_step = bench.timed_phases(setup, time.perf_counter, before, after)

    def step(timed_ops: bool) -> tuple[float, ...]:
        timing[0] = timed_ops
        return timed_step()[:3]

    CpuBackend.apply = timed
    try:
        step(False)  # warm-up: plans, kernels
        phases = [step(True) for _ in range(steps)]
    finally:
        CpuBackend.apply = plain_apply
        tp.close()
    return stats, phases


def main() -> None:
    """Profile one configuration and print the per-op table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--inner", choices=["plain", "fma"], default="fma")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25, help="costliest calls to list")
    args = ap.parse_args()
    stats, phases = profile(args.dtype, args.inner, args.steps)
    fwd, bwd, opt = (statistics.median(p) * 1e3 for p in zip(*phases))
    per_step = sum(s[1] for s in stats.values()) / args.steps
    print(f"{args.dtype} inner={args.inner}: forward {fwd:.1f} ms, backward (op by op) "
          f"{bwd:.1f} ms, Adam {opt:.1f} ms (medians of {args.steps}); timed ops "
          f"{per_step * 1e3:.1f} ms per step")
    by_op: dict[str, float] = collections.defaultdict(float)
    for key, (_, sec) in stats.items():
        by_op[key[0]] += sec / args.steps
    for name, sec in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {name:22s} {sec * 1e3:8.2f} ms {100 * sec / per_step:5.1f}%")
    print("costliest calls (ms per step, calls per step, op, input shapes, attrs):")
    for key, (n, sec) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"  {sec / args.steps * 1e3:8.2f} x{n // args.steps:3d}  {key[0]} {key[1]} "
              f"{dict(key[2]) or ''}")


if __name__ == "__main__":
    main()
