"""The width sweep repeated: several separate runs, each ratio the median over the runs.

A run is one whole ``ae_profile.width_sweep`` (every engine made afresh, the engines of each
width and dtype interleaved in blocks). Each run gives, per width and dtype, a ratio of two
engines' medians; the table reports the median of those per-run ratios, their spread (lowest
and highest) and the per-run values, beside the issue's targets where it sets one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from ae_profile import width_sweep

DTYPES = ("float64", "float32")

# (label, engine, peer, {width: target}): the ratios the sweep reports, in table order; the
# targets are issue 22's (this 2-core machine)
COMPARISONS: tuple[tuple[str, str, str, dict[int, float]], ...] = (
    ("cpu tape, plain vs torch eager", "cpu", "torch", {}),
    ("cpu tape, fma vs torch eager", "cpu_fma", "torch", {1024: 0.6}),
    ("cpu tape, fma vs torch eager (1 thread)", "cpu_fma", "torch1", {}),
    ("captured step, plain vs JAX jit", "captured", "jax", {}),
    ("captured step, fma vs JAX jit", "captured_fma", "jax", {1024: 0.8}),
    ("compiled captured step, plain vs JAX jit", "compiled", "jax", {64: 0.7}),
    ("compiled captured step, fma vs JAX jit", "compiled_fma", "jax", {64: 0.7, 1024: 0.8}),
    ("compiled vs per-node captured step, fma", "compiled_fma", "captured_fma", {}),
)
ENGINES = ("cpu", "cpu_fma", "captured", "captured_fma", "compiled", "compiled_fma", "torch",
           "torch1", "jax")


def repeated_sweeps(widths: tuple[int, ...], steps: int, warmup: int, runs: int,
                    show: Callable[[int, int, str, dict], Any] | None = None) -> list[dict]:
    """``runs`` separate width sweeps (``show(run, w, dtype, row)`` after each row)."""
    if runs < 1:
        raise ValueError(f"repeated_sweeps: runs is {runs}; expected at least 1")
    out = []
    for r in range(runs):
        def each(w: int, dtype: str, row: dict, r: int = r) -> None:
            if show is not None:
                show(r, w, dtype, row)
        out.append(width_sweep(widths, steps, warmup, each))
    return out


def _median_us(cell: Any) -> float | None:
    return cell[0] if isinstance(cell, tuple) else None


def run_ratios(sweeps: list[dict], w: int, dtype: str, engine: str, peer: str) -> list[float]:
    """The per-run ratios of ``engine``'s median to ``peer``'s (runs where both ran)."""
    out = []
    for sw in sweeps:
        row = sw[w][dtype]
        a, b = _median_us(row.get(engine)), _median_us(row.get(peer))
        if a is not None and b is not None:
            out.append(a / b)
    return out


def _why_missing(sweeps: list[dict], w: int, dtype: str, names: tuple[str, ...]) -> str:
    for name in names:
        cell = sweeps[0][w][dtype].get(name)
        if isinstance(cell, str):
            return f"{name}: {cell}"
    return "not run"


def ratio_table(sweeps: list[dict]) -> str:
    """One row per width, dtype and comparison: the median ratio over the runs, its spread, the
    per-run ratios and the target (met or not)."""
    lines = ["| hidden (w, w/2, w) | dtype | comparison | median ratio | spread (min - max) | "
             "per run | target |", "|---|---|---|---:|---|---|---|"]
    for w in sweeps[0]:
        for dt in DTYPES:
            for label, engine, peer, targets in COMPARISONS:
                rs = run_ratios(sweeps, w, dt, engine, peer)
                target = targets.get(w)
                if rs:
                    med = statistics.median(rs)
                    cells = [f"{med:.2f}x", f"{min(rs):.2f}x - {max(rs):.2f}x",
                             ", ".join(f"{r:.2f}" for r in rs)]
                    tgt = ("-" if target is None else
                           f"<= {target}x: {'met' if med <= target else 'not met'}")
                else:
                    cells = ["-", "-", _why_missing(sweeps, w, dt, (engine, peer))]
                    tgt = "-" if target is None else f"<= {target}x: not measured"
                lines.append(f"| {w}, {w // 2}, {w} | {dt} | {label} | " + " | ".join(cells)
                             + f" | {tgt} |")
    return "\n".join(lines)


def times_table(sweeps: list[dict]) -> str:
    """Each engine's step time per width and dtype: the median over the runs of the per-run
    medians (us), with the lowest and highest run."""
    head = "| hidden | dtype | " + " | ".join(ENGINES) + " |"
    lines = [head, "|---|---|" + "---:|" * len(ENGINES)]
    for w in sweeps[0]:
        for dt in DTYPES:
            cells = []
            for name in ENGINES:
                vals = [_median_us(sw[w][dt].get(name)) for sw in sweeps]
                vals = [v for v in vals if v is not None]
                cells.append(f"{statistics.median(vals):,.0f} ({min(vals):,.0f}-"
                             f"{max(vals):,.0f})" if vals else "-")
            lines.append(f"| {w}, {w // 2}, {w} | {dt} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
