"""The Qwen2 model math, written once over an ops namespace (the tape, or plain arrays).

``forward`` and its parts take ``ops``: either :class:`TapeOps` (every op records a node on a
gtape Tape: the training graph) or :class:`ArrayOps` (the same gtensor ops run directly on
numpy arrays by gtensor's numpy backend: the inference path). Both run the same gtensor op
definitions in the same order, so the inference path's logits are the tape's logits, bit for
bit. Only existing gtensor ops are used (composites where there is no primitive):

* RMSNorm: ``w * (x * (1 / sqrt(mean(x*x, axis=-1) + eps)))`` (``gtape.rms_norm``'s formula);
* rotary (NEOX): ``x * cos + rotate_half(x) * sin``, rotate_half by slice + neg + concat;
* grouped-query attention: kv heads repeated by reshape + broadcast_to; the causal mask is an
  additive const (float32's most negative finite number above the diagonal, like
  transformers' dtype minimum), so masked probabilities are exactly 0;
* SwiGLU: ``down(silu(gate(x)) * up(x))``, ``silu(g) = g * sigmoid(g)``;
* embedding: ``take(embed_tokens, ids, axis=0)`` (int64 ids: a gather, an exact copy);
* cross-entropy: ``-mean(take_along_axis(log_softmax(z), targets))`` (int64 targets; stable).

Rotary tables are computed on the host with the project's own scalar functions
(``gtensor.scalar.trig`` sin/cos, ``transcendental`` exp/log), never the platform's libm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gtape
import gtensor
import numpy as np
from gtape.norms import rms_norm_with
from gtensor.scalar.transcendental import EXP_F64, LOG_F64
from gtensor.scalar.trig import COS_F64, SIN_F64

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Qwen2Config:
    """The architecture numbers of a Qwen2 model (the fields of transformers' config.json)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Qwen2Config:
        """Read a transformers config.json dict (``rope_theta`` flat or in ``rope_parameters``)."""
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise NotImplementedError(f"Qwen2Config.from_dict: rope_type {kind!r} is not "
                                      "supported; expected the default (NEOX) rotary embedding")
        heads = int(d["num_attention_heads"])
        return cls(
            vocab_size=int(d["vocab_size"]), hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]), num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(d.get("rope_theta", rope.get("rope_theta", 10000.0))),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            max_position_embeddings=int(d.get("max_position_embeddings", 32768)))

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict transformers' ``Qwen2ForCausalLM`` loads."""
        return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                "intermediate_size": self.intermediate_size,
                "num_hidden_layers": self.num_hidden_layers,
                "num_attention_heads": self.num_attention_heads,
                "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
                "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps,
                "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_word_embeddings,
                "max_position_embeddings": self.max_position_embeddings,
                "attention_dropout": 0.0, "use_sliding_window": False}

    def linear_shape(self, module: str) -> tuple[int, int]:
        """(out, in) of one of the seven projections (``q_proj`` ... ``down_proj``)."""
        h, i, hd = self.hidden_size, self.intermediate_size, self.head_dim
        shapes = {"q_proj": (self.num_attention_heads * hd, h),
                  "k_proj": (self.num_key_value_heads * hd, h),
                  "v_proj": (self.num_key_value_heads * hd, h),
                  "o_proj": (h, self.num_attention_heads * hd),
                  "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
        if module not in shapes:
            raise ValueError(f"linear_shape: module {module!r}; expected one of {LINEARS}")
        return shapes[module]


def module_name(layer: int, module: str) -> str:
    """The transformers name of a projection: ``model.layers.0.self_attn.q_proj``."""
    group = "self_attn" if module in _ATTN else "mlp"
    return f"model.layers.{layer}.{group}.{module}"


# ---------------------------------------------------------------- host-side tables
def inv_freq(cfg: Qwen2Config) -> np.ndarray:
    """``1 / theta**(2i/d)`` for i < d/2, float64, as ``1 / exp((2i/d) * log(theta))`` (ours)."""
    d = cfg.head_dim
    e = np.arange(0, d, 2, dtype=np.float64) / np.float64(d)
    return 1.0 / EXP_F64.numpy(e * LOG_F64.numpy(np.float64(cfg.rope_theta)))


def rotary_tables(cfg: Qwen2Config, positions: int | Sequence[int],
                  dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each (len(positions), head_dim): angles ``pos * inv_freq`` twice over.

    Computed in float64 with our sin/cos (``gtensor.scalar.trig``) and rounded once to
    ``dtype``; ``positions`` is a count (0..n-1) or explicit positions.
    """
    pos = np.arange(positions) if isinstance(positions, (int, np.integer)) else positions
    freqs = np.asarray(pos, dtype=np.float64)[:, None] * inv_freq(cfg)[None, :]
    emb = np.concatenate([freqs, freqs], axis=1)
    return COS_F64.numpy(emb).astype(dtype), SIN_F64.numpy(emb).astype(dtype)


MASKED = float(np.finfo(np.float32).min)  # finite in both dtypes (also in f32 device buffers)


def causal_mask(rows: int, start: int, dtype: Any) -> np.ndarray:
    """(rows, start + rows): 0 where key j <= start + i, ``MASKED`` (-3.4e38) above."""
    j = np.arange(start + rows)[None, :]
    i = np.arange(rows)[:, None] + start
    return np.where(j > i, MASKED, 0.0).astype(dtype)


# ---------------------------------------------------------------- the two ops namespaces
class TapeOps:
    """gtape's op functions, with ``const`` registering data on ``tp`` (the training graph)."""

    def __init__(self, tp: gtape.Tape) -> None:
        self.tp = tp

    def const(self, x: Any) -> gtape.Var:
        """A const node holding ``x``."""
        return self.tp.const(x)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(gtape, name)
        setattr(self, name, fn)  # the next lookup finds it on the instance
        return fn


class ArrayOps:
    """The same ops run directly by gtensor's numpy backend on arrays (the inference path)."""

    def __init__(self, dtype: Any = np.float64) -> None:
        self.be = gtensor.backend("numpy")
        self.dtype = np.dtype(dtype)

    def const(self, x: Any) -> np.ndarray:
        """``x`` as an array of the dtype."""
        return self.be.asarray(np.asarray(x), dtype=self.dtype)

    def _run(self, name: str, xs: Sequence[Any], **attrs: Any) -> np.ndarray:
        arrays = [x if isinstance(x, np.ndarray) else self.const(x) for x in xs]
        return self.be.apply(name, arrays, **attrs)

    def add(self, a: Any, b: Any) -> np.ndarray:
        """a + b (broadcasting)."""
        return self._run("add", (a, b))

    def mul(self, a: Any, b: Any) -> np.ndarray:
        """a * b (broadcasting)."""
        return self._run("mul", (a, b))

    def div(self, a: Any, b: Any) -> np.ndarray:
        """a / b (broadcasting)."""
        return self._run("div", (a, b))

    def muls(self, x: Any, s: float) -> np.ndarray:
        """x * s for a Python scalar s."""
        return self._run("muls", (x,), s=s)

    def adds(self, x: Any, s: float) -> np.ndarray:
        """x + s for a Python scalar s."""
        return self._run("adds", (x,), s=s)

    def neg(self, x: Any) -> np.ndarray:
        """-x."""
        return self._run("neg", (x,))

    def sqrt(self, x: Any) -> np.ndarray:
        """Square root."""
        return self._run("sqrt", (x,))

    def sigmoid(self, x: Any) -> np.ndarray:
        """1 / (1 + exp(-x)), ours."""
        return self._run("sigmoid", (x,))

    def log(self, x: Any) -> np.ndarray:
        """Natural logarithm, ours."""
        return self._run("log", (x,))

    def sum(self, x: Any, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
        """Serial sum over all elements or one axis."""
        return self._run("sum", (x,), axis=axis, keepdims=keepdims)

    def mean(self, x: Any, axis: int | None = None, keepdims: bool = False) -> np.ndarray:
        """Serial sum / count over all elements or one axis."""
        return self._run("mean", (x,), axis=axis, keepdims=keepdims)

    def softmax(self, x: Any, axis: int = -1) -> np.ndarray:
        """exp(x - max) / serial sum along one axis."""
        return self._run("softmax", (x,), axis=axis)

    def matmul(self, a: Any, b: Any) -> np.ndarray:
        """(m, k) @ (k, n), serial inner products."""
        return self._run("matmul", (a, b))

    def bmm(self, a: Any, b: Any) -> np.ndarray:
        """(batch, m, k) @ (batch, k, n), serial inner products."""
        return self._run("bmm", (a, b))

    def transpose(self, x: Any, axes: Sequence[int] | None = None) -> np.ndarray:
        """Permute axes."""
        return self._run("transpose", (x,), axes=None if axes is None else tuple(axes))

    def reshape(self, x: Any, shape: Sequence[int]) -> np.ndarray:
        """Same elements, new shape."""
        return self._run("reshape", (x,), shape=tuple(shape))

    def slice(self, x: Any, axis: int, start: int, stop: int) -> np.ndarray:
        """x[start:stop] along one axis."""
        return self._run("slice", (x,), axis=axis, start=start, stop=stop)

    def concat(self, xs: Sequence[Any], axis: int = 0) -> np.ndarray:
        """Join arrays along an existing axis."""
        return self._run("concat", tuple(xs), axis=axis)

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> np.ndarray:
        """Repeat x along broadcast axes."""
        return self._run("broadcast_to", (x,), shape=tuple(shape))

    def take(self, x: Any, ids: np.ndarray, axis: int = 0) -> np.ndarray:
        """x's positions named by int64 ids along ``axis`` (a gather)."""
        return self._run("take", (x, np.asarray(ids, np.int64)), axis=axis)

    def log_softmax(self, x: Any, axis: int = -1) -> np.ndarray:
        """(x - m) - log(serial sum exp(x - m)) along one axis (stable)."""
        return self._run("log_softmax", (x,), axis=axis)

    def take_along_axis(self, x: Any, ids: np.ndarray, axis: int = -1) -> np.ndarray:
        """numpy's take_along_axis with int64 ids."""
        return self._run("take_along_axis", (x, np.asarray(ids, np.int64)), axis=axis,
                         ignore=None)


# ---------------------------------------------------------------- the model, once
# W: {name: value} of the base weights as ops values. Linear weights are stored TRANSPOSED,
# (in, out), under "<module>.weight_t" so that y = x @ W^T is one matmul; biases and norm
# weights under their transformers names; "lm_head.weight_t" (vocab-last) for the head.
# adapters: {module name: (A^T, B^T, scale)} or None.
Adapters = dict[str, tuple[Any, Any, float]]


def linear(ops: Any, x: Any, W: dict[str, Any], name: str, adapters: Adapters | None) -> Any:
    """``x W^T + b`` (+ ``((x A^T) B^T) * scale`` when ``name`` carries a LoRA adapter)."""
    y = ops.matmul(x, W[name + ".weight_t"])
    bias = W.get(name + ".bias")
    if bias is not None:
        y = ops.add(y, bias)
    ad = adapters.get(name) if adapters else None
    if ad is not None:
        a_t, b_t, scale = ad
        y = ops.add(y, ops.muls(ops.matmul(ops.matmul(x, a_t), b_t), scale))
    return y


def rmsnorm(ops: Any, x: Any, w: Any, eps: float) -> Any:
    """``w * (x * (1 / sqrt(mean(x*x) + eps)))`` over the last axis of (T, H): gtape's
    ``rms_norm`` formula (``gtape.norms.rms_norm_with``) run by ``ops``, so the tape path
    records exactly the nodes ``gtape.rms_norm`` records and the host path computes its bits."""
    return rms_norm_with(ops, x, w, eps)


def rope(ops: Any, x: Any, cos: Any, sin: Any, hd: int) -> Any:
    """``x * cos + rotate_half(x) * sin`` for x (heads, T, hd), cos/sin (T, hd)."""
    half = hd // 2
    rot = ops.concat([ops.neg(ops.slice(x, 2, half, hd)), ops.slice(x, 2, 0, half)], axis=2)
    return ops.add(ops.mul(x, cos), ops.mul(rot, sin))


def _heads(ops: Any, y: Any, n: int, hd: int) -> Any:
    """(T, n*hd) -> (n, T, hd)."""
    t = y.shape[0]
    return ops.transpose(ops.reshape(y, (t, n, hd)), (1, 0, 2))


def _repeat_kv(ops: Any, k: Any, rep: int) -> Any:
    """(kv, S, hd) -> (kv*rep, S, hd), each kv head repeated ``rep`` times (transformers)."""
    if rep == 1:
        return k
    kv, s, hd = k.shape
    return ops.reshape(ops.broadcast_to(ops.reshape(k, (kv, 1, s, hd)), (kv, rep, s, hd)),
                       (kv * rep, s, hd))


def attention(ops: Any, cfg: Qwen2Config, W: dict[str, Any], layer: int, x: Any, cos: Any,
              sin: Any, mask: Any, cache: dict | None, adapters: Adapters | None) -> Any:
    """Grouped-query causal self-attention of one layer; ``cache`` holds past (k, v) per layer."""
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    t = x.shape[0]
    q = _heads(ops, linear(ops, x, W, module_name(layer, "q_proj"), adapters), nh, hd)
    k = _heads(ops, linear(ops, x, W, module_name(layer, "k_proj"), adapters), nkv, hd)
    v = _heads(ops, linear(ops, x, W, module_name(layer, "v_proj"), adapters), nkv, hd)
    q, k = rope(ops, q, cos, sin, hd), rope(ops, k, cos, sin, hd)
    if cache is not None:
        past = cache.get(layer)
        if past is not None:
            k, v = ops.concat([past[0], k], axis=1), ops.concat([past[1], v], axis=1)
        cache[layer] = (k, v)
    k, v = _repeat_kv(ops, k, nh // nkv), _repeat_kv(ops, v, nh // nkv)
    scores = ops.muls(ops.bmm(q, ops.transpose(k, (0, 2, 1))), hd ** -0.5)
    probs = ops.softmax(ops.add(scores, mask), axis=-1)
    out = ops.reshape(ops.transpose(ops.bmm(probs, v), (1, 0, 2)), (t, nh * hd))
    return linear(ops, out, W, module_name(layer, "o_proj"), adapters)


def mlp(ops: Any, W: dict[str, Any], layer: int, x: Any, adapters: Adapters | None) -> Any:
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""
    g = linear(ops, x, W, module_name(layer, "gate_proj"), adapters)
    u = linear(ops, x, W, module_name(layer, "up_proj"), adapters)
    return linear(ops, ops.mul(ops.mul(g, ops.sigmoid(g)), u), W,
                  module_name(layer, "down_proj"), adapters)


def hidden(ops: Any, cfg: Qwen2Config, W: dict[str, Any], h: Any, cos: Any, sin: Any,
           mask: Any, cache: dict | None = None, adapters: Adapters | None = None) -> Any:
    """The decoder stack on embeddings h (T, H): the residual stream before the final norm."""
    eps = cfg.rms_norm_eps
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        x = rmsnorm(ops, h, W[p + "input_layernorm.weight"], eps)
        h = ops.add(h, attention(ops, cfg, W, i, x, cos, sin, mask, cache, adapters))
        x = rmsnorm(ops, h, W[p + "post_attention_layernorm.weight"], eps)
        h = ops.add(h, mlp(ops, W, i, x, adapters))
    return h


def head(ops: Any, cfg: Qwen2Config, W: dict[str, Any], h: Any) -> Any:
    """Final RMSNorm and lm_head: (T, H) -> logits (T, vocab)."""
    return ops.matmul(rmsnorm(ops, h, W["model.norm.weight"], cfg.rms_norm_eps),
                      W["lm_head.weight_t"])


def embed(ops: Any, W: dict[str, Any], ids: np.ndarray) -> Any:
    """Embedding rows of int ``ids`` (T, hidden): ``take(embed_tokens, ids)``, an exact copy."""
    return ops.take(W["model.embed_tokens.weight"], np.asarray(ids, np.int64), 0)


def cross_entropy(ops: Any, logits: Any, targets: np.ndarray) -> Any:
    """Mean of ``-log_softmax(logits)[t, targets[t]]``: the stable log-softmax, picked by int64
    targets (``take_along_axis``)."""
    ids = np.asarray(targets, np.int64).reshape(-1, 1)
    return ops.neg(ops.mean(ops.take_along_axis(ops.log_softmax(logits, axis=-1), ids, -1)))
