"""Cold start on the cpu backend: seconds from a new process to rung 9's first captured (and
fused) GPT step done, with an empty kernel cache and again with a warm one (what a first-time
user waits).

Each measurement is a fresh ``python`` process with its own ``GTENSOR_CACHE_DIR``; the clock
starts before the process and stops when the step has run. The child reports its phases
(imports and model, capture = recording the step eagerly, the first replayed step; then the
same step captured again and fused by ggpu-fuse, and its first two steps: the fused functions'
compile, forward and backward side by side, then the whole step, which calls them and the
kernel libraries the capture loaded) and the kernel libraries its cpu
module loaded. ``--whole`` adds the peer in the same run: the cpu
module as one library of all its kernels (how it was built before kernels were compiled on
first use), timed by building it into its own empty cache.

    python benchmarks/bench_cold_start.py [--dtype float64] [--runs 3] [--whole]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401 - first of ours: puts the repository's packages on sys.path

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "cold_start.md"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {here!r})
import _paths  # noqa
import gtape as g
from gdemos import gpt, gpt_model as M
import bench_gpt_step as B
run, cfg, x, y = B._data(48, {dtype!r})
tp = g.Tape("cpu", {dtype!r}, seed=run.seed)
model = M.GPT(tp, cfg)
t1 = time.perf_counter()
steps = gpt.ReplaySteps(tp, model, run, x, y)
t2 = time.perf_counter()
steps.step(x, y)
t3 = time.perf_counter()
fused = gpt.ReplaySteps(tp, model, run, x, y, fused=True)
fused.step(x, y)
fused.step(x, y)  # the second step compiles the whole step (its optimizer recorded)
t4 = time.perf_counter()
print(json.dumps({{"setup": t1 - t0, "capture": t2 - t1, "first_step": t3 - t2,
                  "fuse": t4 - t3, "fuse_compile": fused.prog.compile_seconds,
                  "kernels": len(tp.backend.module.loaded())}}))
"""

WHOLE = r"""
import sys
sys.path.insert(0, {here!r})
import _paths  # noqa
from gtensor.runtime.cpu import CpuModule
from gtensor.runtime.cpu_source import cpu_kernels, cpu_module_source
CpuModule(cpu_kernels(), cpu_module_source())
"""


def _child(code: str, cache: str) -> tuple[float, dict]:
    """(wall seconds, the child's JSON line or {}) of one fresh process."""
    env = dict(os.environ, GTENSOR_CACHE_DIR=cache)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_cold_start: the child failed:\n{proc.stderr}")
    lines = [s for s in proc.stdout.splitlines() if s.startswith("{")]
    return wall, json.loads(lines[-1]) if lines else {}


def main() -> None:
    """Run the cold and warm starts ``--runs`` times each; write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--whole", action="store_true",
                    help="also build the whole cpu module as one library (the peer; ~2 min)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs is {args.runs}; expected at least 1")
    code = CHILD.format(here=str(HERE), dtype=args.dtype)
    rows: dict[str, list[tuple[float, dict]]] = {"cold": [], "warm": []}
    whole: list[float] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            rows["cold"].append(_child(code, cache))
            rows["warm"].append(_child(code, cache))
            print(f"cold {rows['cold'][-1][0]:.1f} s, warm {rows['warm'][-1][0]:.1f} s",
                  flush=True)
        if args.whole:
            with tempfile.TemporaryDirectory() as cache:
                whole.append(_child(WHOLE.format(here=str(HERE)), cache)[0])
                print(f"whole module {whole[-1]:.1f} s", flush=True)
    args.out.write_text(_report(args, rows, whole))
    print(f"wrote {args.out}")


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}"


def _report(args: argparse.Namespace, rows: dict, whole: list[float]) -> str:
    """The markdown table of medians."""
    out = [
        "# Cold start: a new process to rung 9's first captured and fused GPT steps, cpu backend",
        "",
        f"Rung 9's GPT (n_embd 48, batch 16, {args.dtype}), `gdemos.gpt.ReplaySteps` then one "
        "replayed step, in a fresh process with an empty `GTENSOR_CACHE_DIR` (cold) and again "
        "with the cache it left (warm). Seconds, medians over "
        f"{args.runs} runs; the phases are the child's own clock (setup: imports, data, model "
        "init; capture: recording the step eagerly, which compiles each kernel on its first "
        "use; the first replayed step; fuse: the same step captured again, fused by "
        "`ggpu_fuse.fuse` and stepped twice (the second step compiles the whole step), of "
        "which fuse compile is the fused functions' compile, `prog.compile_seconds`). The "
        "wall time includes the interpreter's start.",
        "",
        "Command (from the repository root):",
        "",
        "```",
        "python benchmarks/bench_cold_start.py" + (" --whole" if whole else "")
        + (f" --dtype {args.dtype}" if args.dtype != "float64" else ""),
        "```",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, CPython "
        f"{platform.python_version()}; load average when the run ended "
        + " / ".join(f"{x:.1f}" for x in os.getloadavg()) + ".",
        "",
        "| cache | wall s | setup s | capture s | first step s | fuse s | fuse compile s "
        "| kernel libraries loaded |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, runs in rows.items():
        walls = [w for w, _ in runs]
        phase = {k: [r[k] for _, r in runs]
                 for k in ("setup", "capture", "first_step", "fuse", "fuse_compile")}
        kernels = runs[0][1].get("kernels", "?")
        out.append(f"| {name} | {_median(walls)} | "
                   + " | ".join(_median(v) for v in phase.values()) + f" | {kernels} |")
    if whole:
        out += ["", f"Peer in the same run: the whole cpu module as one library (every kernel, "
                f"one g++ process, an empty cache): {_median(whole)} s (median of "
                f"{len(whole)}), the wait every first use had before kernels were compiled on "
                "first use."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
