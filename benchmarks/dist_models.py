"""The two models of bench_dist_step.py, each written for gdist (a gtape model) and for torch.

* ``mlp``: the digits classifier of ``gdemos dp`` (relu MLP 64-H-10, cross-entropy, Adam with
  L2 on the weights and clipping), batch 96 = 4 microbatches of 24.
* ``gpt``: a char-level GPT of the size rung 9 trains by default (2 pre-norm blocks of causal
  attention and a GELU MLP, 64 wide, 4 heads, 64-token context, 65 symbols, tied head, dropout
  0.1), AdamW with nanoGPT's groups, global clipping; batch 16 sequences = 4 microbatches of 4.

The torch versions have the same shapes and the same optimizer settings (torch's own
initialisation: only the time of a step is compared, not the bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCAB, BLOCK, LAYERS, EMBD, HEADS, DROPOUT = 65, 64, 2, 64, 4, 0.1


@dataclass(frozen=True)
class Case:
    """One model's batches and training settings."""

    name: str
    batch: int
    microbatch: int
    rows: dict  # the training rows, resident on the replicas
    batches: list  # row indices of each step's batch


def mlp_case(hidden: int, steps: int) -> tuple[Case, dict]:
    """The digits MLP of ``gdemos dp`` (its data, its init): (case, init params)."""
    from gdemos.dp import DPConfig, load

    cfg = DPConfig(hidden=hidden, epochs=1 + steps * 96 // 1440)
    init, rows, batches, _ = load(cfg)
    return Case(f"mlp 64-{hidden}-10", cfg.batch, cfg.microbatch, rows, batches[:steps]), init


def gpt_case(steps: int, seed: int = 0) -> Case:
    """Random text of 65 symbols cut into (idx, tgt) sequences; batches of 16."""
    rng = np.random.default_rng(seed)
    text = rng.integers(0, VOCAB, 100_000)
    at = rng.integers(0, text.size - BLOCK - 1, 1024)
    rows = {"idx": np.stack([text[a:a + BLOCK] for a in at]),
            "tgt": np.stack([text[a + 1:a + BLOCK + 1] for a in at])}
    batches = [rng.choice(1024, 16, replace=False) for _ in range(steps)]
    return Case("gpt (rung 9 size)", 16, 4, rows, batches)


# ---------------------------------------------------------------- gtape
def mlp_loss(tp, params, batch):
    """gdemos dp's loss."""
    from gdemos.dp import digits_loss

    return digits_loss(tp, params, batch)


def gpt_factory(tp):
    """The char GPT on the replica's tape (its keys from the tape's stream)."""
    import gtape as g

    class Block(g.nn.Module):
        def __init__(self):
            self.ln1 = g.nn.LayerNorm(tp, EMBD)
            self.attn = g.nn.MultiheadAttention(tp, EMBD, HEADS, dropout=DROPOUT)
            self.ln2 = g.nn.LayerNorm(tp, EMBD)
            self.fc = g.nn.Linear(tp, EMBD, 4 * EMBD)
            self.proj = g.nn.Linear(tp, 4 * EMBD, EMBD)
            self.drop = g.nn.Dropout(DROPOUT, tp=tp)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False, is_causal=True)[0]
            return x + self.drop(self.proj(g.gelu(self.fc(self.ln2(x)), approximate="tanh")))

    class GPT(g.nn.Module):
        def __init__(self):
            self.wte = g.nn.Embedding(tp, VOCAB, EMBD)
            self.wpe = g.nn.Embedding(tp, BLOCK, EMBD)
            self.drop = g.nn.Dropout(DROPOUT, tp=tp)
            self.blocks = g.nn.ModuleList([Block() for _ in range(LAYERS)])
            self.lnf = g.nn.LayerNorm(tp, EMBD)

        def forward(self, idx):
            x = self.drop(self.wte(idx) + self.wpe(np.arange(idx.shape[1])))
            for b in self.blocks:
                x = b(x)
            return self.lnf(x) @ self.wte.weight.transpose(0, 1)

    return GPT()


def gpt_loss(tp, model, batch):
    """Next-symbol cross-entropy."""
    import gtape as g

    return g.cross_entropy(model(batch["idx"]).reshape(-1, VOCAB), batch["tgt"].reshape(-1))


def gpt_groups() -> list[dict]:
    """nanoGPT's groups by name: matrices decay, vectors do not."""
    import gtape as g

    named = dict(gpt_factory(g.Tape()).named_parameters())
    return [{"params": [n for n, v in named.items() if len(v.shape) >= 2], "weight_decay": 0.1},
            {"params": [n for n, v in named.items() if len(v.shape) < 2],
             "weight_decay": 0.0}]


# ---------------------------------------------------------------- torch
def torch_mlp(hidden: int, dtype):
    """The MLP in torch; (model, loss(model, batch), optimizer factory)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 10)).to(dtype)

    def loss(m, b):
        return torch.nn.functional.cross_entropy(m(b["x"]), b["y"])

    def opt(params):
        return torch.optim.Adam(params, lr=3e-2, weight_decay=0.0)

    return model, loss, opt


def torch_gpt(dtype):
    """The char GPT in torch; (model, loss(model, batch), optimizer factory)."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(EMBD), nn.LayerNorm(EMBD)
            self.attn = nn.MultiheadAttention(EMBD, HEADS, dropout=DROPOUT, batch_first=True)
            self.fc, self.proj = nn.Linear(EMBD, 4 * EMBD), nn.Linear(4 * EMBD, EMBD)
            self.drop = nn.Dropout(DROPOUT)
            self.register_buffer("mask", torch.triu(torch.ones(BLOCK, BLOCK, dtype=torch.bool),
                                                    1))

        def forward(self, x):
            h = self.ln1(x)
            t = x.shape[1]
            x = x + self.attn(h, h, h, need_weights=False, attn_mask=self.mask[:t, :t],
                              is_causal=True)[0]
            return x + self.drop(self.proj(nn.functional.gelu(self.fc(self.ln2(x)),
                                                              approximate="tanh")))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, EMBD), nn.Embedding(BLOCK, EMBD)
            self.drop = nn.Dropout(DROPOUT)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.lnf = nn.LayerNorm(EMBD)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1])
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for b in self.blocks:
                x = b(x)
            return self.lnf(x) @ self.wte.weight.T

    def loss(m, b):
        return nn.functional.cross_entropy(m(b["idx"]).reshape(-1, VOCAB), b["tgt"].reshape(-1))

    def opt(params):
        params = list(params)
        return torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2],
                                   "weight_decay": 0.1},
                                  {"params": [p for p in params if p.ndim < 2],
                                   "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))

    return GPT().to(dtype), loss, opt
