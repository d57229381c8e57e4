"""The two models the tests train (and their data), plus loss_fns that fail on purpose.

Registered with cloudpickle by value: worker processes get the functions themselves.
"""

from __future__ import annotations

import os
import signal

import cloudpickle
import gopt
import gtape as g
import numpy as np


def mlp_ce(tp, params, batch):
    """A relu MLP classifier: cross-entropy against int labels."""
    h = g.relu(batch["x"] @ params["W1"] + params["b1"])
    return g.cross_entropy(h @ params["W2"] + params["b2"], batch["y"])


def tanh_reg(tp, params, batch):
    """A tanh regression net with a skip term: mean squared error against float targets."""
    h = g.tanh(batch["x"] @ params["enc"])
    pred = h @ params["dec"] + batch["x"] @ params["skip"] + params["bias"]
    return g.mse(pred, batch["t"])


def mlp_ce_boom(tp, params, batch):
    """``mlp_ce``, but a microbatch with a nonzero ``boom`` row raises."""
    if np.any(batch["boom"]):
        raise RuntimeError("boom: this microbatch refuses to run")
    return mlp_ce(tp, params, {"x": batch["x"], "y": batch["y"]})


def killer(flag: str, driver_pid: int):
    """``mlp_ce``, but the first call in any process other than the driver SIGKILLs its own
    process (once: the flag file records it)."""

    def loss_fn(tp, params, batch):
        if os.getpid() != driver_pid and not os.path.exists(flag):
            with open(flag, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return mlp_ce(tp, params, batch)

    return loss_fn


def returns_non_scalar(tp, params, batch):
    """A mistake: the per-row losses instead of their mean."""
    return batch["x"] @ params["W1"]


# ---------------------------------------------------------------- a GPT-like model, dropout
VOCAB, T, C, HEADS = 11, 6, 8, 2


class TinyGPT(g.nn.Module):
    """A pre-norm decoder block over token and position embeddings with dropout in three
    places (embeddings, attention weights, MLP), causal attention, GELU and a tied head."""

    def __init__(self, tp, p: float = 0.2):
        self.wte = g.nn.Embedding(tp, VOCAB, C)
        self.wpe = g.nn.Embedding(tp, T, C)
        self.drop = g.nn.Dropout(p, tp=tp)
        self.ln1 = g.nn.LayerNorm(tp, C)
        self.attn = g.nn.MultiheadAttention(tp, C, HEADS, dropout=p)
        self.ln2 = g.nn.LayerNorm(tp, C)
        self.fc = g.nn.Linear(tp, C, 4 * C)
        self.proj = g.nn.Linear(tp, 4 * C, C)
        self.mlp_drop = g.nn.Dropout(p, tp=tp)
        self.lnf = g.nn.LayerNorm(tp, C)

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(np.arange(idx.shape[1])))
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True)[0]
        x = x + self.mlp_drop(self.proj(g.gelu(self.fc(self.ln2(x)), approximate="tanh")))
        return self.lnf(x) @ self.wte.weight.transpose(0, 1)


def gpt_factory(tp):
    """The model factory: built on the replica's tape, its keys from the tape's stream."""
    return TinyGPT(tp)


def gpt_loss(tp, model, batch):
    """Next-token cross-entropy of the tiny GPT."""
    logits = model(batch["idx"])
    return g.cross_entropy(logits.reshape(-1, VOCAB), batch["tgt"].reshape(-1))


def gpt_groups():
    """nanoGPT's rule: matrices decay, vectors (biases, norms) do not."""
    tp = g.Tape()
    named = dict(TinyGPT(tp).named_parameters())
    return [{"params": [n for n, v in named.items() if len(v.shape) >= 2],
             "weight_decay": 0.1},
            {"params": [n for n, v in named.items() if len(v.shape) < 2], "weight_decay": 0.0}]


def gpt_case(seed: int = 3, rows: int = 6, steps: int = 20):
    """Batches of the tiny GPT: ``rows`` sequences of T tokens, targets shifted by one."""
    rng = np.random.default_rng(seed)
    text = rng.integers(0, VOCAB, 4000)
    out = []
    for _ in range(steps):
        at = rng.integers(0, text.size - T - 1, rows)
        out.append({"idx": np.stack([text[a:a + T] for a in at]),
                    "tgt": np.stack([text[a + 1:a + T + 1] for a in at])})
    return out


def gpt_trainer(cls, bname, dtype="float64", inner="plain", microbatch_override=2,
                seed_override=5, **kw):
    """A trainer of the tiny GPT: AdamW with groups, torch's clip, cosine with warmup."""
    import gopt

    return cls(gpt_loss, gpt_factory, gopt.AdamW, {"lr": 3e-2, "betas": (0.9, 0.95)},
               microbatch=microbatch_override, backend=bname, dtype=dtype, inner=inner,
               seed=seed_override,
               param_groups=gpt_groups(), clip=0.5, clip_rule="torch",
               schedule=lambda opt: gopt.schedules.cosine(opt, total_steps=20,
                                                          warmup_steps=3), **kw)


def unseeded_factory(tp):
    """A factory that is not deterministic: global random state, different per process."""
    return {"w": tp.param(np.random.default_rng().normal(size=(8, 3)))}


def mlp_case(seed: int = 0, rows: int = 24):
    """(init params, batch) of the classifier: 8 features, 16 hidden, 3 classes."""
    rng = np.random.default_rng(seed)
    init = {"W1": rng.normal(0, 0.4, (8, 16)), "b1": rng.normal(0, 0.1, (1, 16)),
            "W2": rng.normal(0, 0.4, (16, 3)), "b2": np.zeros((1, 3))}
    batches = [{"x": rng.normal(size=(rows, 8)), "y": rng.integers(0, 3, rows)}
               for _ in range(3)]
    return init, batches


def tanh_case(seed: int = 1, rows: int = 15):
    """(init params, batches) of the regression net: 5 features, 7 hidden, 2 targets."""
    rng = np.random.default_rng(seed)
    init = {"enc": rng.normal(0, 0.5, (5, 7)), "dec": rng.normal(0, 0.5, (7, 2)),
            "skip": rng.normal(0, 0.1, (5, 2)), "bias": np.zeros((1, 2))}
    batches = [{"x": rng.normal(size=(rows, 5)), "t": rng.normal(size=(rows, 2))}
               for _ in range(3)]
    return init, batches


# name -> (loss_fn, case, microbatch, optimizer, opt kwargs, trainer extras)
CASES = {
    "mlp": (mlp_ce, mlp_case, 4, gopt.Adam, {"lr": 1e-2}, {"l2": {"W1": 1e-3, "W2": 1e-3}}),
    "tanh": (tanh_reg, tanh_case, 5, gopt.SGD, {"lr": 0.05}, {"clip": 0.5, "l2": 1e-4}),
}

cloudpickle.register_pickle_by_value(__import__(__name__))
