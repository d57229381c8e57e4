"""One training step of rung 8's CNN or rung 8b's ResNet (forward + backward + Adam, batch 32),
ours vs torch eager.

The model is ``gdemos.cnn``'s LeNet-style CNN (Conv2d 1->16 3x3 pad 1, ReLU, MaxPool 2, Conv2d
16->32, ReLU, MaxPool 2, Linear 128->64, ReLU, Dropout 0.1, Linear 64->10; cross-entropy on int
labels; Adam with the cosine schedule) on 32 of sklearn's 8x8 digits. Engines: our tape on the
``cpu`` backend (the exact compiled kernels), the same step captured once and replayed on cpu
(ggpu-replay: one native call per step), that captured step under the fma inner-product
contract (``Tape(inner="fma")``), and ``torch.nn`` eager on CPU with the same layers, float64
and float32. The engines take turns in blocks (``_timing.round_robin``), so the ratio
comes from one run under one machine load; medians and interquartile spreads.

    python benchmarks/bench_cnn_step.py [--steps 200] [--model resnet]

prints the table and writes it, with the command, to benchmarks/results/cnn_step.md
(``--model resnet``: rung 8b's ResNet -- a stem conv + BatchNorm, two BasicBlocks, the second
strided with a 1x1 projection shortcut, global average pooling, a linear head -- against the
same torch.nn tree, to benchmarks/results/resnet_step.md).
"""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import replace
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

import gtape as g  # noqa: E402
import numpy as np  # noqa: E402
from _machine import cpu_name  # noqa: E402
from _timing import round_robin  # noqa: E402
from gdemos import cnn  # noqa: E402

CFG = cnn.CNNConfig(backend="cpu")
TORCH = "torch.nn eager, CPU, 2 threads"  # the ratios' reference (the other benches' setting)
TORCH1 = "torch.nn eager, CPU, 1 thread"
# the captured step under the fma inner-product contract (Tape(inner="fma"): each product's
# chain of fused multiply-adds; exact and the same on every engine, other bits than plain's)
FMA = "our step captured, fma contract"


# where the time goes, per model (measured once, by hand: see each paragraph)
LENET_WHERE = """
Where our time goes (cProfile of 100 tape steps, float64, measured once): about 53% inside the
native kernels (`gtensor_cpu_module.run`: 34 calls a step -- the conv2d forward and its two
gradients, the pools, the matmuls, the fused backward and Adam), the rest the tape's recording
and dispatch in Python (23 recorded nodes a step); the dropout layer's per-step keys cost
nothing measurable since they are folded 256 at a time. The captured step (one native call)
removes the Python part. The exact kernels keep each output's serial sum over (c, kh, kw) and
each weight gradient's serial sum over (n, oy, ox); torch's oneDNN kernels reassociate freely.
"""
RESNET_WHERE = """
The exact conv kernels run the matmul kernel's own product on im2col matrices (small images in
chunks; the forward's made a panel at a time by the product's pack hook, the weight gradient's
taps split across threads; docs/semantics.md), keeping each output's serial sum over
(c, kh, kw) and each weight gradient's over (n, oy, ox); BatchNorm's batch mean and biased
variance are serial sums over (n, h, w) in row-major order, each BatchNorm with its affine
one op forward and two back, its statistics and the mean's gradient included (`bn_affine`,
`bn_affine_grad`, `bn_weight_grad`: nothing stored between the normalisation and the affine).
torch's oneDNN kernels reassociate freely. Where the captured step's time goes (`perf record`
of the float64 step, both threads' samples, 2026-12-05 afternoon, after bn_affine): the conv
kernels ~57% (their products ~35%, im2col, col2im and packing ~22%), BatchNorm's ops ~12%
(their 8-channel chains run as 8-lane vectors), the pool's workers waiting between splits
~10%, the elementwise passes (relu, relu_grad, the residual add) ~3.5%, reductions ~1.6%,
Python ~3%, Adam ~0.7%. BatchNorm's affine as one op took the float64 step from 3.43 to 3.20
ms and the float32 one from 2.26 to 2.10 ms (an interleaved A/B in one process: the same
model with the affine as separate mul / add ops). Against the exact matmul of the same
multiply-adds and shape, interleaved in one process (float32, 2 threads), the 3x3 stride-1
convs take 1.05-1.3x its time forward, 1.3-1.7x as input gradient and 1.6-1.9x as weight
gradient (before the pack hook and the split taps: 1.8-2.2x, 1.8-2.1x, 2.4-2.7x); the strided
16->32 ones 1.7-1.8x / 2.0-2.2x / 2.2-2.3x, the 1x1 stride-2 projection 2-4x (short products).
Issue 41's target for this step is <= 0.6x torch eager on 2 threads: $VERDICT.
"""


def _batch() -> tuple[np.ndarray, np.ndarray]:
    xtr, ytr, _, _ = cnn.digits(0)
    return xtr[:CFG.batch], ytr[:CFG.batch]


def ours(engine: str, dtype: str, inner: str = "plain"):
    """Our step (``cnn.TapeSteps`` or ``cnn.ReplaySteps``) on cpu, one fixed batch, under the
    inner-product contract ``inner``."""
    cfg = replace(CFG, engine=engine, dtype=dtype)
    k_init, _, k_drop = cnn.keys(cfg.seed)
    tp = g.Tape("cpu", dtype, inner=inner)
    model = cnn.build(tp, cfg, k_init, k_drop)
    steps = (cnn.TapeSteps if engine == "tape" else cnn.ReplaySteps)(tp, model, cfg)
    xb, yb = _batch()
    return lambda: steps.step(xb, yb)


def torch_step(dtype: str, threads: int):
    """The same layers in torch.nn, torch.optim.Adam (no schedule: a per-step host call), on
    ``threads`` intra-op threads (set before each step: the engines take turns)."""
    import torch

    tdt = {"float64": torch.float64, "float32": torch.float32}[dtype]
    c1, c2 = CFG.channels
    nn = torch.nn
    if CFG.model == "resnet":
        model = cnn.torch_resnet(CFG).to(tdt)
    else:
        model = nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(4 * c2, CFG.hidden), nn.ReLU(),
                              nn.Dropout(CFG.dropout), nn.Linear(CFG.hidden, 10)).to(tdt)
    opt = torch.optim.Adam(model.parameters(), lr=CFG.lr)
    xb, yb = _batch()
    x, y = torch.from_numpy(xb).to(tdt), torch.from_numpy(yb)

    def step() -> float:
        torch.set_num_threads(threads)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def main() -> None:
    """Time every engine in both dtypes, print the table, write benchmarks/results/cnn_step.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per engine (default 200)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--model", choices=cnn.MODELS, default="lenet",
                    help="lenet (rung 8, the default) or resnet (rung 8b)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the table's file (default benchmarks/results/cnn_step.md, "
                         "resnet_step.md for --model resnet)")
    args = ap.parse_args()
    global CFG
    CFG = replace(CFG, model=args.model)
    if args.out is None:
        name = "cnn_step" if args.model == "lenet" else "resnet_step"
        args.out = ROOT / f"benchmarks/results/{name}.md"
    import torch

    names = {"tape": "our tape, cpu backend", "replay": "our step captured, replayed on cpu"}
    rows: dict[str, dict[str, tuple[float, float, int]]] = {n: {} for n in
                                                            [*names.values(), FMA, TORCH,
                                                             TORCH1]}
    for dtype in ("float64", "float32"):
        steps = {names[e]: ours(e, dtype) for e in names}
        steps[FMA] = ours("replay", dtype, "fma")
        steps[TORCH] = torch_step(dtype, 2)
        steps[TORCH1] = torch_step(dtype, 1)
        res = round_robin(steps, {n: args.steps for n in steps}, args.warmup, block=25)
        for name, r in res.items():
            rows[name][dtype] = r
            print(f"{name:40s} {dtype}: median {r[0]:9.1f} us (IQR {r[1]:.1f}, n={r[2]})",
                  flush=True)
    lines = ["| engine | float64 median us (IQR) | vs torch 2 / 1 threads | float32 median us "
             "(IQR) | vs torch 2 / 1 threads |", "|---|---:|---:|---:|---:|"]
    for name, r in rows.items():
        cells = []
        for dt in ("float64", "float32"):
            med, iqr, n = r[dt]
            cells += [f"{med:,.0f} ({iqr:,.0f}) n={n}",
                      f"{med / rows[TORCH][dt][0]:.2f}x / {med / rows[TORCH1][dt][0]:.2f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    c1, c2 = CFG.channels
    if CFG.model == "resnet":
        title = "rung 8b's ResNet"
        model = (f"`gdemos.cnn`'s ResNet (`cnn.build_resnet`: Conv2d 1->{c1} 3x3 pad 1 without "
                 f"bias, BatchNorm2d, ReLU; a BasicBlock {c1}->{c1}; a BasicBlock {c1}->{c2} "
                 f"with stride 2 and a strided 1x1 conv + BatchNorm2d shortcut; "
                 f"AdaptiveAvgPool2d(1), Flatten, Linear {c2}->10; training-mode BatchNorm, "
                 "its running statistics updated every step)")
        ratios = [rows[names["replay"]][dt][0] / rows[TORCH][dt][0] for dt in ("float64",
                                                                                 "float32")]
        fma = [rows[FMA][dt][0] / rows[TORCH][dt][0] for dt in ("float64", "float32")]
        verdict = "met" if max(ratios) <= 0.6 else "not met"
        where = RESNET_WHERE.replace("$VERDICT", f"{verdict} ({ratios[0]:.2f}x in float64, "
                                     f"{ratios[1]:.2f}x in float32, the table above); under "
                                     f"the fma contract {fma[0]:.2f}x / {fma[1]:.2f}x")
        flags = " --model resnet"
    else:
        title = "rung 8's CNN"
        model = (f"`gdemos.cnn`'s LeNet-style CNN (Conv2d 1->{c1} 3x3 pad 1, ReLU, MaxPool 2, "
                 f"Conv2d {c1}->{c2}, ReLU, MaxPool 2, Linear {4 * c2}->{CFG.hidden}, ReLU, "
                 f"Dropout {CFG.dropout:g}, Linear {CFG.hidden}->10)")
        where = LENET_WHERE
        flags = ""
    cmd = "python benchmarks/bench_cnn_step.py" + flags + (
        f" --steps {args.steps}" if args.steps != 200 else "")
    text = f"""# One training step of {title}

Forward + backward + Adam of {model}; cross-entropy on int labels, on one batch of {CFG.batch}
8x8 digits; ours with Adam and the cosine schedule, torch with torch.optim.Adam. The engines
take turns in blocks of 25 steps after {args.warmup} untimed steps each, so every ratio comes
from one run under one machine load. Ours is exact (each output's serial sum in the defined
order; the same bits on numpy, sim, cpu and replayed); torch uses oneDNN/MKL kernels.

Command (from the repository root, with torch installed):

```
{cmd}
```

Machine: {platform.machine()}, {cpu_name()},
{platform.python_implementation()} {platform.python_version()}, numpy {np.__version__},
torch {torch.__version__}; load average when the run ended {load}. The
machine is shared (2 cores, other jobs running): torch's two threads wait on each other under
that load (its wide IQR), so the table also has torch on one thread and the ratios are given
against both (our cpu backend uses its own threads, `GTENSOR_CPU_THREADS`).

{table}
{where}"""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
