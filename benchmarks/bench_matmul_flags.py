"""matmul's ta / tb on the cpu backend: interleaved A/B in one process, medians.

    GTENSOR_CPU_THREADS=1 python benchmarks/bench_matmul_flags.py [--reps 21] [--steps 9]

1. the backward-shaped products (fma contract): ``matmul(x, g, ta=True)`` (1024x200x512) and
   ``matmul(g, W, tb=True)`` (200x512x1024) against transpose + matmul, and the transpose alone;
2. the w=1024 AE step (``ae_engines.tape_step("cpu", "fma")``, hidden (1024, 512, 1024), batch
   200): the flagged VJP (after) against the explicit-transpose VJP (before) swapped in, steps
   taking turns; the losses must be bit-equal step by step.

Wall time (``perf_counter``) and process time (``process_time``: the measure on a shared host).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _paths  # noqa: F401 - first of ours: puts the repository's packages on sys.path
import ae_engines
import gtensor
import numpy as np
from gtensor.ops import REGISTRY

HIDDEN = (1024, 512, 1024)


def _timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def _line(res: dict[str, list[tuple[float, float]]]) -> str:
    return ", ".join(f"{k} {statistics.median(w for w, _ in v) * 1e3:.3f} ms wall / "
                     f"{statistics.median(c for _, c in v) * 1e3:.3f} ms cpu"
                     for k, v in res.items())


def products(reps: int) -> None:
    """The two backward-shaped products, flagged vs transpose + matmul."""
    be = gtensor.backend("cpu")
    rng = np.random.default_rng(0)
    for dt in ("float64", "float32"):
        x = be.asarray(rng.standard_normal((200, 1024)).astype(dt))
        g = be.asarray(rng.standard_normal((200, 512)).astype(dt))
        w = be.asarray(rng.standard_normal((1024, 512)).astype(dt))
        _products_of(be, x, g, w, dt, reps)


def _products_of(be, x, g, w, dt: str, reps: int) -> None:
    cases = {
        "ta 1024x200x512": (lambda: be.matmul(x, g, inner="fma", ta=True),
                            lambda: be.matmul(be.transpose(x), g, inner="fma"),
                            lambda: be.transpose(x)),
        "tb 200x512x1024": (lambda: be.matmul(g, w, inner="fma", tb=True),
                            lambda: be.matmul(g, be.transpose(w), inner="fma"),
                            lambda: be.transpose(w)),
    }
    for name, fns in cases.items():
        flag, comp, tr = fns
        assert be.to_numpy(flag()).tobytes() == be.to_numpy(comp()).tobytes(), name
        res: dict[str, list[tuple[float, float]]] = {
            "flag": [], "transpose+matmul": [], "transpose alone": []}
        for _ in range(3):
            flag(), comp(), tr()
        for _ in range(reps):
            for key, fn in zip(res, fns):
                w_, c_, _ = _timed(fn)
                res[key].append((w_, c_))
        print(f"{dt} {name} (fma): {_line(res)}", flush=True)


def _explicit_vjp(be, g, ins, out, needs, inner="plain", ta=False, tb=False):
    """matmul's VJP before the flags: transpose copies, then the products."""
    a, b = ins
    return (be.matmul(g, be.transpose(b), inner=inner) if needs[0] else None,
            be.matmul(be.transpose(a), g, inner=inner) if needs[1] else None)


def ae_step(steps: int) -> None:
    """The AE step, the flagged VJP vs the explicit-transpose one, taking turns."""
    op = REGISTRY["matmul"]
    flagged = op.vjp
    rules = {"before": _explicit_vjp, "after": flagged}
    try:
        for dt in ("float64", "float32"):
            made = {}
            for name, rule in rules.items():
                object.__setattr__(op, "vjp", rule)  # NOTE: Op is frozen
                made[name] = ae_engines.tape_step("cpu", "fma")(dt, HIDDEN)
            res: dict[str, list[tuple[float, float]]] = {k: [] for k in rules}
            losses: dict[str, list[bytes]] = {k: [] for k in rules}
            for it in range(steps + 2):
                for name, rule in rules.items():
                    object.__setattr__(op, "vjp", rule)
                    w_, c_, loss = _timed(made[name])
                    losses[name].append(np.float64(loss).tobytes())
                    if it >= 2:
                        res[name].append((w_, c_))
            same = losses["before"] == losses["after"]
            print(f"AE step w=1024 {dt}: {_line(res)}; losses bit-equal: {same}", flush=True)
    finally:
        object.__setattr__(op, "vjp", flagged)


def main() -> None:
    """Run both measurements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=21, help="timed calls per product")
    ap.add_argument("--steps", type=int, default=9, help="timed AE steps per variant")
    args = ap.parse_args()
    products(args.reps)
    ae_step(args.steps)


if __name__ == "__main__":
    main()
