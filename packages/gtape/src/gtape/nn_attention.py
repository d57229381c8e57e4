"""``MultiheadAttention`` with torch's parameter layout and semantics, computed by
``gtape.attention``'s exact order.

Parameters (torch's names, shapes and order): ``in_proj_weight`` (3E, E) -- or
``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim) when kdim /
vdim differ from E -- ``in_proj_bias`` (3E,), ``out_proj.weight`` (E, E), ``out_proj.bias``
(E,). Initialisation as torch's ``_reset_parameters``: the in-projection by xavier_uniform, the
out-projection weight as a Linear's, both biases zero; drawn from ``key`` (default: the tape's
next key) split three ways (in-projection, out-projection, dropout).

Forward, per (batch, head) in this order: ``q, k, v`` the in-projections (``gtape.linalg.linear``:
one product with the whole (3E, E) weight when query, key and value are the same Var, else
one per slice of it -- the same bits), split into heads ((B, L, H, E/H) -> (B, H, L, E/H)),
``attention_weights`` (scores, ``* 1/sqrt(E/H)``, masks, softmax), dropout of the weights in
training mode (``key.fold(t)`` for the t-th training forward), ``weights @ v``, heads merged,
``out_proj``. Masks as torch's MultiheadAttention reads them: a bool ``attn_mask`` or
``key_padding_mask`` is True where attention is NOT allowed (the opposite of
``scaled_dot_product_attention``'s), a float one is added to the scores.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> mha = g.nn.MultiheadAttention(tp, 8, 2)
>>> x = tp.const(np.ones((3, 5, 8)))
>>> out, w = mha(x, x, x)
>>> out.shape, w.shape
((3, 5, 8), (3, 5, 5))
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe

from . import ops
from .attention import _host, attention_weights, causal_mask
from .layers import _positive
from .linalg import linear
from .modules import Module
from .nn import Linear
from .nn_init import KeyLike, layer_key, uniform_init, xavier_bound
from .rng import Key, OwnedKey, dropout
from .tape import Tape
from .var import Var


def _xavier(key: Any, shape: tuple[int, int]) -> np.ndarray:
    """torch's xavier_uniform_ draws (fan_in = shape[1], fan_out = shape[0]) from ``key``."""
    fan_out, fan_in = shape
    return uniform_init(key, shape, xavier_bound(fan_in, fan_out))


class MultiheadAttention(Module):
    """torch's ``nn.MultiheadAttention`` (``batch_first=True`` by default here: inputs
    (B, L, E); ``False`` reads (L, B, E) as torch's default does). See the module doc."""

    def __init__(self, tp: Tape, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = True,
                 key: KeyLike | None = None) -> None:
        e = _positive("MultiheadAttention", "embed_dim", embed_dim)
        h = _positive("MultiheadAttention", "num_heads", num_heads)
        if e % h:
            raise ValueError(f"MultiheadAttention: embed_dim {e} is not divisible by num_heads "
                             f"{h}; expected embed_dim % num_heads == 0")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.floating)) or \
                not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiheadAttention: dropout is {dropout!r}; expected a "
                             "probability in [0, 1)")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        self.embed_dim, self.num_heads, self.head_dim = e, h, e // h
        self.kdim = e if kdim is None else _positive("MultiheadAttention", "kdim", kdim)
        self.vdim = e if vdim is None else _positive("MultiheadAttention", "vdim", vdim)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        k_in, k_out, self._drop_key = layer_key("MultiheadAttention", tp, key).split(3)
        self.calls = 0  # training forwards with dropout so far (the next uses fold(calls))
        # NOTE: attribute order is torch's parameter order
        if self.kdim == e and self.vdim == e:
            self.in_proj_weight: Var | None = tp.param(_xavier(k_in, (3 * e, e)))
        else:
            kq, kk, kv = k_in.split(3)
            self.in_proj_weight = None
            self.q_proj_weight = tp.param(_xavier(kq, (e, e)))
            self.k_proj_weight = tp.param(_xavier(kk, (e, self.kdim)))
            self.v_proj_weight = tp.param(_xavier(kv, (e, self.vdim)))
        self.in_proj_bias: Var | None = tp.param(np.zeros(3 * e)) if bias else None
        self.out_proj = Linear(tp, e, e, bias=bias, key=k_out)
        if bias:
            tp.set_value(self.out_proj.bias, np.zeros(e))

    # ---------------------------------------------------------------- projections
    def _proj(self, x: Any, j: int) -> Var:
        """The j-th in-projection (0: q, 1: k, 2: v) of x (B, T, dim)."""
        e = self.embed_dim
        if self.in_proj_weight is not None:
            w = ops.slice(self.in_proj_weight, 0, j * e, (j + 1) * e)
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[j]
        b = None if self.in_proj_bias is None else ops.slice(self.in_proj_bias, 0, j * e,
                                                            (j + 1) * e)
        return linear(x, w, b)

    def _heads(self, x: Var) -> Var:
        """(B, T, E) -> (B, H, T, E/H)."""
        b, t, _ = x.shape
        return ops.transpose(ops.reshape(x, (b, t, self.num_heads, self.head_dim)), (0, 2, 1, 3))

    # ---------------------------------------------------------------- masks
    def _masks(self, attn_mask: Any, key_padding_mask: Any, b: int, L: int, S: int
               ) -> tuple[np.ndarray | None, list[Any]]:
        """(allowed bool mask (B|1, H|1, L, S) or None, float masks to add) from torch's
        MultiheadAttention masks (bool: True = not allowed)."""
        allowed, floats = None, []
        h = self.num_heads
        for name, m, want in (("attn_mask", attn_mask, None), ("key_padding_mask",
                                                                 key_padding_mask, (b, S))):
            if m is None:
                continue
            if isinstance(m, Var):
                raise TypeError(f"MultiheadAttention: {name} is a Var; expected host data (a "
                                "numpy or torch bool / float array)")
            a = np.asarray(_host(m))
            if name == "attn_mask":
                if a.shape == (L, S):
                    a4 = a.reshape(1, 1, L, S)
                elif a.shape == (b * h, L, S):
                    a4 = a.reshape(b, h, L, S)
                else:
                    raise ValueError(f"MultiheadAttention: attn_mask has shape {a.shape}; "
                                     f"expected ({L}, {S}) or ({b * h}, {L}, {S})")
            else:
                if a.shape != want:
                    raise ValueError(f"MultiheadAttention: key_padding_mask has shape "
                                     f"{a.shape}; expected (batch, S) = {want}")
                a4 = a.reshape(b, 1, 1, S)
            if a.dtype == np.bool_:
                allowed = ~a4 if allowed is None else allowed & ~a4
            elif a.dtype.kind == "f":
                floats.append(a4)
            else:
                raise TypeError(f"MultiheadAttention: {name} has dtype {a.dtype}; expected bool "
                                "(True: not allowed) or float (added)")
        return allowed, floats

    # ---------------------------------------------------------------- forward
    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False
                ) -> tuple[Var, Var | None]:
        """(attn_output, attn_weights or None), as torch's forward (see the module doc);
        unbatched (L, E) inputs give unbatched outputs."""
        if not isinstance(query, Var):
            raise TypeError(f"MultiheadAttention: query is {describe(query)}; expected a Var")
        if is_causal and attn_mask is not None:
            raise ValueError("MultiheadAttention: is_causal=True with an explicit attn_mask; "
                             "expected one of them (is_causal alone applies the causal mask)")
        unbatched = query.ndim == 2
        qkv = [query, key, value]
        for i, x in enumerate(qkv):
            dims = (self.embed_dim, self.kdim, self.vdim)[i]
            if not isinstance(x, Var) or x.ndim != query.ndim or x.shape[-1] != dims:
                raise ValueError(f"MultiheadAttention: {('query', 'key', 'value')[i]} is "
                                 f"{describe(x)}; expected a Var of {query.ndim} dims ending in "
                                 f"{dims}")
            if unbatched:
                qkv[i] = ops.reshape(x, (1, *x.shape))
            elif not self.batch_first:
                qkv[i] = ops.transpose(x, (1, 0, 2))
        q_in, k_in, v_in = qkv
        b, L, _ = q_in.shape
        S = k_in.shape[1]
        if k_in.shape[0] != b or v_in.shape[:2] != (b, S):
            raise ValueError(f"MultiheadAttention: query {query.shape}, key {key.shape} and "
                             f"value {value.shape} do not agree on batch and source length")
        if query is key is value and self.in_proj_weight is not None:  # one product
            q, k, v = linear(q_in, self.in_proj_weight, self.in_proj_bias).split(
                self.embed_dim, dim=-1)
        else:
            q, k, v = self._proj(q_in, 0), self._proj(k_in, 1), self._proj(v_in, 2)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        allowed, floats = self._masks(attn_mask, key_padding_mask, b, L, S)
        additive = _sum_floats(floats, q.dtype) if floats else None
        causal_only = is_causal and allowed is None and additive is None
        if is_causal and not causal_only:
            causal = causal_mask(L, S)
            allowed = causal if allowed is None else allowed & causal
        # causal alone: the same where(causal, s, -inf) as a bool mask, its mask a constant
        w = attention_weights(q, k, allowed, causal_only, None, additive_bias=additive)
        if self.training and self.dropout > 0.0:
            w = dropout(w, self.dropout, self.next_key())
        out = ops.matmul(w, v)  # (B, H, L, E/H)
        out = ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (b, L, self.embed_dim))
        out = self.out_proj(out)
        if unbatched:
            out = ops.reshape(out, out.shape[1:])
        elif not self.batch_first:
            out = ops.transpose(out, (1, 0, 2))
        if not need_weights:
            return out, None
        weights = ops.mean(w, axis=1) if average_attn_weights else w
        if unbatched:
            weights = ops.reshape(weights, weights.shape[1:])
        return out, weights

    def next_key(self) -> OwnedKey:
        """The key of the next training forward's dropout (``fold(calls)`` of the layer's
        dropout key); counts it."""
        t = self.calls
        self.calls += 1
        return OwnedKey(*self._drop_key.fold(t).words, self, t)

    def next_keys(self, n: int) -> list[Key]:
        """The keys of the next ``n`` training forwards with dropout; counts them."""
        return [self.next_key() for _ in range(n)]

    def extra_repr(self) -> str:
        """embed_dim, num_heads, dropout, batch_first."""
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")


def _sum_floats(floats: list[np.ndarray], dtype: Any) -> np.ndarray:
    """Float masks added into one host array in the tape's dtype (in their order)."""
    total = np.asarray(floats[0], dtype=dtype)
    for f in floats[1:]:
        total = total + np.asarray(f, dtype=dtype)
    return total
