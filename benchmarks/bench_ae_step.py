"""One training step (forward + backward + Adam) of the rung-1 autoencoder, engine by engine.

The d-64-32-64-d autoencoder (relu hidden, linear out, MSE), batch 200, Adam lr 1e-3 with L2 1e-5
on the weights, float64 and float32. Engines (the ``ENGINES`` table; add a row to add a column):
our tape on the numpy, sim and cpu backends, hand-written numpy + BLAS, PyTorch eager (CPU), JAX
jit (when it imports). Each engine cycles through the same ten minibatches. The engines of one
dtype take turns in blocks of 50 timed steps, so load on a shared machine hits all of them
alike while each block runs with its own data in cache; each step is timed (perf_counter_ns)
after a warm-up, and we report medians and ratios to torch eager. A width sweep (hidden
64 -> 256 -> 1024) times the cpu tape against torch eager, and profiles of the tape steps say
where our time goes.

    python benchmarks/bench_ae_step.py --steps 1000

prints the tables and writes them, with the command and the profiles, to
benchmarks/results/ae_step.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in ("gtensor", "gtape", "gopt", "gdemos"):
    sys.path.insert(0, str(ROOT / "packages" / _p / "src"))

import gtape as g  # noqa: E402
from gdemos import data, model  # noqa: E402
from gopt import Adam  # noqa: E402

BATCH, LR, ALPHA, B1, B2, EPS = 200, 1e-3, 1e-5, 0.9, 0.999, 1e-8
WIDTHS = (64, 256, 1024)  # the width sweep: hidden layers (w, w/2, w)
BLOCK = 50  # consecutive timed steps of one engine before the next engine's turn
Step = Callable[[], float]
Make = Callable[..., Step]  # make(dtype, hidden=model.HIDDEN) -> a step function


def problem(hidden: tuple[int, ...] = model.HIDDEN) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Ten minibatches of the rung-1 data and the initial parameters [W1, b1, ...]."""
    x = data.manifold(0)
    _, init_rng, order_rng = data.rngs(0)
    params = model.init_params(init_rng, model.layer_sizes(x.shape[1], tuple(hidden)))
    return [x[i] for i in data.batch_order(order_rng, len(x), BATCH)], params


# ---------------------------------------------------------------- engines: make(dtype, hidden)
def tape_step(backend: str) -> Make:
    """Our tape on ``backend``: the mark/reset minibatch loop body of rung 1."""
    def make(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
        batches, init = problem(hidden)
        tp = g.Tape(backend, dtype)
        ps = [tp.param(a) for a in init]
        opt = Adam(tp, lr=LR)
        for k, p in enumerate(ps):
            opt.add(p, alpha=ALPHA if k % 2 == 0 else 0.0)
        mark = tp.mark()
        state = {"i": 0}

        def step() -> float:
            xb = tp.const(batches[state["i"] % len(batches)])
            state["i"] += 1
            loss = g.mse(model.forward(xb, ps), xb)
            tp.backward(loss)
            opt.step()
            value = float(tp.backend.to_numpy(tp.value(loss)))
            tp.reset_to(mark)
            return value
        return step
    return make


def numpy_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """Hand-written numpy backprop + Adam (BLAS matmuls, in-place updates)."""
    batches, init = problem(hidden)
    dt = np.dtype(dtype)
    batches = [b.astype(dt) for b in batches]
    ps = [a.astype(dt) for a in init]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    st = {"i": 0, "b1p": 1.0, "b2p": 1.0}

    def step() -> float:
        xb = batches[st["i"] % len(batches)]
        st["i"] += 1
        acts, pre = [xb], []
        for k in range(4):
            z = acts[-1] @ ps[2 * k] + ps[2 * k + 1]
            pre.append(z)
            acts.append(np.maximum(z, 0) if k < 3 else z)
        diff = acts[-1] - xb
        loss = float(np.mean(diff * diff))
        delta = diff * dt.type(2.0 / diff.size)
        grads = [None] * 8
        for k in range(3, -1, -1):
            grads[2 * k] = acts[k].T @ delta
            grads[2 * k + 1] = delta.sum(axis=0, keepdims=True)
            if k:
                delta = (delta @ ps[2 * k].T) * (pre[k - 1] > 0)
        st["b1p"] *= B1
        st["b2p"] *= B2
        lr_t = dt.type(LR * math.sqrt(1.0 - st["b2p"]) / (1.0 - st["b1p"]))
        for k, (p, gr, m, v) in enumerate(zip(ps, grads, ms, vs)):
            if k % 2 == 0:
                gr += dt.type(ALPHA) * p
            m *= dt.type(B1)
            m += dt.type(1 - B1) * gr
            v *= dt.type(B2)
            v += dt.type(1 - B2) * (gr * gr)
            p -= lr_t * m / (np.sqrt(v) + dt.type(EPS))
        return loss
    return step


def torch_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """PyTorch eager: nn-free modules, F.mse_loss, torch.optim.Adam with per-group weight decay."""
    import torch

    batches, init = problem(hidden)
    tdt = getattr(torch, dtype)
    xs = [torch.tensor(b, dtype=tdt) for b in batches]
    ps = [torch.tensor(a, dtype=tdt, requires_grad=True) for a in init]
    groups = [{"params": ps[0::2], "weight_decay": ALPHA}, {"params": ps[1::2]}]
    opt = torch.optim.Adam(groups, lr=LR, betas=(B1, B2), eps=EPS)
    st = {"i": 0}

    def step() -> float:
        xb = xs[st["i"] % len(xs)]
        st["i"] += 1
        h = xb
        for k in range(4):
            h = torch.addmm(ps[2 * k + 1], h, ps[2 * k])
            if k < 3:
                h = torch.relu(h)
        loss = torch.nn.functional.mse_loss(h, xb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def torch_step_1thread(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """PyTorch eager on one thread (``torch.set_num_threads(1)`` around each step, ~0.2 us)."""
    import torch

    inner = torch_step(dtype, hidden)

    def step() -> float:
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return inner()
        finally:
            torch.set_num_threads(n)
    return step


def jax_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """JAX: value_and_grad + Adam (same formulas as gopt) in one jitted function."""
    import jax
    import jax.numpy as jnp

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    batches, init = problem(hidden)
    xs = [jnp.asarray(b, dtype=dtype) for b in batches]
    ps = [jnp.asarray(a, dtype=dtype) for a in init]
    ms = [jnp.zeros_like(p) for p in ps]
    vs = [jnp.zeros_like(p) for p in ps]

    def loss_fn(params, xb):
        h = xb
        for k in range(4):
            h = h @ params[2 * k] + params[2 * k + 1]
            if k < 3:
                h = jax.nn.relu(h)
        return jnp.mean((h - xb) ** 2)

    @jax.jit
    def update(params, ms, vs, xb, lr_t):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb)
        new_p, new_m, new_v = [], [], []
        for k, (p, gr, m, v) in enumerate(zip(params, grads, ms, vs)):
            if k % 2 == 0:
                gr = gr + ALPHA * p
            m = B1 * m + (1 - B1) * gr
            v = B2 * v + (1 - B2) * (gr * gr)
            new_p.append(p - lr_t * m / (jnp.sqrt(v) + EPS))
            new_m.append(m)
            new_v.append(v)
        return loss, new_p, new_m, new_v

    st = {"i": 0, "b1p": 1.0, "b2p": 1.0, "p": ps, "m": ms, "v": vs}

    def step() -> float:
        xb = xs[st["i"] % len(xs)]
        st["i"] += 1
        st["b1p"] *= B1
        st["b2p"] *= B2
        lr_t = LR * math.sqrt(1.0 - st["b2p"]) / (1.0 - st["b1p"])
        loss, st["p"], st["m"], st["v"] = update(st["p"], st["m"], st["v"], xb, lr_t)
        return float(loss)  # blocks until the step is done
    return step


# ---------------------------------------------------------------- the engine table
@dataclass(frozen=True)
class Engine:
    """One column of the benchmark: a name, a step factory and whether it is exact."""

    name: str
    make: Make
    exact: bool = False  # bit-identical to the numpy tape
    slow: bool = False  # timed for --slow-steps only (the sim tape)


TORCH = "PyTorch eager (CPU)"
TORCH_1 = "PyTorch eager (CPU), 1 thread"
ENGINES: list[Engine] = [
    Engine("tape, numpy backend", tape_step("numpy"), exact=True),
    Engine("tape, sim backend", tape_step("sim"), exact=True, slow=True),
    Engine("tape, cpu backend", tape_step("cpu"), exact=True),
    Engine("numpy + BLAS, hand-written", numpy_step),
    Engine(TORCH, torch_step),
    Engine(TORCH_1, torch_step_1thread),
    Engine("JAX jit (CPU)", jax_step),
]


# ---------------------------------------------------------------- timing and profile
def round_robin(steps: dict[str, Step], counts: dict[str, int], warmup: int, block: int = BLOCK
                ) -> dict[str, tuple[float, float, int]]:
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
    out = {}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        out[name] = (statistics.median(ts) / 1e3, (q[2] - q[0]) / 1e3, len(ts))
    return out


def width_sweep(widths: tuple[int, ...], steps: int, warmup: int) -> dict[int, dict]:
    """cpu tape vs torch eager (all threads, one thread) at hidden widths (w, w/2, w).

    Steps shrink with the work (~w**2): ``steps`` at w=64, at least 20.
    """
    rows: dict[int, dict] = {}
    for w in widths:
        hidden = (w, w // 2, w)
        n = max(20, int(steps * (64 / w) ** 2))
        for dtype in ("float64", "float32"):
            makers = {"cpu": tape_step("cpu"), "torch": torch_step, "torch1": torch_step_1thread}
            res = round_robin({k: m(dtype, hidden) for k, m in makers.items()},
                              {k: n for k in makers}, max(5, warmup // 5), max(5, n // 10))
            rows.setdefault(w, {})[dtype] = res
            print(f"width {w:5d} {dtype}: cpu tape {res['cpu'][0]:10.1f} us, torch "
                  f"{res['torch'][0]:10.1f} us, torch 1 thread {res['torch1'][0]:10.1f} us",
                  flush=True)
    return rows


def cpu_split(steps: int) -> dict[str, float]:
    """Unprofiled cpu-tape step time and its part inside the compiled kernels (one C call per
    gtensor op), so the rest is Python: gtensor dispatch plus the tape and the optimizer."""
    import gtensor

    be = gtensor.backend("cpu")
    step = tape_step("cpu")("float64")
    for _ in range(20):
        step()
    module = be.module
    inner, spent = module.run, [0, 0]

    def timed(*args):
        t0 = time.perf_counter_ns()
        try:
            return inner(*args)
        finally:
            spent[0] += time.perf_counter_ns() - t0
            spent[1] += 1

    module.run = timed
    try:
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        total = time.perf_counter_ns() - t0
    finally:
        module.run = inner
    return {"step_us": total / steps / 1e3, "kernel_us": spent[0] / steps / 1e3,
            "ops_per_step": spent[1] / steps}


def matmul_share(steps: int) -> dict[str, float]:
    """Unprofiled numpy-tape step time and the part spent in the serial matmul reference."""
    from gtensor import REGISTRY

    op = REGISTRY["matmul"]
    inner = op.reference
    spent = [0.0, 0]

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    step = tape_step("numpy")("float64")
    for _ in range(20):
        step()
    object.__setattr__(op, "reference", timed)  # Op is frozen: patch for the measurement only
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        total = time.perf_counter() - t0
    finally:
        object.__setattr__(op, "reference", inner)
    return {"step_ms": 1e3 * total / steps, "matmul_ms": 1e3 * spent[0] / steps,
            "matmuls_per_step": spent[1] / steps}


def profile_tape(backend: str, steps: int) -> tuple[str, dict[str, float]]:
    """cProfile of one tape step: the top entries and the time of named phases (ms per step)."""
    step = tape_step(backend)("float64")
    for _ in range(20):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt
    cum = {f"{Path(k[0]).name}:{k[2]}": v[3] for k, v in st.stats.items()}
    calls = {f"{Path(k[0]).name}:{k[2]}": v[1] for k, v in st.stats.items()}
    share = {
        "total_ms_per_step": 1e3 * total / steps,
        "serial_matmul_ms": 1e3 * cum.get("linalg.py:serial_matmul", 0.0) / steps,
        "sim_launch_ms": 1e3 * cum.get("sim.py:launch", 0.0) / steps,
        "ops_per_step": calls.get("base.py:apply", 0) / steps,
        "backward_ms": 1e3 * cum.get("backward.py:run", 0.0) / steps,
        "optimizer_ms": 1e3 * cum.get("base.py:step", 0.0) / steps,
    }
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    text = "\n".join(line for line in buf.getvalue().splitlines()
                     if line.strip() and not line.startswith(("   Ordered", "   List")))
    return text, share


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
    args = ap.parse_args(argv)
    rows: dict[str, dict[str, tuple[float, float, int] | str]] = {}
    for dtype in ("float64", "float32"):
        steps, counts = {}, {}
        for e in ENGINES:
            try:
                steps[e.name] = e.make(dtype)
            except ImportError as err:
                rows.setdefault(e.name, {})[dtype] = f"not installed ({err.name})"
                continue
            counts[e.name] = (args.sim_steps or args.steps) if e.slow else args.steps
        for name, res in round_robin(steps, counts, args.warmup).items():
            rows.setdefault(name, {})[dtype] = res
            print(f"{dtype:8s} {name:28s} median {res[0]:9.1f} us (IQR {res[1]:.1f}, "
                  f"{res[2]} steps)", flush=True)
    rows = {e.name: rows[e.name] for e in ENGINES if e.name in rows}
    sweep = width_sweep(WIDTHS, args.sweep_steps, args.warmup)
    plain = matmul_share(args.profile_steps)
    split = cpu_split(args.profile_steps)
    profiles = {b: profile_tape(b, args.profile_steps) for b in ("numpy", "sim", "cpu")}
    table = _table(rows)
    print(table)
    print(plain, split, {b: p[1] for b, p in profiles.items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_report(argv, args, table, plain, profiles, rows, sweep, split))
    print(f"wrote {args.out}")
    return 0


def _table(rows: dict) -> str:
    torch_ = rows.get(TORCH, {})
    lines = ["| engine | float64 median (us) | vs torch eager | float32 median (us) | "
             "vs torch eager |", "|---|---:|---:|---:|---:|"]
    for name, by_dt in rows.items():
        cells = [name]
        for dt in ("float64", "float32"):
            v, ref = by_dt.get(dt), torch_.get(dt)
            if isinstance(v, tuple):
                ratio = f"{v[0] / ref[0]:.2f}x" if isinstance(ref, tuple) else "-"
                cells += [f"{v[0]:,.0f} (IQR {v[1]:,.0f}, n={v[2]})", ratio]
            else:
                cells += [str(v), "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _sweep_table(sweep: dict) -> str:
    lines = ["| hidden (w, w/2, w) | dtype | cpu tape (us) | torch eager (us) | ratio | "
             "torch eager, 1 thread (us) | ratio |", "|---|---|---:|---:|---:|---:|---:|"]
    for w, by_dt in sweep.items():
        for dt in ("float64", "float32"):
            ours, ref, ref1 = (by_dt[dt][k] for k in ("cpu", "torch", "torch1"))
            lines.append(f"| {w}, {w // 2}, {w} | {dt} | {ours[0]:,.0f} (n={ours[2]}) | "
                         f"{ref[0]:,.0f} | {ours[0] / ref[0]:.2f}x | {ref1[0]:,.0f} | "
                         f"{ours[0] / ref1[0]:.2f}x |")
    return "\n".join(lines)


def _report(argv, args, table: str, plain: dict, profiles: dict, rows: dict, sweep: dict,
            split: dict) -> str:
    import torch

    ref = rows.get(TORCH, {}).get("float64")
    ours = rows.get("tape, numpy backend", {}).get("float64")
    ratio = (f"{ours[0] / ref[0]:.0f}x" if isinstance(ref, tuple) and isinstance(ours, tuple)
             else "many times")

    try:
        import jax
        jax_v = jax.__version__
    except ImportError:
        jax_v = "not installed"
    cmd = "python benchmarks/bench_ae_step.py " + " ".join(argv if argv is not None
                                                          else sys.argv[1:])
    step, mm = plain["step_ms"], plain["matmul_ms"]
    np_text, np_share = profiles["numpy"]
    sim_text, sim_share = profiles["sim"]
    cpu_text, _ = profiles["cpu"]
    ops = np_share["ops_per_step"]
    cpu_row = rows.get("tape, cpu backend", {})

    def vs(name: str, dt: str) -> str:
        ref_row = rows.get(name, {})
        ok = isinstance(cpu_row.get(dt), tuple) and isinstance(ref_row.get(dt), tuple)
        return f"{cpu_row[dt][0] / ref_row[dt][0]:.2f}x" if ok else "-"

    cpu_ratio = {dt: vs(TORCH, dt) for dt in ("float64", "float32")}
    cpu_ratio1 = {dt: vs(TORCH_1, dt) for dt in ("float64", "float32")}
    kern, cstep, cops = split["kernel_us"], split["step_us"], split["ops_per_step"]
    exact = ", ".join(e.name.split(", ")[1] for e in ENGINES if e.exact)
    return f"""# One training step of the rung-1 autoencoder

Forward + backward + Adam (L2 {ALPHA:g} on the weights) of the d-64-32-64-d autoencoder, batch
{BATCH}; median over the timed steps after {args.warmup} warm-up steps, each engine cycling the
same ten minibatches. The engines of one dtype take turns in blocks of {BLOCK} timed steps, so
load on this shared machine hits them alike; compare ratios, not absolute times. The
tape rows ({exact}) are exact (bit-identical to each other); the other engines use BLAS /
oneDNN / XLA matmuls in whatever order they like.

Command (from the repository root, with the packages installed; `nox -s bench` does both):

```
{cmd.strip()}
```

Machine: {platform.processor() or platform.machine()}, {_cpus()} CPUs (load average at the end of
the run: {_load()}, i.e. shared with other jobs), Python
{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}
({torch.get_num_threads()} threads), jax {jax_v}.

{table}

The exact eager tape on the `cpu` backend takes {cpu_ratio["float64"]} torch eager's step time in
float64 and {cpu_ratio["float32"]} in float32 (the issue's target: <= 1.0x), and
{cpu_ratio1["float64"]} / {cpu_ratio1["float32"]} the time of torch eager on one thread. NOTE: on a
loaded machine torch's default {torch.get_num_threads()} OpenMP threads wait for each other and
its median collapses (the other core is busy); the one-thread row is the stable comparison.

## Width sweep: cpu tape vs torch eager

Hidden layers (w, w/2, w), same data, batch {BATCH}; the engines take turns in blocks, medians in us
(steps shrink with the work: {args.sweep_steps} at w=64). torch runs BLAS with FMA on
{torch.get_num_threads()} threads; the cpu tape keeps every output's serial k order (no FMA) and
splits rows across $GTENSOR_CPU_THREADS threads (default: all CPUs) once a kernel has more than
4M multiply-adds.

{_sweep_table(sweep)}

## Where the cpu tape's time goes (float64)

Measured without a profiler over {args.profile_steps} steps, the C door timed: {cstep:,.0f} us per
step, of which {kern:,.0f} us ({100 * kern / cstep:.0f}%) is inside the compiled kernels
({cops:.0f} kernel calls per step, one per gtensor op). The remaining {cstep - kern:,.0f} us is
Python: about {(cstep - kern) / cops:.1f} us per op, split between gtensor's dispatch (argument
checks, one dict lookup of the call's shape rule and prepared launch, the C call) and the
tape and optimizer around it (gtape's node bookkeeping and backward engine, gopt's workspace).

### cProfile, cpu backend ({args.profile_steps} steps, top entries by own time)

```
{cpu_text}
```

## Where the numpy tape's time goes (float64)

**numpy backend**, measured without a profiler over {args.profile_steps} steps (the matmul
reference wrapped in a timer): {step:.2f} ms per step, of which {mm:.2f} ms
({100 * mm / step:.0f}%) is the serial-order matmul ({plain['matmuls_per_step']:.0f} matmuls per
step: 4 forward, 7 backward; the numpy definition issues one broadcast multiply and one add per
inner index k, i.e. 2k numpy calls per matmul). The remaining {step - mm:.2f} ms is per-op
overhead over {ops:.0f} gtensor op calls per step (forward, backward and Adam together):
about {1e3 * (step - mm) / ops:.0f} us per op (argument checks, shape inference, `np.errstate`,
the scalar-language dispatch, the tape's bookkeeping, the elementwise work itself).

**sim backend** (cProfile, which inflates Python-heavy code): {sim_share['total_ms_per_step']:.1f}
ms per step under the profiler, {sim_share['sim_launch_ms']:.1f} ms of it inside kernel launches
(the compiled CUDA source run on the CPU, blocks one at a time and threads as fibers: the serial
inner products plus the fiber scheduling), the rest the same per-op Python as numpy. The sim
backend exists to check the CUDA source bit for bit on any machine, not for speed.

Reading: the numpy reference tape takes {ratio} torch eager's step time on this machine: the
serial matmul in numpy and ~{ops:.0f} per-op Python dispatches per step. The `cpu` backend
compiles the first away (register-tiled SIMD kernels that keep each output's order); the second
shrinks with the cheaper eager path and goes entirely only in a captured step (replay).
Hand-written numpy+BLAS and JAX jit show the floor for this tiny network (~0.3 ms), which is
dominated by per-call overhead too, not by FLOPs (about 5.6 MFLOP per step).

### cProfile, numpy backend ({args.profile_steps} steps, top entries by own time)

```
{np_text}
```

### cProfile, sim backend

```
{sim_text}
```
"""


def _load() -> str:
    import os

    return " / ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


if __name__ == "__main__":
    sys.exit(main())
