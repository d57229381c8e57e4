"""Rung 9's model: a decoder-only character GPT (pre-norm blocks, causal attention, GELU MLP,
tied head, dropout), in gtape.

``GPT`` is a gtape module tree named as nanoGPT's (``wte``, ``wpe``, ``h.0.ln_1``,
``h.0.attn.c_attn``, ``h.0.attn.attn_drop``, ``h.0.mlp.c_fc``, ``ln_f``); its forward is
``logits``, one function of a {name: param Var} dict, so gdist's ``loss_fn(tp, params,
batch)`` runs the very same arithmetic (``dist_loss``). Per block, in this order::

    x = x + drop(c_proj(sdpa(split_heads(c_attn(ln_1(x))), causal, dropout of the weights)))
    # (the attention as gtape's qkv_attention: one fused op, bitwise SDPA of the split heads)
    x = x + drop(c_proj(gelu(c_fc(ln_2(x)))))

after ``x = drop(wte[ids] + wpe[:T])``; then ``logits = ln_f(x) @ wte^T`` (the head tied to
the token embedding). Initialisation (GPT-2's): every weight matrix and both embeddings
N(0, 0.02^2), the residual projections (``c_proj``) N(0, (0.02 / sqrt(2 n_layer))^2), biases 0,
LayerNorms (1, 0); each draw from the tape's key stream in parameter order. Dropout: the
module tree's ``Dropout`` layers own their keys (``gtape.rng.OwnedKey``), the attention
weights' dropout draws from ``attn_drop``'s key through SDPA; ``dist_loss`` takes its keys
from the batch (one per microbatch) instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import gtape as g
import numpy as np
from gtensor.ops.index import check_strict_ids

GELU = "none"  # exact GELU (erf), torch's nn.GELU default
Var = g.Var


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape."""

    vocab: int = 65
    block: int = 64  # the context length (the position table's rows)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("vocab", "block", "n_layer", "n_head", "n_embd"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GPTConfig: {name} is {v!r}; expected an int >= 1")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd {self.n_embd} is not a multiple of n_head "
                             f"{self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig: dropout is {self.dropout!r}; expected [0, 1)")

    def as_dict(self) -> dict:
        """The fields, for summaries."""
        return asdict(self)


# ---------------------------------------------------------------- the module tree
class Attention(g.nn.Module):
    """Causal self-attention's parameters and dropout layers."""

    def __init__(self, tp: g.Tape, cfg: GPTConfig) -> None:
        self.c_attn = g.nn.Linear(tp, cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = g.nn.Linear(tp, cfg.n_embd, cfg.n_embd)
        self.attn_drop = g.nn.Dropout(cfg.dropout, tp=tp)  # its key: SDPA's weights dropout
        self.resid_drop = g.nn.Dropout(cfg.dropout, tp=tp)


class MLP(g.nn.Module):
    """The block's GELU MLP (4x wide)."""

    def __init__(self, tp: g.Tape, cfg: GPTConfig) -> None:
        self.c_fc = g.nn.Linear(tp, cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = g.nn.Linear(tp, 4 * cfg.n_embd, cfg.n_embd)
        self.drop = g.nn.Dropout(cfg.dropout, tp=tp)


class Block(g.nn.Module):
    """One pre-norm transformer block."""

    def __init__(self, tp: g.Tape, cfg: GPTConfig) -> None:
        self.ln_1 = g.nn.LayerNorm(tp, cfg.n_embd)
        self.attn = Attention(tp, cfg)
        self.ln_2 = g.nn.LayerNorm(tp, cfg.n_embd)
        self.mlp = MLP(tp, cfg)


class GPT(g.nn.Module):
    """The character GPT on tape ``tp`` (see the module doc); ``forward(ids, targets)``."""

    def __init__(self, tp: g.Tape, cfg: GPTConfig) -> None:
        self.cfg = cfg
        self.wte = g.nn.Embedding(tp, cfg.vocab, cfg.n_embd)
        self.wpe = g.nn.Embedding(tp, cfg.block, cfg.n_embd)
        self.drop = g.nn.Dropout(cfg.dropout, tp=tp)
        self.h = g.nn.ModuleList([Block(tp, cfg) for _ in range(cfg.n_layer)])
        self.ln_f = g.nn.LayerNorm(tp, cfg.n_embd)
        init_weights(self)
        self._p = dict(self.named_parameters())
        self._drops = {n: m for n, m in self.named_modules() if isinstance(m, g.nn.Dropout)}

    def forward(self, ids: Any, targets: Any = None) -> Var | tuple[Var, Var]:
        """Logits (B, T, vocab) of int ids (B, T); with ``targets`` (B, T) also the mean
        cross-entropy: (logits, loss). The ids become the program input "ids"."""
        tp = self._p["wte.weight"].tape
        if not isinstance(ids, g.Var):
            a = check_ids(self.cfg, ids)
            check_strict_ids("embedding: ids", a, self.cfg.vocab)  # the op's check, before
            ids = tp.const(a, name="ids", dtype="int64")  # anything is recorded
        training = self.training

        def drop(site: str, x: Var) -> Var:
            return self._drops[site](x)

        def attn_key(site: str) -> Any:
            layer = self._drops[site]
            return layer.next_key() if training and layer.p > 0 else None

        logits = logits_of(self._p, ids, self.cfg, drop, attn_key, training)
        if targets is None:
            return logits
        return logits, loss_of(logits, targets)


def init_weights(model: GPT) -> None:
    """GPT-2's initialisation (the module doc), each draw the tape's next key."""
    std = 0.02
    proj = std / math.sqrt(2 * model.cfg.n_layer)
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            g.nn.init.zeros_(p)
        elif ".ln_" in name or name.startswith("ln_f"):
            g.nn.init.ones_(p)
        else:
            g.nn.init.normal_(p, 0.0, proj if name.endswith("c_proj.weight") else std)


def check_ids(cfg: GPTConfig, ids: Any) -> np.ndarray:
    """int ids (B, T) with T <= the position table, as int64 (ValueError / TypeError)."""
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise TypeError(f"GPT: ids have dtype {a.dtype}; expected int character ids")
    if a.ndim != 2:
        raise ValueError(f"GPT: ids have shape {a.shape}; expected (batch, T)")
    if a.shape[1] > cfg.block:
        raise ValueError(f"GPT: a sequence of {a.shape[1]} ids is longer than the position "
                         f"table ({cfg.block} rows: GPTConfig.block)")
    return a.astype(np.int64)


# ---------------------------------------------------------------- the arithmetic, once
DropFn = Callable[[str, Var], Var]
KeyFn = Callable[[str], Any]


def logits_of(p: Mapping[str, Var], ids: Any, cfg: GPTConfig, drop: DropFn, attn_key: KeyFn,
              training: bool) -> Var:
    """The forward of the module doc on parameters ``p`` (by name); ``drop(site, x)`` is the
    dropout at a site (``"drop"``, ``"h.0.attn.resid_drop"``, ``"h.0.mlp.drop"``),
    ``attn_key(site)`` the key of the attention weights' dropout (or None)."""
    b, t = ids.shape
    if t > cfg.block:
        raise ValueError(f"GPT: a sequence of {t} ids is longer than the position table "
                         f"({cfg.block} rows)")
    e, nh = cfg.n_embd, cfg.n_head
    x = g.embedding(p["wte.weight"], ids) + g.slice(p["wpe.weight"], 0, 0, t)
    x = drop("drop", x)
    p_attn = cfg.dropout if training else 0.0
    for i in range(cfg.n_layer):
        pre = f"h.{i}."
        h = g.layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = g.linear(h, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])
        key = attn_key(pre + "attn.attn_drop") if p_attn > 0 else None
        # SDPA of the heads split from qkv, as one fused op (bitwise the composite)
        y = g.qkv_attention(qkv.reshape(b, t, 3, nh, e // nh),
                            dropout_p=p_attn if key is not None else 0.0, is_causal=True,
                            key=key)
        y = y.reshape(b, t, e)
        y = g.linear(y, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])
        x = x + drop(pre + "attn.resid_drop", y)
        h = g.layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        h = g.gelu(g.linear(h, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"]),
                   approximate=GELU)
        h = g.linear(h, p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])
        x = x + drop(pre + "mlp.drop", h)
    x = g.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return g.linear(x, p["wte.weight"])  # the tied head


def loss_of(logits: Var, targets: Any) -> Var:
    """Mean cross-entropy per character of logits (B, T, V) against int targets (B, T)."""
    b, t, v = logits.shape
    return g.cross_entropy(logits.reshape(b * t, v), np.asarray(targets).reshape(b * t))


# ---------------------------------------------------------------- gdist's loss_fn
def dist_loss(tp: g.Tape, params: Mapping[str, Var], batch: Mapping[str, np.ndarray]) -> Var:
    """gdist's ``loss_fn``: the same arithmetic on one microbatch, {"ids", "targets"} (rows,
    T), the config in ``batch["config"]`` (each row the GPTConfig fields as ints, dropout in
    1e-6 units) and the microbatch's dropout key in ``batch["key"]`` (each row the same two
    words): site j of the forward draws ``key.fold(j)`` (the sites in forward order)."""
    row = batch["config"][0]
    cfg = GPTConfig(vocab=int(row[0]), block=int(row[1]), n_layer=int(row[2]),
                    n_head=int(row[3]), n_embd=int(row[4]), dropout=int(row[5]) / 1e6)
    base = g.rng.Key.from_array(np.asarray(batch["key"][0]))
    sites: list[str] = []

    def site_key(site: str) -> Any:
        sites.append(site)
        return base.fold(len(sites) - 1)

    def drop(site: str, x: Var) -> Var:
        return g.dropout(x, cfg.dropout, site_key(site)) if cfg.dropout > 0 else x

    logits = logits_of(params, np.asarray(batch["ids"]), cfg, drop, site_key, True)
    return loss_of(logits, batch["targets"])


def config_rows(cfg: GPTConfig, rows: int) -> np.ndarray:
    """``dist_loss``'s ``batch["config"]``: ``rows`` copies of the config as int64."""
    row = [cfg.vocab, cfg.block, cfg.n_layer, cfg.n_head, cfg.n_embd,
           int(round(cfg.dropout * 1e6))]
    return np.tile(np.array(row, dtype=np.int64), (rows, 1))
