"""Rung 3 as a program: LoRA-finetune a Qwen2 model on a text, merge, check it reproduces the text.

Writes ``OUT/lora_summary.json``, ``OUT/lora_loss.png`` and the merged model under
``OUT/merged`` (config.json + model.safetensors, loadable by transformers), which is loaded
back and greedy-decoded through the numpy inference path from the first tokens of the text.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from . import lora_train as lt
from . import report
from .qwen2 import Qwen2

ENGINES = ("tape", "replay")
DROP_BAR = 10.0  # the final CE must be at least this many times below the first


@dataclass
class LoRARun:
    """A finished rung-3 run: the result and the files written."""

    result: lt.LoRAResult
    model_desc: str
    summary_path: Path
    plot_path: Path
    merged_path: Path

    @property
    def passed(self) -> bool:
        """Reproduced the text, and the loss fell by DROP_BAR or more."""
        r = self.result
        return r.reproduced and r.final_loss * DROP_BAR <= r.losses[0]

    def verdict_detail(self) -> str:
        """The numbers on one line."""
        r = self.result
        c = r.config
        return (f"CE {r.losses[0]:.4g} -> {r.final_loss:.4g} in {c.steps} Adam steps on "
                f"{r.tokens} tokens ({self.model_desc}, r={c.rank}), {r.seconds:.1f} s on "
                f"{c.backend} ({c.engine}); merged model reproduced the text: "
                f"{'yes' if r.reproduced else 'NO'}; plot {self.plot_path}")


def load_model(model_dir: Path | None, dtype: str, seed: int) -> tuple[Qwen2, str]:
    """The model of ``model_dir``, or the small random Qwen2 (``lora_train.SMALL``)."""
    if model_dir is not None:
        m = Qwen2.from_pretrained(model_dir, dtype=dtype)
        return m, f"{model_dir} {m.config.num_hidden_layers} layers {dtype}"
    c = lt.SMALL
    m = Qwen2.random(c, seed=seed, dtype=dtype)
    return m, (f"random Qwen2 h{c.hidden_size} L{c.num_hidden_layers} "
               f"heads {c.num_attention_heads}/{c.num_key_value_heads} vocab {c.vocab_size} "
               f"{dtype}")


def plot(path: Path, losses: list[float], title: str, text: str | None = None,
         generated: str | None = None, reproduced: bool | None = None) -> Path:
    """Log-scale CE per Adam step; below it (when given) the training text and the merged
    model's greedy continuation, side by side."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gtensor import files

    panel = text is not None and generated is not None
    fig, axes = plt.subplots(2 if panel else 1, 1, figsize=(7, 5.8 if panel else 4.2), dpi=110,
                             gridspec_kw={"height_ratios": [3, 1.5]} if panel else None)
    ax = axes[0] if panel else axes
    ax.semilogy(range(1, len(losses) + 1), losses, "o-", ms=2.5, lw=1.0,
                label="CE (nats/token)")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("cross-entropy")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if panel:
        box = axes[1]
        box.axis("off")
        verdict = {True: "reproduced: yes", False: "reproduced: NO", None: ""}[reproduced]
        for x, head, body in ((0.0, "training text", text),
                              (0.52, f"merged model's continuation\n(greedy, from the first "
                                     f"{lt.PROMPT_TOKENS} tokens)\n{verdict}", generated)):
            box.text(x, 1.0, head, fontsize=8.5, fontweight="bold", va="top",
                     transform=box.transAxes)
            box.text(x, 0.62, textwrap.fill(body, 40), fontsize=7.5, family="monospace",
                     va="top", transform=box.transAxes)
        fig.subplots_adjust(left=0.11, right=0.97, top=0.94, bottom=0.02, hspace=0.28)
    else:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return path


def run(cfg: lt.LoRAConfig, out: Path, model_dir: Path | None = None, text: str | None = None,
        dtype: str = "float64", progress: bool = True) -> LoRARun:
    """Finetune under ``cfg``, merge, save, reload, check; write the summary and the plot."""
    model, desc = load_model(model_dir, dtype, cfg.seed)
    make_bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        def make_bar(total: int):
            return tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True,
                        desc="lora")
    elif progress:  # not a terminal: a plain line every 10 steps
        def make_bar(total: int):
            return report.StepLog(sys.stderr, total, "lora")
    text = text if text is not None else lt.TEXT
    result = lt.run(model, text, cfg, out / "merged", make_bar)
    summary = result.summary()
    summary.update(model=desc, dtype=dtype, merged=str(out / "merged"), text=text)
    png = plot(out / "lora_loss.png", result.losses,
               f"rung 3: LoRA r={cfg.rank} on {result.tokens} tokens ({cfg.backend}, {dtype})",
               text, result.generated, result.reproduced)
    summary["plot"] = str(png)
    path = report.write_summary(out / "lora_summary.json", summary)
    return LoRARun(result, desc, path, png, out / "merged")


# ---------------------------------------------------------------- the ``gdemos lora`` command
def add_parser(sub, common) -> None:
    """Add the ``lora`` subcommand to the ``gdemos`` argument parser."""
    d = lt.LoRAConfig()
    a = sub.add_parser("lora", parents=[common],
                       help="rung 3: LoRA-finetune a Qwen2 model; the merged model reproduces "
                            "the text")
    a.add_argument("--model", type=Path, default=None,
                   help="a transformers Qwen2 directory (config.json + *.safetensors); default: "
                        "a small random Qwen2 built here")
    a.add_argument("--text", type=Path, default=None,
                   help="a UTF-8 text file to finetune on (default: a built-in sentence)")
    a.add_argument("--rank", type=int, default=d.rank)
    a.add_argument("--alpha", type=float, default=d.alpha)
    a.add_argument("--steps", type=int, default=d.steps)
    a.add_argument("--lr", type=float, default=d.lr)
    a.add_argument("--seed", type=int, default=d.seed)
    a.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    a.add_argument("--inner", choices=["plain", "fma"], default=d.inner,
                   help="the inner-product contract of every matmul (default: plain; fma: "
                        "one fused multiply-add per term, docs/semantics.md)")
    a.add_argument("--engine", choices=ENGINES, default="tape",
                   help="tape (the tape on --backend) or replay (ggpu-replay: a numpy tape's "
                        "episode captured and replayed on --backend sim, cuda or cpu)")
    a.add_argument("--device-dtype", choices=["float32"], default=None,
                   help="with --engine replay: float32 device buffers for a float64 model "
                        "(a measured tolerance, not bit-equal)")


def main(args) -> int:
    """Run ``gdemos lora`` from parsed arguments; exit code 0 when the rung passed."""
    if args.steps < 1 or args.rank < 1:
        raise SystemExit(f"gdemos lora: --steps {args.steps}, --rank {args.rank}; expected >= 1")
    text = args.text.read_text(encoding="utf-8") if args.text is not None else None
    cfg = lt.LoRAConfig(rank=args.rank, alpha=args.alpha, steps=args.steps, lr=args.lr,
                        seed=args.seed, backend=args.backend, engine=args.engine,
                        device_dtype=args.device_dtype, inner=args.inner)
    try:
        r = run(cfg, args.out, args.model, text, args.dtype, progress=not args.no_progress)
    except (NotImplementedError, ValueError) as e:
        raise SystemExit(str(e)) from None
    print(f"rung 3 lora: {r.verdict_detail()}")
    print(f"  generated: {r.result.generated!r}")
    print(f"  summary: {r.summary_path}")
    print(f"  plot:    {r.plot_path}")
    print(f"  merged:  {r.merged_path}")
    return 0 if r.passed else 1
