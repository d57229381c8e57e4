"""The rung-1 AE training step (forward + backward + Adam with L2) captured, replayed, fused.

Engines, one run, each cycling the same ten minibatches (the problem of bench_ae_step.py):
the CPU tape (numpy backend: the reference), the captured program replayed node by node
(``forward(); backward(); dopt.step()``) and as one whole step (``prog.step(dopt)``: one CUDA
graph on cuda, the same launch list on sim), the step fused by ggpu-fuse (under one CUDA graph
on cuda), and on a GPU also PyTorch CUDA eager, a torch CUDA graph and
``torch.compile(mode="reduce-overhead")`` of the same step. Every step includes reading its
loss back to the host (a device sync), as a training loop does. Medians over the timed steps
after a warm-up. A second table gives the fusion planner's figures: launches per step before
and after fusion, and the compile time of the generated kernels (an empty kernel cache).

    python benchmarks/bench_replay_step.py --steps 300            # sim (+ cuda when present)

prints the table and writes it, with the command, to benchmarks/results/replay_step.md
(or --out FILE).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

import gtape as g  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    ALPHA,
    B1,
    B2,
    EPS,
    LR,
    Step,
    add_l2,
    captured_step,
    problem,
    torch_ae_loss,
)
from _timing import round_robin  # noqa: E402
from ae_engines import tape_step, torch_step  # noqa: E402
from gdemos import model  # noqa: E402
from ggpu_fuse import fuse  # noqa: E402
from ggpu_replay import capture  # noqa: E402


def torch_cuda_step(graph: bool, compiled: bool = False) -> Callable[[str], Step]:
    """PyTorch on the GPU: eager, forward + backward + Adam captured as one CUDA graph, or
    the step under ``torch.compile(mode="reduce-overhead")``."""
    def make(dtype: str) -> Step:
        import torch

        batches, init = problem()
        tdt = getattr(torch, dtype)
        dev = torch.device("cuda")
        xs = [torch.tensor(b, dtype=tdt, device=dev) for b in batches]
        ps = [torch.tensor(a, dtype=tdt, device=dev, requires_grad=True) for a in init]
        groups = [{"params": ps[0::2], "weight_decay": ALPHA}, {"params": ps[1::2]}]
        opt = torch.optim.Adam(groups, lr=LR, betas=(B1, B2), eps=EPS, capturable=graph)
        static_x = xs[0].clone()

        def body() -> torch.Tensor:
            loss = torch_ae_loss(ps, static_x)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            return loss

        st = {"i": 0}
        if compiled:
            # the loss compiled (forward and its backward, as CUDA graphs); the backward call
            # and Adam run as a torch user writes them
            compiled_loss = torch.compile(lambda: torch_ae_loss(ps, static_x),
                                          mode="reduce-overhead")

            def step() -> float:
                static_x.copy_(xs[st["i"] % len(xs)])
                st["i"] += 1
                torch.compiler.cudagraph_mark_step_begin()  # a new step of torch's graph pool
                loss = compiled_loss()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=False)
                return loss.item()
            return step
        if not graph:
            def step() -> float:
                static_x.copy_(xs[st["i"] % len(xs)])
                st["i"] += 1
                return body().item()
            return step
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(side)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            static_loss = body()

        def step() -> float:
            static_x.copy_(xs[st["i"] % len(xs)])
            st["i"] += 1
            cg.replay()
            return static_loss.item()
        return step
    return make


def plan_table(device: str) -> list[str]:
    """The fusion planner's figures: launches per step and compile time (empty cache)."""
    import os
    import tempfile

    sys.path.insert(0, str(ROOT / "tests-integration"))
    from graphs import GRAPHS

    rows = ["## Fusion: launches per step and compile time", "",
            f"On {device}, float64; compile time with an empty kernel cache (a fresh "
            "GTENSOR_CACHE_DIR), as a user meets it the first time.", "",
            "| graph | per-node launches | fused launches | generated kernels | compile (s) |",
            "|---|---:|---:|---:|---:|"]
    old = os.environ.get("GTENSOR_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["GTENSOR_CACHE_DIR"] = cache
        try:
            batches, init = problem()
            tp = g.Tape("numpy")
            ps = [tp.param(a) for a in init]
            x = tp.const(batches[0])
            fp = fuse(capture(tp, g.mse(model.forward(x, ps), x), backend=device))
            opt = add_l2(fp.adam(lr=LR, betas=(B1, B2), eps=EPS), ps)
            fp.step(opt)
            fp.step(opt)  # the second step plans and compiles the whole step
            step = fp.fused("step")
            rows.append(f"| AE training step (forward + backward + Adam, L2) | "
                        f"{step.launches_before} | {len(step.units)} | "
                        f"{sum(s.fused for s in step.segments)} | "
                        f"{step.compile_seconds:.1f} |")
            for graph in GRAPHS:
                data = graph.data()
                tp = g.Tape("numpy")
                v = {k: tp.param(a) if k in graph.params else tp.const(a)
                     for k, a in data.items()}
                fp = fuse(capture(tp, graph.build(v), backend=device))
                before = len(fp.forward_launches) + len(fp.backward_launches)
                after = sum(len(fp.fused(ph).units) for ph in ("forward", "backward"))
                kernels = sum(s.fused for ph in ("forward", "backward")
                              for s in fp.fused(ph).segments)
                rows.append(f"| {graph.name} (forward + backward) | {before} | {after} | "
                            f"{kernels} | {fp.compile_seconds:.1f} |")
        finally:
            if old is None:
                os.environ.pop("GTENSOR_CACHE_DIR", None)
            else:
                os.environ["GTENSOR_CACHE_DIR"] = old
    return rows


def has_gpu() -> bool:
    """Whether cupy sees a CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver
        return False


def main() -> None:
    """Run every engine, print and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replay_step.md")
    ap.add_argument("--no-host-engines", action="store_true",
                    help="leave out the sim and cpu-backend rows (a short run on a GPU machine)")
    args = ap.parse_args()
    engines: list[tuple[str, Callable[[str], Step]]] = [
        ("tape, numpy backend (CPU reference)", tape_step("numpy")),
        ("PyTorch eager (CPU)", torch_step),
        ("replay per node, sim", captured_step("sim", whole=False)),
        ("replay whole step, sim", captured_step("sim", whole=True)),
        ("fused step, sim", captured_step("sim", whole=True, fused=True)),
        ("captured step, cpu backend (one native call)", captured_step("cpu", whole=True)),
    ]
    if args.no_host_engines:
        engines = [e for e in engines if not e[0].endswith((", sim", "(one native call)"))]
    gpu = has_gpu()
    if gpu:
        engines += [
            ("replay per node, cuda", captured_step("cuda", whole=False)),
            ("replay whole step as one CUDA graph, cuda", captured_step("cuda", whole=True)),
            ("fused step as one CUDA graph, cuda", captured_step("cuda", True, fused=True)),
            ("PyTorch CUDA eager", torch_cuda_step(graph=False)),
            ("PyTorch CUDA graph", torch_cuda_step(graph=True)),
            ('torch.compile(mode="reduce-overhead"), cuda', torch_cuda_step(False, True)),
        ]
    cells: dict[str, list] = {name: [] for name, _ in engines}
    for dtype in ("float64", "float32"):
        steps, failed = {}, {}
        for name, make in engines:
            try:
                step = make(dtype)
                for _ in range(3):  # an engine that fails on a later step is reported, too
                    step()
                steps[name] = step
            except Exception as e:  # noqa: BLE001 - report the engine as failed, go on
                first = (str(e).splitlines() or [""])[0][:160]  # one table cell
                failed[name] = f"failed: {type(e).__name__}: {first}"
        timed = round_robin(steps, {n: args.steps for n in steps}, args.warmup)
        for name, _ in engines:
            cells[name].append((math.nan, failed[name]) if name in failed else timed[name][:2])
        print(dtype, {n: f"{t[0]:.1f}" for n, t in timed.items()}, flush=True)
    rows = [(name, cells[name]) for name, _ in engines]
    ref = {dt: rows[0][1][k][0] for k, dt in enumerate(("float64", "float32"))}
    lines = ["# The AE training step, captured and replayed (ggpu-replay)", "",
             "Forward + backward + Adam (L2 1e-05 on the weights) of the d-64-32-64-d "
             "autoencoder, batch 200, each engine cycling the same ten minibatches; every step "
             "includes reading its loss to the host. Median over the timed steps after "
             f"{args.warmup} warm-up steps, the engines stepped in turn (round robin) so all "
             "see the same machine load. The tape, replay and fused rows land on the same bits; "
             "torch uses its own (BLAS / cuBLAS) order.", "",
             "Command (from the repository root, with the packages installed):", "",
             "```", f"python benchmarks/bench_replay_step.py --steps {args.steps}"
             + (" --no-host-engines" if args.no_host_engines else ""), "```", "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy "
             f"{np.__version__}" + (", with a GPU" if gpu else ", no GPU (cuda rows absent)"),
             "", "| engine | float64 median (us) | vs CPU tape | float32 median (us) | "
             "vs CPU tape |", "|---|---:|---:|---:|---:|"]
    for name, cells in rows:
        out = [name]
        for k, dt in enumerate(("float64", "float32")):
            med, iqr = cells[k]
            if isinstance(iqr, str):
                out += [iqr, ""]
            else:
                out += [f"{med:,.0f} (IQR {iqr:,.0f}, n={args.steps})", f"{med / ref[dt]:.3f}x"]
        lines.append("| " + " | ".join(out) + " |")
    lines += ["", *plan_table("cuda" if gpu else "sim")]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
