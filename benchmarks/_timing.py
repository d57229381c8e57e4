"""Timing for the step benchmarks: engines in interleaved blocks, medians and spreads, a timed
wrapper put in a function's place, and cProfile's top entries as text.

Imported by bench_ae_step.py and bench_replay_step.py.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 50  # consecutive timed steps of one engine before the next engine's turn
Step = Callable[[], Any]
Result = tuple[float, float, int]  # median (us), interquartile spread (us), timed steps


def median_spread(ns: list[int]) -> Result:
    """Median and interquartile spread (us) of step times in ns, and how many there were."""
    q = statistics.quantiles(ns, n=4) if len(ns) > 1 else [ns[0]] * 3
    return statistics.median(ns) / 1e3, (q[2] - q[0]) / 1e3, len(ns)


def round_robin(steps: dict[str, Step], counts: dict[str, int], warmup: int, block: int = BLOCK
                ) -> dict[str, Result]:
    """Median and interquartile spread (us) of each engine's step, the engines taking turns.

    Every engine gets ``warmup`` untimed steps; then round after round each engine that still
    needs timed steps runs a block of ``block`` timed steps, so all of them see the same machine
    load over the run while each block runs with the engine's own data in cache (stepping
    engines one by one lets each evict the others' working sets: that measures the neighbours).
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[int]] = {name: [] for name in steps}
    while any(len(times[n]) < counts[n] for n in steps):
        for name, step in steps.items():
            for _ in range(min(block, counts[name] - len(times[name]))):
                t0 = time.perf_counter_ns()
                step()
                times[name].append(time.perf_counter_ns() - t0)
    return {name: median_spread(ts) for name, ts in times.items()}


def time_inside(step: Step, steps: int, inner: Callable, install: Callable[[Callable], Any]
                ) -> tuple[int, int, int]:
    """Run ``steps`` steps with ``install`` putting a timed wrapper of ``inner`` in its place:
    total ns, ns spent inside ``inner``, calls of ``inner`` (``inner`` is put back after)."""
    spent = [0, 0]

    def timed(*a, **k):
        t0 = time.perf_counter_ns()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter_ns() - t0
            spent[1] += 1

    install(timed)
    try:
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        total = time.perf_counter_ns() - t0
    finally:
        install(inner)
    return total, spent[0], spent[1]


def profile(step: Step, steps: int, top: int = 12) -> tuple[str, pstats.Stats]:
    """cProfile of ``steps`` steps: the ``top`` entries by own time as text, and the stats."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    text = "\n".join(line for line in buf.getvalue().splitlines()
                     if line.strip() and not line.startswith(("   Ordered", "   List")))
    return text, pstats.Stats(prof)


def by_function(st: pstats.Stats) -> tuple[dict[str, float], dict[str, int]]:
    """Cumulative seconds and call counts per ``file.py:function`` of a profile."""
    cum = {f"{Path(k[0]).name}:{k[2]}": v[3] for k, v in st.stats.items()}
    calls = {f"{Path(k[0]).name}:{k[2]}": v[1] for k, v in st.stats.items()}
    return cum, calls
