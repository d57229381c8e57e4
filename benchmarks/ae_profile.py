"""Where the AE step's time goes, and how it scales: the width sweep, the unprofiled splits of
the cpu tape (inside the compiled kernels vs Python) and of the numpy tape (inside the serial
matmul vs the rest), and cProfile's top entries of the tape steps."""

from __future__ import annotations

from typing import Any

import gtensor
from _common import Step
from _timing import by_function, profile, round_robin, time_inside
from ae_engines import ENGINES, SWEEP, SWEEP_ONLY, make_steps, tape_step

WIDTHS = (64, 256, 1024)  # the width sweep: hidden layers (w, w/2, w)
WARM = 20  # untimed steps of a tape before a split or a profile


def width_sweep(widths: tuple[int, ...], steps: int, warmup: int,
                show: Any = None) -> dict[int, dict]:
    """The cpu tape and the captured cpu step (both inner-product contracts) vs torch eager
    (all threads, one thread) and JAX jit at hidden widths (w, w/2, w); an engine that cannot
    run gets its reason, not a time.

    Steps shrink with the work (~w**2): ``steps`` at w=64, at least 20. ``show(w, dtype, row)``
    is called after each row.
    """
    makers = {e.name: e.make for e in (*ENGINES, *SWEEP_ONLY)}
    rows: dict[int, dict] = {}
    for w in widths:
        hidden = (w, w // 2, w)
        n = max(20, int(steps * (64 / w) ** 2))
        for dtype in ("float64", "float32"):
            stepfns, failed = make_steps({k: makers[name] for k, name in SWEEP.items()}, dtype,
                                         hidden)
            res = round_robin(stepfns, {k: n for k in stepfns}, max(5, warmup // 5),
                              max(5, n // 10))
            rows.setdefault(w, {})[dtype] = {**res, **failed}
            if show is not None:
                show(w, dtype, rows[w][dtype])
    return rows


def warm_tape(backend: str) -> Step:
    """A float64 tape step on ``backend`` after ``WARM`` untimed steps."""
    step = tape_step(backend)("float64")
    for _ in range(WARM):
        step()
    return step


def cpu_split(steps: int) -> dict[str, float]:
    """Unprofiled cpu-tape step time and its part inside the compiled kernels (one C call per
    launch), so the rest is Python: gtensor dispatch plus the tape and the optimizer."""
    step = warm_tape("cpu")
    module = gtensor.backend("cpu").module
    total, inside, calls = time_inside(step, steps, module.run,
                                       lambda f: setattr(module, "run", f))
    return {"step_us": total / steps / 1e3, "kernel_us": inside / steps / 1e3,
            "calls_per_step": calls / steps}


def matmul_share(steps: int) -> dict[str, float]:
    """Unprofiled numpy-tape step time and the part spent in the serial matmul reference."""
    op = gtensor.REGISTRY["matmul"]
    step = warm_tape("numpy")
    # Op is frozen: patch for the measurement only
    total, inside, calls = time_inside(step, steps, op.reference,
                                       lambda f: object.__setattr__(op, "reference", f))
    return {"step_ms": total / steps / 1e6, "matmul_ms": inside / steps / 1e6,
            "matmuls_per_step": calls / steps}


def profile_tape(backend: str, steps: int) -> tuple[str, dict[str, float]]:
    """cProfile of the tape step: the top entries and the time of named phases (ms per step)."""
    text, st = profile(warm_tape(backend), steps)
    cum, calls = by_function(st)
    share = {
        "total_ms_per_step": 1e3 * st.total_tt / steps,
        "serial_matmul_ms": 1e3 * cum.get("linalg.py:serial_matmul", 0.0) / steps,
        "sim_launch_ms": 1e3 * cum.get("sim.py:run", 0.0) / steps,  # a bound launch's run
        "ops_per_step": calls.get("base.py:apply", 0) / steps,
        "backward_ms": 1e3 * cum.get("backward.py:run", 0.0) / steps,
        "optimizer_ms": 1e3 * cum.get("base.py:step", 0.0) / steps,
    }
    return text, share
