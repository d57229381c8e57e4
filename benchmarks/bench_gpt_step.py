"""One training step of rung 9's character GPT, ours vs torch eager and torch.compile.

The model is ``gdemos.gpt_model``'s GPT (pre-norm blocks, causal attention with dropout on the
weights, exact-GELU MLP, tied head, dropout 0.1; AdamW with decay / no-decay groups, torch's
global clipping at 1.0) at rung 9's default size (``small``: block 32, 2 layers, 4 heads,
n_embd 48, batch 16) and 4x wider (n_embd 192), on one fixed batch of the plays. Engines: our
tape on the ``cpu`` backend (the exact compiled kernels), the same step captured once and
replayed on cpu (ggpu-replay: one native call a step), that program fused (ggpu-fuse: each
phase one compiled function), and the same model written in torch.nn
(``F.scaled_dot_product_attention(is_causal=True)``, ``nn.GELU()``, the tied head, the same
groups and clipping; torch.optim.AdamW, no schedule), eager and under ``torch.compile`` (the
module compiled, the optimizer eager; where it runs), each at 1 and 2 threads (ours:
``GTENSOR_CPU_THREADS``, torch: ``set_num_threads``, set before every step), float64 and
float32. The engines take turns in blocks (``_timing.round_robin``) and the whole round robin
runs ``--runs`` times: every ratio comes from one process under one machine load; the table
gives the median over runs of each run's median step.

    python benchmarks/bench_gpt_step.py [--runs 3] [--steps 30] [--wide-steps 10] [--no-compile]
        [--sizes small "wide (4x)"] [--out PATH]

Our captured and fused steps also run under the fma inner-product contract (rows marked fma).

prints the table and writes it, with the command, to benchmarks/results/gpt_step.md.
"""

from __future__ import annotations

import argparse
import os

# numpy's OpenBLAS workers spin between BLAS calls on this 2-core host, taking time from
# whichever engine runs next; no engine's step calls numpy's BLAS (torch uses its own MKL)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import platform
import statistics
import time
from pathlib import Path

import _paths  # first of ours: puts the repository's packages on sys.path

ROOT = _paths.ROOT

import gtape as g  # noqa: E402
import numpy as np  # noqa: E402
from _machine import cpu_name  # noqa: E402
from _timing import round_robin  # noqa: E402
from gdemos import gpt  # noqa: E402
from gdemos import gpt_model as M  # noqa: E402

RUN = gpt.GPTRun(backend="cpu")
WIDTHS = {"small": 48, "wide (4x)": 192}  # n_embd of the two configurations
THREADS = (1, 2)


def _data(width: int, dtype: str):
    """(run, model config, inputs, targets): rung 9's run in ``dtype`` with ``width``
    channels, and its first training batch."""
    from dataclasses import replace

    run = replace(RUN, dtype=dtype)
    corpus, cfg = gpt.load(run)
    cfg = replace(cfg, n_embd=width)
    k_data, _ = gpt.keys(run.seed)
    x, y = gpt.train_batch(corpus, k_data, 0, run.rows, cfg.block)
    return run, cfg, x, y


def ours(engine: str, width: int, dtype: str, threads: int, inner: str = "plain") -> tuple:
    """(step, seconds to build it): our step (``gpt.TapeSteps`` or ``gpt.ReplaySteps``, the
    latter captured and compiled here) on cpu, on ``threads`` threads, one fixed batch, under
    inner-product contract ``inner``."""
    run, cfg, x, y = _data(width, dtype)
    tp = g.Tape("cpu", dtype, seed=run.seed, inner=inner)
    model = M.GPT(tp, cfg)
    t0 = time.perf_counter()
    steps = gpt.TapeSteps(tp, model, run) if engine == "tape" else \
        gpt.ReplaySteps(tp, model, run, x, y, fused=engine == "fused")
    built = time.perf_counter() - t0

    def step() -> float:
        os.environ["GTENSOR_CPU_THREADS"] = str(threads)  # read at every launch
        return steps.step(x, y)
    return step, built


def torch_model(width: int, dtype: str):
    """Rung 9's GPT in torch.nn (nanoGPT's layout, SDPA, exact GELU, tied head)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    run, cfg, _, _ = _data(width, dtype)
    c, p = cfg.n_embd, cfg.dropout

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.gelu, self.drop = nn.GELU(), nn.Dropout(p)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, cfg.n_head, c // cfg.n_head).transpose(1, 2)
                       for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=p if self.training else 0.0,
                                               is_causal=True)
            x = x + self.drop(self.attn_proj(a.transpose(1, 2).reshape(b, t, c)))
            return x + self.drop(self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x)))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(cfg.vocab, c), nn.Embedding(cfg.block, c)
            self.drop = nn.Dropout(p)
            self.h = nn.ModuleList([Block() for _ in range(cfg.n_layer)])
            self.ln_f = nn.LayerNorm(c)

        def forward(self, ids, targets):
            x = self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1])))
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))

    tdt = {"float64": torch.float64, "float32": torch.float32}[dtype]
    return GPT().to(tdt), run


def torch_step(width: int, dtype: str, threads: int, compiled: bool) -> tuple:
    """(step, seconds of its first call): torch's step on ``threads`` threads, eager or with
    the module under ``torch.compile`` (the first call compiles)."""
    import torch

    model, run = torch_model(width, dtype)
    named = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [q for _, q in named if q.ndim >= 2]},
                             {"params": [q for _, q in named if q.ndim < 2],
                              "weight_decay": 0.0}],
                            lr=run.lr, betas=run.betas, weight_decay=run.weight_decay)
    fwd = torch.compile(model) if compiled else model
    _, _, xb, yb = _data(width, dtype)
    x, y = torch.from_numpy(xb), torch.from_numpy(yb)

    def step() -> float:
        torch.set_num_threads(threads)
        opt.zero_grad(set_to_none=True)
        loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.clip)
        opt.step()
        return float(loss.detach())
    t0 = time.perf_counter()
    step()
    return step, time.perf_counter() - t0


def engines(width: int, dtype: str, compile_: bool) -> tuple[dict, dict]:
    """({engine name: step}, {engine name: build / first-call seconds}) of one config."""
    steps, built = {}, {}
    for t in THREADS:
        for e, inner, label in (("tape", "plain", "our tape, cpu"),
                                ("replay", "plain", "our step captured, cpu"),
                                ("fused", "plain", "our step fused, cpu"),
                                ("replay", "fma", "our step captured, cpu, fma"),
                                ("fused", "fma", "our step fused, cpu, fma")):
            steps[f"{label}, {t}t"], built[f"{label}, {t}t"] = ours(e, width, dtype, t, inner)
        steps[f"torch eager, {t}t"], built[f"torch eager, {t}t"] = torch_step(width, dtype, t,
                                                                              False)
        if compile_:
            name = f"torch.compile, {t}t"
            try:
                steps[name], built[name] = torch_step(width, dtype, t, True)
            except Exception as exc:  # noqa: BLE001  (reported in the table, not fatal)
                built[name] = f"did not run: {type(exc).__name__}: {str(exc)[:120]}"
    return steps, built


def main() -> None:
    """Time every engine in both dtypes and both configs; write benchmarks/results/gpt_step.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="round robins per config (default 3)")
    ap.add_argument("--steps", type=int, default=30,
                    help="timed steps per engine and run, small config (default 30)")
    ap.add_argument("--wide-steps", type=int, default=10,
                    help="timed steps per engine and run, wide config (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--sizes", nargs="+", choices=list(WIDTHS), default=list(WIDTHS),
                    metavar="SIZE", help=f"configs to time (default all: {list(WIDTHS)})")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/gpt_step.md")
    args = ap.parse_args()
    import torch

    sections = []
    for size, width in WIDTHS.items():
        if size not in args.sizes:
            continue
        n = args.steps if width == WIDTHS["small"] else args.wide_steps
        cols: dict[str, dict[str, tuple]] = {}
        for dtype in ("float64", "float32"):
            steps, built = engines(width, dtype, not args.no_compile)
            per: dict[str, list[float]] = {name: [] for name in steps}
            for _ in range(args.runs):
                res = round_robin(steps, {k: n for k in steps}, args.warmup, block=5)
                for name, (med, _, _) in res.items():
                    per[name].append(med)
            for name in built:
                cols.setdefault(name, {})[dtype] = (per.get(name), built[name])
                print(f"{size} {dtype} {name:28s} "
                      f"{statistics.median(per[name]) if name in per else built[name]}",
                      flush=True)
        sections.append((size, width, n, cols))
    text = _report(args, sections, torch.__version__)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out}")


def _report(args: argparse.Namespace, sections: list, torch_version: str) -> str:
    """The markdown: the command, the machine, one table per config."""
    cmd = "python benchmarks/bench_gpt_step.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("runs", args.runs), ("steps", args.steps),
                                                    ("wide_steps", args.wide_steps))
        if v != {"runs": 3, "steps": 30, "wide_steps": 10}[k]) + (
        " --no-compile" if args.no_compile else "")
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    out = [f"""# One training step of rung 9's GPT: ours vs torch eager and torch.compile

Forward + backward + AdamW (decay / no-decay groups, torch's global clipping at 1.0) of
`gdemos.gpt_model`'s character GPT (block 32, 2 pre-norm layers, 4 heads, dropout 0.1, exact
GELU, tied head) at rung 9's default width (n_embd 48) and 4x wider (192), batch 16, one fixed
batch of the plays. Ours: the eager tape, the captured step (ggpu-replay) and that step fused
(ggpu-fuse: each phase one compiled function), cpu backend, AdamW with rung 9's warmup-cosine
schedule; torch: the same model in torch.nn (SDPA causal,
`nn.GELU()`), torch.optim.AdamW without a schedule, eager and with the module under
`torch.compile`. Threads: ours `GTENSOR_CPU_THREADS`, torch `set_num_threads`, set before
every step. The engines of one config and dtype take turns in blocks of 5 steps after
{args.warmup} untimed steps each, {args.runs} times; each cell is the median over the runs of
the run's median step (ms), with the ratio to torch eager at the same thread count. Ours is
exact (each output's serial sum in the defined order; the same bits on numpy, sim, cpu and
replayed) under the plain inner-product contract (each product rounded, then added: the
rung's) and, in the rows marked fma, under the fma contract (each step of a chain one fused
multiply-add: as exact and reproducible, other bits); torch reassociates freely.

Command (from the repository root, with torch installed):

```
{cmd}
```

Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} CPUs,
{platform.python_implementation()}
{platform.python_version()}, numpy {np.__version__}, torch {torch_version}; load average when
the run ended {load}. "build": seconds to build our engine (the captured step: recording,
capture and its native compile; the fused one also its fusion; with the kernel cache as this
run found it) or torch's first
step (torch.compile's compile).
"""]
    for size, width, n, cols in sections:
        out.append(f"\n## {size}: n_embd {width}, {n} timed steps per engine and run\n")
        out.append("| engine | float64 ms | vs torch eager | build s | float32 ms | "
                   "vs torch eager | build s |")
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for name, by in cols.items():
            threads = name.rsplit(", ", 1)[1]
            cells = []
            for dt in ("float64", "float32"):
                meds, built = by.get(dt, (None, "-"))
                if not meds:
                    cells += ["-", "-", str(built)]
                    continue
                med = statistics.median(meds) / 1e3
                ref = statistics.median(cols[f"torch eager, {threads}"][dt][0]) / 1e3
                cells += [f"{med:,.2f}", f"{med / ref:.2f}x", f"{built:.1f}"]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
