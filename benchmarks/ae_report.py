"""The AE-step report: the tables and the text of benchmarks/results/ae_step.md.

Every number in the text comes from the run: the timings (``rows``, ``sweep``, the splits and
profiles) and the counts of ``ae_facts`` (nodes, native calls and matmuls per phase, the
captured program's launches); nothing about the step is typed here by hand.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np
from _common import ALPHA
from _timing import BLOCK
from ae_engines import CAPTURED, COMPILE_WARMUP, COMPILED, ENGINES, JAX, TAPE_CPU, TORCH, TORCH_1

DTYPES = ("float64", "float32")


def us(v: Any, n: bool = False) -> str:
    """A median cell (us; with the step count when ``n``), or the reason there is none."""
    if isinstance(v, tuple):
        return f"{v[0]:,.0f} (n={v[2]})" if n else f"{v[0]:,.0f}"
    return "-" if v is None else str(v)


def ratio(v: Any, ref: Any) -> str:
    """``v``'s median over ``ref``'s, or "-" when either has none."""
    return f"{v[0] / ref[0]:.2f}x" if isinstance(v, tuple) and isinstance(ref, tuple) else "-"


def table(rows: dict) -> str:
    """The main table: each engine's median per dtype and its ratios to torch eager and JAX."""
    torch_, jax_ = rows.get(TORCH, {}), rows.get(JAX, {})
    lines = ["| engine | float64 median (us) | vs torch eager | vs JAX jit | float32 median (us) "
             "| vs torch eager | vs JAX jit |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, by_dt in rows.items():
        cells = [name]
        for dt in DTYPES:
            v = by_dt.get(dt)
            med = f"{v[0]:,.0f} (IQR {v[1]:,.0f}, n={v[2]})" if isinstance(v, tuple) else us(v)
            cells += [med, ratio(v, torch_.get(dt)), ratio(v, jax_.get(dt))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sweep_table(sweep: dict) -> str:
    """The width sweep's table: one row per width and dtype."""
    lines = ["| hidden (w, w/2, w) | dtype | cpu tape (us) | torch eager (us) | tape vs torch | "
             "torch eager, 1 thread (us) | tape vs torch 1 thread | captured cpu step (us) | "
             "JAX jit (us) | captured vs JAX | compiled captured step (us) | compiled vs "
             "captured | cpu tape, fma (us) | fma tape vs torch | captured, fma (us) | "
             "captured fma vs JAX | compiled, fma (us) | compiled fma vs captured fma |",
             "|---|---|" + "---:|" * 16]
    for w, by_dt in sweep.items():
        for dt in DTYPES:
            c = by_dt[dt]
            cells = [f"{w}, {w // 2}, {w}", dt, us(c["cpu"], n=True), us(c["torch"]),
                     ratio(c["cpu"], c["torch"]), us(c["torch1"]),
                     ratio(c["cpu"], c["torch1"]), us(c["captured"]), us(c["jax"]),
                     ratio(c["captured"], c["jax"]), us(c.get("compiled")),
                     ratio(c.get("compiled"), c["captured"]), us(c.get("cpu_fma")),
                     ratio(c.get("cpu_fma"), c["torch"]), us(c.get("captured_fma")),
                     ratio(c.get("captured_fma"), c["jax"]), us(c.get("compiled_fma")),
                     ratio(c.get("compiled_fma"), c.get("captured_fma"))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _versions() -> tuple[str, int, str]:
    """torch's version and threads, and jax's version (or "not installed")."""
    import torch

    try:
        import jax
        jax_v = jax.__version__
    except ImportError:
        jax_v = "not installed"
    return torch.__version__, torch.get_num_threads(), jax_v


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _compiled(rows: dict, compile_s: dict, warmup: int) -> str:
    """The torch.compile sentence: its ratios and compile seconds, or why it did not run."""
    cmp_torch = {dt: ratio(rows.get(COMPILED, {}).get(dt), rows.get(TORCH, {}).get(dt))
                 for dt in DTYPES}
    if not compile_s:
        return "not timed here: " + "; ".join(
            f"{dt}: {v}" for dt, v in rows.get(COMPILED, {}).items() if isinstance(v, str))
    return (f"{cmp_torch['float64']} torch eager's step time in float64 and "
            f"{cmp_torch['float32']} in float32 (it shares torch's OpenMP threads,\n"
            "so load hits it as it hits torch eager). Compile time is excluded: the "
            f"engine compiles during its\nfirst {COMPILE_WARMUP} steps, run untimed when "
            "it is made (" + ", ".join(f"{v:.1f} s in {dt}" for dt, v in compile_s.items())
            + " in this run;\ninductor's on-disk cache makes reruns quicker), before "
            f"the {warmup} warm-up steps every engine gets")


def _phase_calls(cpu: dict) -> str:
    """The cpu tape's native calls per phase, as counted, in words."""
    c, bw = cpu["calls"], cpu["backward"]
    parts = [f"{c['forward']} in the forward ({cpu['forward_nodes']} nodes recorded: "
             f"{cpu['forward_consts']} const for the minibatch and {cpu['forward_ops']} ops of "
             "the forward and the loss)",
             f"{c['backward']} for the whole backward pass ({bw.get('vjps', '?')} VJPs; a "
             "repeated graph's pass is recorded once and replayed, `docs/tape.md`)",
             f"{c['optimizer']} in the optimizer's step of {cpu['params']} parameters (its "
             "update recorded on the first step and replayed, one in-place update kernel per "
             "parameter, `docs/optimizers.md`)",
             f"{c['reset']} for `reset_to`'s gradient zeroing"]
    if c["read"]:
        parts.append(f"{c['read']} reading the loss back")
    return ";\n".join(parts)


def report(cmd: str, args: Any, rows: dict, sweep: dict, plain: dict, split: dict,
           profiles: dict, exact: dict, compile_s: dict, facts: dict) -> str:
    """The whole markdown file, from the run's measurements and counted facts."""
    torch_v, torch_threads, jax_v = _versions()
    ours, ref = (rows.get(n, {}).get("float64") for n in ("tape, numpy backend", TORCH))
    np_vs_torch = (f"{ours[0] / ref[0]:.0f}x" if isinstance(ref, tuple)
                   and isinstance(ours, tuple) else "many times")
    step, mm = plain["step_ms"], plain["matmul_ms"]
    np_text, np_share = profiles["numpy"]
    sim_text, sim_share = profiles["sim"]
    cpu_text, _ = profiles["cpu"]
    ops = np_share["ops_per_step"]

    def vs(name: str, other: str) -> dict[str, str]:
        return {dt: ratio(rows.get(name, {}).get(dt), rows.get(other, {}).get(dt))
                for dt in DTYPES}

    cpu_ratio, cpu_ratio1 = vs(TAPE_CPU, TORCH), vs(TAPE_CPU, TORCH_1)
    cap_jax, cap_torch = vs(CAPTURED, JAX), vs(CAPTURED, TORCH)
    kern, cstep, ccalls = split["kernel_us"], split["step_us"], split["calls_per_step"]
    exact_rows = ", ".join(e.name.split(", ")[1] for e in ENGINES if e.exact)
    floor = [v[0] for name in ("numpy + BLAS, hand-written", JAX)
             if isinstance(v := rows.get(name, {}).get("float64"), tuple)]
    floor_text = f"~{min(floor) / 1e3:.1f} ms" if floor else "-"
    pb, cpu, mmf, cap = facts["problem"], facts["cpu"], facts["matmul"], facts["captured"]
    plural = "" if cap["calls_per_step"] == 1 else "s"
    mm_phases = ", ".join(f"{n} {p}" for p, n in mmf["calls"].items())
    return f"""# One training step of the rung-1 autoencoder

Forward + backward + Adam (L2 {ALPHA:g} on the weights) of the {pb["sizes"]} autoencoder, batch
{pb["batch"]}; median over the timed steps after {args.warmup} warm-up steps, each engine cycling
the same {pb["minibatches"]} minibatches. The engines of one dtype take turns in blocks of {BLOCK}
timed steps, so load on this shared machine hits them alike; compare ratios, not absolute times. The
tape rows ({exact_rows}) are exact: their first five losses from fresh
engines were compared in this run, float64 {exact["float64"]}, float32 {exact["float32"]}.
The other engines use BLAS /
oneDNN / XLA / inductor matmuls in whatever order they like. Compilation (torch.compile, JAX
jit) happens in the untimed warm-up, never in a timed step.

Command (from the repository root, with the packages installed; `nox -s bench` does both):

```
{cmd.strip()}
```

Machine: {platform.processor() or platform.machine()}, {_cpus()} CPUs (load average at the end of
the run: {_load()}, i.e. shared with other jobs), Python
{platform.python_version()}, numpy {np.__version__}, torch {torch_v}
({torch_threads} threads), jax {jax_v}.

{table(rows)}

The exact eager tape on the `cpu` backend takes {cpu_ratio["float64"]} torch eager's step time in
float64 and {cpu_ratio["float32"]} in float32 (the issue's target: <= 1.0x), and
{cpu_ratio1["float64"]} / {cpu_ratio1["float32"]} the time of torch eager on one thread. NOTE: on a
loaded machine torch's default {torch_threads} OpenMP threads wait for each other and
its median collapses (the other core is busy); the one-thread row is the stable comparison.

The captured cpu step (the same exact step captured once with
`ggpu_replay.capture(tp, loss, backend="cpu")`: {cap["nodes"]} nodes, {cap["forward_launches"]}
forward and {cap["backward_launches"]} backward launches by `prog.stats()`; then per step the
minibatch copied in with `set_input`, forward, backward and the program's Adam in
{cap["calls_per_step"]} native call{plural} as counted, the loss read back)
takes {cap_jax["float64"]} JAX jit's step time in float64 and {cap_jax["float32"]} in float32
(the issue's target: <= 1.0x), and {cap_torch["float64"]} / {cap_torch["float32"]} torch eager's.

torch.compile (CPU): one function doing forward, loss, backward and Adam's step under
`torch.compile(dynamic=False)` (inductor's C++ CPU backend; dynamo splits it at
`loss.backward()` into the forward + loss graph, whose backward AOTAutograd compiles, and the
Adam update; Adam's step counters made float64 so its bias corrections match eager's) takes
{_compiled(rows, compile_s, args.warmup)}.

## Width sweep: cpu tape and captured cpu step vs torch eager and JAX jit

Hidden layers (w, w/2, w), same data, batch {pb["batch"]}; the engines take turns in blocks,
medians in us (steps shrink with the work: {args.sweep_steps} at w=64, at least 20). torch runs
BLAS with FMA on {torch_threads} threads; the cpu tape and the captured step keep every output's
serial k order (no FMA) and split rows across $GTENSOR_CPU_THREADS threads (default: all CPUs)
once a kernel has more than {facts["parallel_work"]} multiply-adds. The captured step runs the cpu
tape's kernels without the per-op Python, so the gap between the two is dispatch, which matters
less as the width grows. The compiled captured step (`ggpu_fuse.fuse(prog)` on the cpu program)
runs the whole step as ONE generated C++ function: ggpu-fuse's plan lowered to CPU loops (a
matmul's row tile with its epilogue in one row loop, the optimizer's updates in one loop over
element blocks), bit-identical to the captured step.

{sweep_table(sweep)}

## Where the cpu tape's time goes (float64)

Measured without a profiler over {args.profile_steps} steps, the C door timed: {cstep:,.0f} us per
step, of which {kern:,.0f} us ({100 * kern / cstep:.0f}%) is inside the compiled kernels, over
{ccalls:.0f} native calls per step. Counted phase by phase on one step ({cpu["total_calls"]} calls):
{_phase_calls(cpu)}. The remaining {cstep - kern:,.0f} us (about
{(cstep - kern) / max(ccalls, 1):.0f} us per native call) is
Python: the forward's per-op dispatch (the tape's bookkeeping, gtensor's checks and cached
launch), the replay keys of the backward pass, the optimizer's host half
(the step count, `lr_t` written into its buffer, the parameter checks).

### cProfile, cpu backend ({args.profile_steps} steps, top entries by own time)

```
{cpu_text}
```

## Where the numpy tape's time goes (float64)

**numpy backend**, measured without a profiler over {args.profile_steps} steps (the matmul
reference wrapped in a timer): {step:.2f} ms per step, of which {mm:.2f} ms
({100 * mm / step:.0f}%) is the serial-order matmul ({plain['matmuls_per_step']:.0f} matmuls per
step, counted by phase: {mm_phases}; the numpy definition issues one broadcast
multiply and one add per inner index k, i.e. 2k numpy calls per matmul). The remaining
{step - mm:.2f} ms is per-op overhead over {ops:.0f} gtensor op calls per step (forward, backward
and Adam together): about {1e3 * (step - mm) / max(ops, 1):.0f} us per op (argument checks,
shape inference, `np.errstate`, the scalar-language dispatch, the tape's bookkeeping, the
elementwise work itself).

**sim backend** (cProfile, which inflates Python-heavy code): {sim_share['total_ms_per_step']:.1f}
ms per step under the profiler, {sim_share['sim_launch_ms']:.1f} ms of it inside kernel launches
(the compiled CUDA source run on the CPU, blocks one at a time and threads as fibers: the serial
inner products plus the fiber scheduling), the rest the same per-op Python as numpy. The sim
backend exists to check the CUDA source bit for bit on any machine, not for speed.

Reading: the numpy reference tape takes {np_vs_torch} torch eager's step time on this machine: the
serial matmul in numpy and ~{ops:.0f} per-op Python dispatches per step. The `cpu` backend
compiles the first away (register-tiled SIMD kernels that keep each output's order); the second
shrinks with the cheaper eager path and goes entirely only in a captured step (replay).
Hand-written numpy+BLAS and JAX jit show the floor for this tiny network ({floor_text}), which is
dominated by per-call overhead too, not by FLOPs ({mmf["flops"] / 1e6:.1f} MFLOP of matmuls per
step, summed over the shapes counted).

### cProfile, numpy backend ({args.profile_steps} steps, top entries by own time)

```
{np_text}
```

### cProfile, sim backend

```
{sim_text}
```
"""
