"""Rung 3's training run: Adam on LoRA adapters with the mark/reset loop, then merge and check."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gtape
import numpy as np
from gopt import Adam

from .lora import LoRA
from .qwen2 import Qwen2, Qwen2Config

TEXT = "The tape records every op once; backward walks it in reverse. Exact bits, everywhere."
PROMPT_TOKENS = 4  # the merged model is prompted with this many tokens of the text

# the small random model the rung builds when no --model is given (byte-level vocabulary)
SMALL = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rope_theta=10000.0, tie_word_embeddings=True, max_position_embeddings=1024)


@dataclass(frozen=True)
class LoRAConfig:
    """Everything that defines a finetune (the JSON summary repeats it)."""

    rank: int = 8
    alpha: float = 16.0
    steps: int = 60
    lr: float = 1e-2
    seed: int = 0
    backend: str = "numpy"
    engine: str = "tape"  # or "replay" (ggpu-replay on backend sim/cuda)
    device_dtype: str | None = None  # replay only: "float32" = f32 device buffers (tolerance)
    inner: str = "plain"  # the inner-product contract ("plain" or "fma": gtape.Tape's inner)


@dataclass
class LoRAResult:
    """A finished finetune: losses, timings, the adapters, the merged model's check."""

    config: LoRAConfig
    tokens: int
    losses: list[float] = field(default_factory=list)  # loss before each step
    final_loss: float = float("nan")  # after the last step
    seconds: float = 0.0
    reproduced: bool = False
    generated: str = ""
    lora: LoRA | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON-ready summary (no arrays)."""
        return {"rung": "lora", **asdict(self.config), "tokens": self.tokens,
                "initial_loss": self.losses[0] if self.losses else None,
                "final_loss": self.final_loss, "seconds": round(self.seconds, 3),
                "reproduced": self.reproduced, "generated": self.generated,
                "losses": self.losses}


def finetune(model: Qwen2, ids: np.ndarray, cfg: LoRAConfig,
             progress: Callable[[int], Any] | None = None) -> tuple[LoRA, list[float], float]:
    """Train LoRA adapters on one sequence; returns (lora synced, losses per step, final loss).

    ``cfg.engine == "tape"``: the CPU tape on ``cfg.backend`` with gopt's Adam and the
    mark/reset loop. ``"replay"``: one episode recorded on a numpy tape is captured by
    ggpu-replay and replayed on ``cfg.backend`` (sim, cuda or cpu) with the device Adam; with
    ``cfg.device_dtype = "float32"`` the device runs float32 buffers for a float64 model (a
    tolerance, not bits: docs/replay.md). ``cfg.inner`` is the tape's inner-product contract
    (``"plain"`` or ``"fma"``, docs/semantics.md) for every matmul, forward and backward.
    """
    if cfg.engine == "replay":
        return _finetune_replay(model, ids, cfg, progress)
    if cfg.engine != "tape":
        raise ValueError(f"finetune: engine {cfg.engine!r}; expected 'tape' or 'replay'")
    lora = LoRA(model, r=cfg.rank, alpha=cfg.alpha, seed=cfg.seed)
    tp = gtape.Tape(cfg.backend, model.dtype.name, inner=cfg.inner)
    lora.attach(tp)
    opt = Adam(tp, lr=cfg.lr)
    for p in lora.params():
        opt.add(p)
    mark = tp.mark()
    be = tp.backend
    bar = progress(cfg.steps) if progress else None
    losses = []
    for _ in range(cfg.steps):
        loss = lora.loss(tp, ids)
        tp.backward(loss)
        opt.step()
        losses.append(float(be.to_numpy(tp.value(loss))))
        tp.reset_to(mark)
        if bar is not None:
            bar.set_postfix_str(f"loss {losses[-1]:.4f}", refresh=False)
            bar.update(1)
    if bar is not None:
        bar.close()
    final = float(be.to_numpy(tp.value(lora.loss(tp, ids))))
    lora.sync(tp)
    tp.close()
    return lora, losses, final


def _finetune_replay(model: Qwen2, ids: np.ndarray, cfg: LoRAConfig,
                     progress: Callable[[int], Any] | None) -> tuple[LoRA, list[float], float]:
    try:
        from ggpu_replay import capture
    except ImportError:
        raise NotImplementedError("finetune: engine 'replay' needs the ggpu-replay package "
                                  "(pip install packages/ggpu-replay); expected it installed "
                                  "or engine 'tape'") from None
    if cfg.backend not in ("sim", "cuda", "cpu"):
        raise ValueError(f"finetune: engine 'replay' runs on a kernel backend; got backend "
                         f"{cfg.backend!r}, expected 'sim', 'cuda' or 'cpu' (the captured "
                         "CPU step)")
    lora = LoRA(model, r=cfg.rank, alpha=cfg.alpha, seed=cfg.seed)
    tp = gtape.Tape("numpy", model.dtype.name, inner=cfg.inner)
    lora.attach(tp)
    prog = capture(tp, lora.loss(tp, ids), backend=cfg.backend, dtype=cfg.device_dtype)
    dopt = prog.adam(lr=cfg.lr)
    for p in lora.params():
        dopt.add(p)
    bar = progress(cfg.steps) if progress else None
    losses = []
    for _ in range(cfg.steps):
        prog.step(dopt)
        losses.append(prog.loss())
        if bar is not None:
            bar.set_postfix_str(f"loss {losses[-1]:.4f}", refresh=False)
            bar.update(1)
    if bar is not None:
        bar.close()
    prog.forward()
    final = prog.loss()
    prog.sync_params(tp)
    lora.sync(tp)
    tp.close()
    return lora, losses, final


def reproduces(merged: Qwen2, ids: np.ndarray, prompt: int = PROMPT_TOKENS) -> tuple[bool, str]:
    """Whether greedy decoding from the first ``prompt`` tokens gives back all of ``ids``."""
    out = merged.generate(ids[:prompt], len(ids) - prompt)
    return bool(np.array_equal(out, ids)), merged.decode(out)


def run(model: Qwen2, text: str, cfg: LoRAConfig, merged_dir: Any = None,
        progress: Callable[[int], Any] | None = None) -> LoRAResult:
    """Finetune on ``text``, merge, (save and reload the merged model), check reproduction."""
    ids = model.encode(text)
    start = time.perf_counter()
    lora, losses, final = finetune(model, ids, cfg, progress)
    seconds = time.perf_counter() - start
    merged = lora.merged()
    if merged_dir is not None:
        merged.save_pretrained(merged_dir)
        merged = Qwen2.from_pretrained(merged_dir, dtype=model.dtype.name)
    ok, generated = reproduces(merged, ids)
    return LoRAResult(cfg, len(ids), losses, final, seconds, ok, generated, lora)
