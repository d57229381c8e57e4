"""Masks and attention as composites of exact recorded ops, each defined once with its order.

* ``masked_fill(x, mask, value)`` (torch's): ``where(mask, value, x)`` -- ``value`` (a Python
  number, rounded once to the tape's dtype, or a 0-d Var) where the bool ``mask`` (broadcast
  to x's shape) is true, x elsewhere; the gradient of x is g where the mask is false, +0.0
  where it is true.
* ``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, key,
  enable_gqa)`` (torch's semantics; q (..., L, E), k (..., S, E), v (..., S, Ev))::

      s = matmul(q, k, tb=True)            # (..., L, S): each score one serial inner product
      s = s * scale                        # muls; scale = 1/sqrt(E) (float64, then rounded)
      s = where(mask, s, -inf)             # a bool mask: True takes part (torch's SDPA rule)
      s = s + mask                         # a float mask: added
      s = where(causal, s, -inf)           # is_causal: causal[i, j] = j <= i (top-left, torch)
      p = softmax(s, axis=-1)              # exp(s - rowmax) / serial row sum
      p = dropout(p, dropout_p, key)       # only when dropout_p > 0 (a key is then required)
      out = matmul(p, v)                   # (..., L, Ev)

  A row with every score masked gives NaN, as torch's math reference does. With
  ``enable_gqa`` the H query heads share H_kv key/value heads (dim -3): head h reads kv head
  ``h // (H / H_kv)`` (torch's ``repeat_interleave``), as a ``broadcast_to`` copy.
* ``qkv_attention(qkv, dropout_p, is_causal, scale, key)``: the same attention of a packed
  qkv (B, T, 3, H, D) (flash attention's layout; nanoGPT's ``c_attn`` output viewed so), as
  ONE recorded op whose forward and backward each run one fused kernel (gtensor's
  ``qkv_attention``): bitwise ``scaled_dot_product_attention(q, k, v, ...)`` with
  ``q, k, v = (qkv[:, :, c].transpose(1, 2) for c in range(3))``, its result transposed back to
  (B, T, H, D), and qkv's gradient the composite's through that split. No q/k/v copies, no
  (B, H, T, T) intermediates on the tape. Not twice differentiable (use the composite for
  create_graph).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> q = tp.const(np.ones((1, 2, 3, 4)))
>>> g.scaled_dot_product_attention(q, q, q, is_causal=True).shape
(1, 2, 3, 4)
>>> g.qkv_attention(tp.const(np.ones((1, 3, 3, 2, 4))), is_causal=True).shape
(1, 3, 2, 4)
>>> x = tp.const(np.arange(4.0))
>>> g.masked_fill(x, np.array([True, False, True, False]), float("-inf")).numpy().tolist()
[-inf, 1.0, -inf, 3.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gtensor import describe
from gtensor.shapes import broadcast

from . import const_roles, ops
from .linalg import matmul_any
from .rng import Key, check_key, dropout, key_input
from .var import Var

NEG_INF = float("-inf")


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, Var) else tuple(np.shape(x))


def _is_bool(x: Any) -> bool:
    dt = x.dtype if isinstance(x, Var) else np.asarray(x).dtype
    return np.dtype(dt) == np.bool_


def _mask_arg(where: str, name: str, mask: Any, target: tuple[int, ...]) -> Any:
    """``mask`` checked to be a bool mask (Var or host data) broadcasting to ``target``."""
    if not isinstance(mask, Var):
        mask = np.asarray(_host(mask))
    if not _is_bool(mask):
        raise TypeError(f"{where}: {name} has dtype {np.dtype(mask.dtype).name}; expected a bool "
                        "mask (True where the value is filled)")
    _broadcasts_to(where, name, _shape(mask), target)
    return mask


def _broadcasts_to(where: str, name: str, shape: tuple, target: tuple) -> None:
    try:
        ok = broadcast(where, shape, target) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{where}: {name} has shape {shape}, which does not broadcast to "
                         f"{tuple(target)}; expected a shape broadcastable to it")


def _host(x: Any) -> Any:
    """A torch tensor (from a ported model's buffers) as numpy; anything else unchanged."""
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return x


def masked_fill(x: Var, mask: Any, value: Any) -> Var:
    """torch's ``masked_fill``: ``value`` where the bool ``mask`` is true, else x (a
    ``where``; x's gradient is +0.0 where the mask is true)."""
    if not isinstance(x, Var):
        raise TypeError(f"masked_fill: x is {describe(x)}; expected a Var of a Tape")
    m = _mask_arg("masked_fill", "mask", mask, x.shape)
    if isinstance(value, Var):
        if value.shape not in ((), (1,)):
            raise ValueError(f"masked_fill: value has shape {value.shape}; expected a 0-d Var or "
                             "a number")
    elif isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"masked_fill: value is {describe(value)}; expected a real number or a "
                        "0-d Var")
    else:
        value = np.asarray(value, dtype=x.dtype)
    out = ops.where(m, value, x)
    if not isinstance(m, Var):
        const_roles.mark(const_roles.made_input(out, 0), const_roles.host_role(m))
    if not isinstance(value, Var):
        const_roles.mark(const_roles.made_input(out, 1), const_roles.CONSTANT)
    return out


def _check_key(dropout_p: float, key: Any,
               where: str = "scaled_dot_product_attention") -> Key | Var | None:
    if dropout_p == 0.0:
        return None
    if key is None:
        raise ValueError(f"{where}: dropout_p is {dropout_p} but key is "
                         "None; expected key= (a gtape.rng.Key, e.g. a Dropout layer's "
                         "next_key()): a functional call owns no random stream (nn."
                         "MultiheadAttention does)")
    return check_key(where, key)


def _check_p(dropout_p: Any, where: str = "scaled_dot_product_attention") -> float:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float, np.floating)) or \
            not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{where}: dropout_p is {dropout_p!r}; expected a "
                         "probability in [0, 1)")
    return float(dropout_p)


def causal_mask(rows: int, cols: int) -> np.ndarray:
    """The bool mask (rows, cols) of torch's ``is_causal``: True where col <= row."""
    return np.tril(np.ones((rows, cols), dtype=bool))


def _gqa_heads(q: tuple, s: tuple, name: str) -> tuple[int, int]:
    """(H, H_kv) of q and k / v under enable_gqa, checked."""
    if len(q) < 3 or len(s) < 3:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa needs q and {name} with a "
                         f"heads dim (-3); got q {q} and {name} {s}")
    h, hkv = q[-3], s[-3]
    if hkv == 0 or h % hkv:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa: q has {h} heads and {name} "
                         f"{hkv}; expected the query heads a multiple of the kv heads")
    return h, hkv


def _gqa_shape(q: tuple, s: tuple) -> tuple:
    """The shape of k / v after its heads are repeated to q's."""
    return (*s[:-3], q[-3], *s[-2:])


def _gqa(q: tuple, kv: Any, name: str) -> Any:
    """k or v with its H_kv heads (dim -3) repeated to q's H heads (repeat_interleave)."""
    s = _shape(kv)
    h, hkv = _gqa_heads(q, s, name)
    if hkv == h:
        return kv
    grouped = ops.reshape(kv, (*s[:-3], hkv, 1, *s[-2:]))
    full = ops.broadcast_to(grouped, (*s[:-3], hkv, h // hkv, *s[-2:]))
    return ops.reshape(full, (*s[:-3], h, *s[-2:]))


def _scores_shape(sq: tuple, sk: tuple) -> tuple[int, ...]:
    """The shape of matmul(q, k^T): the broadcast batch dims, then (L, S)."""
    try:
        batch = broadcast("scaled_dot_product_attention", sq[:-2], sk[:-2])
    except ValueError:
        raise ValueError(f"scaled_dot_product_attention: the batch dims of q {sq} and k {sk} do "
                         "not broadcast") from None
    return (*batch, sq[-2], sk[-2])


def _mask(attn_mask: Any, scores: tuple) -> tuple[Any, bool]:
    """(the mask as a Var or host array, is_bool), checked against the scores' shape."""
    m = attn_mask if isinstance(attn_mask, Var) else np.asarray(_host(attn_mask))
    if _is_bool(m):
        return _mask_arg("scaled_dot_product_attention", "attn_mask", m, scores), True
    if np.dtype(m.dtype).kind != "f":
        raise TypeError(f"scaled_dot_product_attention: attn_mask has dtype "
                        f"{np.dtype(m.dtype).name}; expected bool (True takes part) or a float "
                        "mask (added to the scores)")
    _broadcasts_to("scaled_dot_product_attention", "attn_mask", _shape(m), scores)
    return m, False


def attention_weights(q: Any, k: Any, attn_mask: Any = None, is_causal: bool = False,
                      scale: float | None = None, enable_gqa: bool = False,
                      additive_bias: Any = None) -> Var:
    """The softmax of the masked, scaled scores (``scaled_dot_product_attention`` up to its
    dropout): (..., L, S). ``additive_bias`` (internal: MultiheadAttention's float masks) is
    added after ``attn_mask``. Every argument is checked before the first op is recorded."""
    sq, sk = _shape(q), _shape(k)
    if not isinstance(q, Var) and not isinstance(k, Var):
        raise TypeError("scaled_dot_product_attention: expected q or k to be a Var of a Tape")
    if len(sq) < 2 or len(sk) < 2:
        raise ValueError(f"scaled_dot_product_attention: q {sq} and k {sk}; expected at least "
                         "2 dims each, (..., L, E) and (..., S, E)")
    if sq[-1] != sk[-1]:
        raise ValueError(f"scaled_dot_product_attention: q has shape {sq} and k {sk}; expected "
                         "the same last dim E")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: is_causal=True with an explicit "
                         "attn_mask; expected one of them (torch's rule)")
    if scale is None:
        scale = 1.0 / math.sqrt(sq[-1])
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or \
            not math.isfinite(scale):
        raise ValueError(f"scaled_dot_product_attention: scale is {scale!r}; expected a finite "
                         "number or None (1/sqrt(E))")
    if enable_gqa:
        _gqa_heads(sq, sk, "k")
    scores = _scores_shape(sq, _gqa_shape(sq, sk) if enable_gqa else sk)
    mask = None if attn_mask is None else _mask(attn_mask, scores)
    if additive_bias is not None:
        _broadcasts_to("scaled_dot_product_attention", "the float mask", _shape(additive_bias),
                       scores)
    if enable_gqa:
        k = _gqa(sq, k, "k")
    s = matmul_any(q, k, tb=True)
    s = ops.muls(s, float(scale))
    if mask is not None:
        m, is_bool = mask
        if is_bool:
            s = ops.where(m, s, np.asarray(NEG_INF, s.dtype))
            _mark(s, 2, const_roles.CONSTANT)
        else:
            s = ops.add(s, m)
        _mark_host(s, m, 0 if is_bool else 1)
    if additive_bias is not None:
        s = ops.add(s, additive_bias)
        _mark_host(s, additive_bias, 1)
    if is_causal:  # a mask and a fill made from the shape: per-shape constants
        s = ops.where(causal_mask(*s.shape[-2:]), s, np.asarray(NEG_INF, s.dtype))
        _mark(s, 0, const_roles.CONSTANT)
        _mark(s, 2, const_roles.CONSTANT)
    return ops.softmax(s, -1)


def _mark(out: Var, position: int, role: str) -> None:
    """Record ``role`` for the const this call made as input ``position`` of ``out``'s node."""
    const_roles.mark(const_roles.made_input(out, position), role)


def _mark_host(out: Var, m: Any, position: int) -> None:
    """The role of host mask ``m``, input ``position`` of ``out``'s node (its const)."""
    if not isinstance(m, Var):
        _mark(out, position, const_roles.host_role(m))


def scaled_dot_product_attention(q: Any, k: Any, v: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, key: Any = None,
                                 enable_gqa: bool = False) -> Var:
    """torch's ``F.scaled_dot_product_attention`` in our exact order (the module doc): q
    (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev). ``attn_mask``: bool (True
    takes part) or float (added), broadcasting to (..., L, S); ``is_causal``: the top-left
    causal mask (not with attn_mask); ``scale``: None is 1/sqrt(E); ``dropout_p`` > 0 needs
    ``key`` (a ``gtape.rng.Key`` or key Var): the weights' dropout mask is drawn from it."""
    p_drop = _check_p(dropout_p)
    k_drop = _check_key(p_drop, key)
    sq, sv, sk = _shape(q), _shape(v), _shape(k)
    if enable_gqa:
        _gqa_heads(sq, sv, "v")
        sv = _gqa_shape(sq, sv)
    if len(sv) < 2 or sv[-2] != sk[-2]:
        raise ValueError(f"scaled_dot_product_attention: k has shape {sk} and v {sv}; expected "
                         "the same sequence length S (dim -2)")
    w = attention_weights(q, k, attn_mask, is_causal, scale, enable_gqa)
    if enable_gqa:
        v = _gqa(sq, v, "v")
    if k_drop is not None:
        w = dropout(w, p_drop, k_drop)
    return matmul_any(w, v)


def qkv_attention(qkv: Var, dropout_p: float = 0.0, is_causal: bool = False,
                  scale: float | None = None, key: Any = None) -> Var:
    """Self-attention of a packed ``qkv`` (B, T, 3, H, D) -> (B, T, H, D) as one fused op,
    bitwise ``scaled_dot_product_attention`` of its q, k, v (the module doc); ``dropout_p`` > 0
    needs ``key`` (a ``gtape.rng.Key`` or key Var), ``scale`` None is 1/sqrt(D)."""
    if not isinstance(qkv, Var):
        raise TypeError(f"qkv_attention: qkv is {describe(qkv)}; expected a Var of a Tape, "
                        "(B, T, 3, H, D)")
    if len(qkv.shape) != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv_attention: qkv has shape {qkv.shape}; expected (B, T, 3, H, D) "
                         "(q, k and v packed along dim 2)")
    if np.dtype(qkv.dtype).kind != "f":
        raise TypeError(f"qkv_attention: qkv has dtype {np.dtype(qkv.dtype).name}; expected "
                        "the tape's float dtype")
    p_drop = _check_p(dropout_p, "qkv_attention")
    k_drop = _check_key(p_drop, key, "qkv_attention")
    if scale is None:
        scale = 1.0 / math.sqrt(qkv.shape[-1]) if qkv.shape[-1] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or \
            not math.isfinite(scale):
        raise ValueError(f"qkv_attention: scale is {scale!r}; expected a finite number or None "
                         "(1/sqrt(D))")
    tp = qkv.tape
    if isinstance(k_drop, Var):
        if k_drop.tape is not tp:
            raise ValueError("qkv_attention: key is a Var of another tape than qkv")
        kv, made = k_drop, False
    elif k_drop is not None:
        kv, made = key_input(tp, k_drop), False
    else:  # no dropout: the kernels never read the key
        kv, made = np.zeros(2, dtype=np.int64), True
    out = ops.apply("qkv_attention", (qkv, kv), scale=float(scale), causal=bool(is_causal),
                    p=p_drop)
    if made:
        _mark(out, 1, const_roles.CONSTANT)
    return out
