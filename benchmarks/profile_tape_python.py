"""The Python cost of the cpu tape: bench_lora_step's step by phase, and per recorded node by
op, with the native kernels stubbed out.

After warm-up (plans made, buffers homed) the cpu module's ``run`` is replaced by a function
that returns 0, so what is timed is the tape's, the backend's and the model code's Python
alone: recording (the forward), the backward pass's key and replay call, Adam's checks,
``reset_to``. Times are process CPU time (``time.process_time``), medians over ``--steps``;
compare two trees by running this in each, in turns, with ``GTENSOR_CPU_THREADS=1``.

    python benchmarks/profile_tape_python.py [--dtype float32] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _paths  # noqa: F401  (first of ours: puts the repository's packages on sys.path)
import bench_lora_step as bench  # noqa: E402
import gtape  # noqa: E402
import gtensor  # noqa: E402
import numpy as np  # noqa: E402

NODES = 100  # nodes recorded per timed block of the per-op table


def lora_phases(dtype: str, steps: int) -> dict[str, float]:
    """Median ms per phase of the LoRA step (forward, backward, Adam, reset_to), stubbed."""
    step = bench.timed_phases(bench.tape_setup("cpu", dtype), time.process_time)
    for _ in range(3):
        step()
    times = _stubbed(lambda: [step() for _ in range(steps)])
    return {name: 1e3 * statistics.median(col)
            for name, col in zip(("forward", "backward", "adam", "reset_to"), zip(*times))}


def per_node(dtype: str, steps: int) -> dict[str, float]:
    """Median ns per recorded node of a few common ops (each recorded NODES times), stubbed."""
    tp = gtape.Tape("cpu", dtype)
    rng = np.random.default_rng(0)
    a, b = tp.param(rng.normal(size=(128, 256))), tp.param(rng.normal(size=(128, 256)))
    w = tp.param(rng.normal(size=(256, 64)))
    mark = tp.mark()
    cases: dict[str, Callable[[], object]] = {
        "add": lambda: gtape.add(a, b), "matmul": lambda: gtape.matmul(a, w),
        "transpose": lambda: gtape.transpose(a, (1, 0)), "muls": lambda: gtape.muls(a, 0.5)}
    out = {}
    for name, fn in cases.items():
        def block(fn: Callable[[], object] = fn) -> float:
            t = time.process_time()
            for _ in range(NODES):
                fn()
            dt = time.process_time() - t
            tp.reset_to(mark)
            return dt

        block()  # plans and buffers
        out[name] = 1e9 * statistics.median(_stubbed(lambda: [block() for _ in range(steps)]))
        out[name] /= NODES
    return out


def _stubbed(run: Callable[[], list]) -> list:
    """``run()`` with the cpu module's native door returning 0 at once."""
    mod = gtensor.backend("cpu").module
    real = mod.run
    mod.run = lambda *args: 0
    try:
        return run()
    finally:
        mod.run = real


def main() -> None:
    """Print the LoRA step's phases and the per-node table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float32")
    ap.add_argument("--steps", type=int, default=40, help="timed steps / blocks (medians)")
    args = ap.parse_args()
    phases = lora_phases(args.dtype, args.steps)
    nodes = per_node(args.dtype, 10 * args.steps)
    print(f"{args.dtype} LoRA step, Python only (ms): "
          + ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
          + f"; total {sum(phases.values()):.3f}")
    print("per recorded node (ns): " + ", ".join(f"{k} {v:.0f}" for k, v in nodes.items()))


if __name__ == "__main__":
    main()
