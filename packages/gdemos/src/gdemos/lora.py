"""LoRA adapters on a Qwen2 model, trained through the tape (PEFT's names, shapes and init).

>>> import gtape, numpy as np
>>> from gdemos.qwen2 import Qwen2, Qwen2Config
>>> from gdemos.lora import LoRA
>>> cfg = Qwen2Config(vocab_size=256, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
...                   num_attention_heads=2, num_key_value_heads=1, head_dim=8)
>>> lora = LoRA(Qwen2.random(cfg), r=4, alpha=8)
>>> tp = gtape.Tape()
>>> lora.attach(tp)
>>> loss = lora.loss(tp, [1, 2, 3, 4])
>>> tp.backward(loss)
>>> g = lora.grads(tp)
>>> g["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"].shape
(4, 16)

Each targeted projection ``y = x W^T + b`` becomes ``y + ((x A^T) B^T) * (alpha / r)`` with
A (r, in) Kaiming-uniform (PEFT: bound ``1/sqrt(in)``) and B (out, r) zero; the adapters are
the tape's only params, the base weights its consts (no gradient work or memory for them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gtape
import numpy as np

from . import qwen2_math as qm
from .qwen2 import Qwen2
from .qwen2_math import LINEARS, module_name

PEFT_PREFIX = "base_model.model."


def peft_name(module: str, which: str) -> str:
    """PEFT's parameter name: ``base_model.model.<module>.lora_<A|B>.default.weight``."""
    return f"{PEFT_PREFIX}{module}.lora_{which}.default.weight"


class LoRA:
    """Rank-``r`` adapters on ``targets`` of every layer of ``model``."""

    def __init__(self, model: Qwen2, r: int = 8, alpha: float = 16, seed: int = 0,
                 targets: Sequence[str] = LINEARS) -> None:
        bad = [t for t in targets if t not in LINEARS]
        if bad or not targets:
            raise ValueError(f"LoRA: targets {list(targets)}; expected a non-empty subset of "
                             f"{LINEARS}")
        if not isinstance(r, int) or r < 1:
            raise ValueError(f"LoRA: r is {r!r}; expected an int >= 1")
        self.model, self.r, self.alpha = model, r, float(alpha)
        self.scale = self.alpha / r
        self.targets = tuple(t for t in LINEARS if t in targets)  # PEFT's (module) order
        rng = np.random.default_rng(seed)
        self.weights: dict[str, np.ndarray] = {}
        self._modules: list[str] = []
        for layer in range(model.config.num_hidden_layers):
            for t in self.targets:
                mod = module_name(layer, t)
                out_f, in_f = model.config.linear_shape(t)
                bound = 1.0 / math.sqrt(in_f)  # kaiming_uniform_(a=sqrt(5)) as PEFT inits A
                self.weights[peft_name(mod, "A")] = rng.uniform(-bound, bound, (r, in_f))
                self.weights[peft_name(mod, "B")] = np.zeros((out_f, r))
                self._modules.append(mod)
        self.weights = {k: v.astype(model.dtype) for k, v in self.weights.items()}
        self._tp: gtape.Tape | None = None
        self._params: dict[str, gtape.Var] = {}
        self._base: dict[str, gtape.Var] = {}
        self._tables: dict[tuple, tuple[np.ndarray, ...]] = {}  # _host_tables, by length

    def names(self) -> list[str]:
        """The PEFT parameter names, in PEFT's ``named_parameters`` order (A before B)."""
        return list(self.weights)

    def set_weights(self, arrays: dict[str, Any]) -> None:
        """Replace adapter matrices ``{PEFT name: array}`` (any subset; shapes must match)."""
        for name, a in arrays.items():
            if name not in self.weights:
                raise KeyError(f"LoRA.set_weights: {name!r} is not an adapter; expected one of "
                               f"the names() such as {self.names()[0]!r}")
            a = np.asarray(a, dtype=self.model.dtype)
            if a.shape != self.weights[name].shape:
                raise ValueError(f"LoRA.set_weights: {name} has shape {a.shape}; expected "
                                 f"{self.weights[name].shape}")
            self.weights[name] = a.copy()
            if self._tp is not None:
                self._tp.set_value(self._params[name], a)

    # ---------------------------------------------------------------- the tape
    def attach(self, tp: gtape.Tape) -> None:
        """Register the adapters as params and the base weights as consts of ``tp``.

        Call it before ``tp.mark()``: every episode (``loss``) then reuses these nodes.
        """
        if np.dtype(tp.dtype) != self.model.dtype:
            raise TypeError(f"LoRA.attach: the tape is {tp.dtype} but the model is "
                            f"{self.model.dtype}; expected one dtype")
        self._tp = tp
        self._params = {name: tp.param(a) for name, a in self.weights.items()}
        self._base = {name: tp.const(a) for name, a in self.model.compute_weights().items()}

    def params(self) -> list[gtape.Var]:
        """The adapter Vars of the attached tape, in ``names()`` order."""
        self._check_tape(self._tp, "params")
        return [self._params[n] for n in self.names()]

    def _adapters(self, tp: gtape.Tape) -> qm.Adapters:
        ad = {}
        for mod in self._modules:
            a = self._params[peft_name(mod, "A")]
            b = self._params[peft_name(mod, "B")]
            ad[mod] = (gtape.transpose(a), gtape.transpose(b), self.scale)
        return ad

    def logits(self, tp: gtape.Tape, ids: Sequence[int]) -> gtape.Var:
        """The logits (T, vocab) of ``ids`` as a tape graph through the adapters."""
        return self._forward(tp, ids, rows=None)

    def loss(self, tp: gtape.Tape, ids: Sequence[int]) -> gtape.Var:
        """Mean next-token cross-entropy of ``ids`` (positions 0..T-2 predict 1..T-1)."""
        ids = self.model.check_ids(ids, "LoRA.loss")
        if len(ids) < 2:
            raise ValueError(f"LoRA.loss: {len(ids)} token(s); expected at least 2")
        logits = self._forward(tp, ids, rows=len(ids) - 1)
        return qm.cross_entropy(qm.TapeOps(tp), logits, ids[1:])

    def _host_tables(self, n: int) -> tuple[np.ndarray, ...]:
        """(cos, sin, causal mask) of positions 0..n-1, computed once per length (read-only:
        ``tp.const`` copies them in)."""
        key = (n, self.model.config, self.model.dtype)
        tables = self._tables.get(key)
        if tables is None:
            cfg, dt = self.model.config, self.model.dtype
            tables = (*qm.rotary_tables(cfg, n, dt), qm.causal_mask(n, 0, dt))
            for a in tables:
                a.setflags(write=False)
            if len(self._tables) >= 8:
                self._tables.clear()
            self._tables[key] = tables
        return tables

    def _forward(self, tp: gtape.Tape, ids: Sequence[int], rows: int | None) -> gtape.Var:
        self._check_tape(tp, "loss")
        ops = qm.TapeOps(tp)
        cfg = self.model.config
        ids = self.model.check_ids(ids, "LoRA.logits" if rows is None else "LoRA.loss")
        cos, sin, mask = self._host_tables(len(ids))
        h = qm.hidden(ops, cfg, self._base, qm.embed(ops, self._base, ids), tp.const(cos),
                      tp.const(sin), tp.const(mask), adapters=self._adapters(tp))
        if rows is not None:
            h = gtape.slice(h, 0, 0, rows)
        return qm.head(ops, cfg, self._base, h)

    def grads(self, tp: gtape.Tape) -> dict[str, np.ndarray]:
        """``{PEFT name: dloss/dparam}`` after ``tp.backward(loss)`` (fresh numpy copies)."""
        self._check_tape(tp, "grads")
        be = tp.backend
        return {n: np.array(be.to_numpy(tp.grad(v))) for n, v in self._params.items()}

    def sync(self, tp: gtape.Tape) -> None:
        """Copy the tape's live adapter values (e.g. after training) into ``weights``."""
        self._check_tape(tp, "sync")
        be = tp.backend
        self.weights = {n: np.array(be.to_numpy(tp.value(v))) for n, v in self._params.items()}

    def _check_tape(self, tp: gtape.Tape | None, where: str) -> None:
        if self._tp is None or tp is not self._tp:
            raise ValueError(f"LoRA.{where}: the adapters are not attached to this tape; call "
                             "lora.attach(tp) first")

    # ---------------------------------------------------------------- merging
    def merged(self) -> Qwen2:
        """The base model with ``W + (B @ A) * scale`` in every targeted projection (PEFT's merge).

        Uses ``weights`` (call ``sync(tp)`` after training); the products run on gtensor's
        numpy backend (serial inner products), so a merge is the same bits everywhere.
        """
        ops = qm.ArrayOps(self.model.dtype)
        new = {}
        for mod in self._modules:
            a = self.weights[peft_name(mod, "A")]
            b = self.weights[peft_name(mod, "B")]
            w = self.model.weights[mod + ".weight"]
            new[mod + ".weight"] = ops.add(w, ops.muls(ops.matmul(b, a), self.scale))
        return self.model.with_weights(new)
