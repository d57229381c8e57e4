"""torch functions called on Vars, translated to gtape's exact ops (``Var.__torch_function__``).

A Var is a torch "tensor-like" (it defines ``__torch_function__``): ``torch.tanh(v)``,
``F.gelu(v)``, ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``,
``F.cross_entropy(logits, targets)``, ``torch.cat([a, b], dim=1)``, ``torch_tensor + v`` ...
run the gtape op of the same meaning (``TABLE`` lists them), with torch tensors among the
arguments read as host data. This is how ``gtape.nn.from_torch`` runs a custom module's own
``forward`` code on Vars; it works the same in plain code. A torch function outside the table
raises ``NotImplementedError`` naming it.

Random functions (``F.dropout``, SDPA's ``dropout_p``, ``torch.multinomial``) need a key: inside
the forward of a module ported by ``from_torch`` they take the module's next functional key
(``PortedModule.functional_key``: its own key folded by a per-module call counter); elsewhere
they are refused (use ``g.dropout(x, p, key)``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import (
    activations,
    attention,
    const_roles,
    linalg,
    losses,
    norms,
    ops,
    rng,
    shaping,
    tensor_methods,
)
from .var import Var

_local = threading.local()


def module_stack() -> list[Any]:
    """The ported modules whose forward is running in this thread (innermost last)."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _key(what: str) -> rng.Key:
    stack = module_stack()
    if not stack:
        raise ValueError(f"{what} draws random numbers but no key is at hand: outside a "
                         "module ported by g.nn.from_torch, call the gtape function with an "
                         "explicit key (g.dropout(x, p, key), g.scaled_dot_product_attention("
                         "..., key=k), g.multinomial(probs, n, key=k))")
    return stack[-1].functional_key()


def host(x: Any) -> Any:
    """torch tensors (anywhere in lists / tuples) as numpy arrays; everything else as is."""
    mod = type(x).__module__
    if (mod == "torch" or mod.startswith("torch.")) and hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(host(v) for v in x)
    return x


def _dim(where: str, dim: Any) -> int:
    if dim is None:
        raise ValueError(f"{where}: dim is None; expected an explicit dim (torch's implicit "
                         "dim choice is deprecated)")
    return dim


# ---------------------------------------------------------------- handlers (torch's signatures)
def _softmax(x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Var:
    return ops.softmax(x, _dim("softmax", dim))


def _log_softmax(x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Var:
    return ops.log_softmax(x, _dim("log_softmax", dim))


def _logsumexp(x: Any, dim: Any, keepdim: bool = False) -> Var:
    y = ops.logsumexp(x, dim)
    return tensor_methods.unsqueeze(y, dim) if keepdim else y


def _dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    if not training or p == 0.0:
        return x
    return rng.dropout(x, p, _key("dropout"))


def _sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Var:
    key = _key("scaled_dot_product_attention") if dropout_p else None
    return attention.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                  scale, key, enable_gqa)


def _cross_entropy(x: Any, target: Any, weight: Any = None, size_average: Any = None,
                   ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                   label_smoothing: float = 0.0) -> Var:
    if weight is not None or label_smoothing != 0.0 or size_average is not None or \
            reduce is not None or reduction != "mean":
        raise NotImplementedError("cross_entropy: weight, label_smoothing and reductions other "
                                  "than 'mean' are not supported")
    # ignore_index always enters the formula (sum / kept count, torch's mean): whether a
    # target equals it is data, and a captured program must treat a later batch as eager does
    return losses.cross_entropy(x, np.asarray(target), ignore_index)


def _mse(x: Any, target: Any, size_average: Any = None, reduce: Any = None,
         reduction: str = "mean", weight: Any = None) -> Var:
    if reduction != "mean" or size_average is not None or reduce is not None or \
            weight is not None:
        raise NotImplementedError("mse_loss: only reduction='mean' is supported")
    return losses.mse(x, target)


def _layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
                eps: float = 1e-5) -> Var:
    if len(tuple(normalized_shape)) != 1:
        raise NotImplementedError("layer_norm: normalisation over the last axis only")
    return norms.layer_norm(x, weight, bias, eps)


def _rms_norm(x: Any, normalized_shape: Any, weight: Any = None, eps: Any = None) -> Var:
    if len(tuple(normalized_shape)) != 1:
        raise NotImplementedError("rms_norm: normalisation over the last axis only")
    if eps is None:
        eps = float(np.finfo(x.dtype).eps)
    return norms.rms_norm(x, weight, eps)


def _embedding(ids: Any, weight: Any, padding_idx: Any = None, max_norm: Any = None,
               *rest: Any, **kw: Any) -> Var:
    if padding_idx is not None or max_norm is not None:
        raise NotImplementedError("embedding: padding_idx and max_norm are not supported")
    return ops.embedding(weight, np.asarray(ids, dtype=np.int64))


def _multinomial(probs: Any, num_samples: int, replacement: bool = False, *,
                 generator: Any = None) -> Any:
    import torch

    got = rng.multinomial(probs, num_samples, replacement, key=_key("multinomial"))
    return torch.from_numpy(got)


def _sum(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Var:
    return ops.sum(x, dim, keepdim)


def _mean(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Var:
    return ops.mean(x, dim, keepdim)


def _fold(fn: Callable[..., Var]) -> Callable[..., Var]:
    """torch.amax / amin: ``dim=()`` (the default) reduces every axis."""
    return lambda x, dim=(), keepdim=False: fn(x, None if dim == () else dim, keepdim)


def _prod(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Var:
    return ops.prod(x, dim, keepdim)


def _transpose(x: Any, d0: int, d1: int) -> Var:
    return tensor_methods.transpose(x, d0, d1)


def _flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Var:
    return tensor_methods.flatten(x, start_dim, end_dim)


def _reflected(fn: Callable[[Any, Any], Var]) -> Callable[..., Var]:
    return lambda a, b, *rest, **kw: fn(b, a)


def _table() -> dict[Any, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    T = torch.Tensor
    table = {
        F.relu: lambda x, inplace=False: ops.relu(x), torch.relu: ops.relu,
        torch.tanh: ops.tanh, F.tanh: ops.tanh, torch.sigmoid: ops.sigmoid,
        F.sigmoid: ops.sigmoid, torch.exp: ops.exp, torch.log: ops.log, torch.sqrt: ops.sqrt,
        torch.abs: ops.abs, torch.neg: ops.neg,
        F.gelu: lambda x, approximate="none": activations.gelu(x, approximate),
        F.silu: lambda x, inplace=False: activations.silu(x),
        F.softplus: lambda x, beta=1.0, threshold=20.0: activations.softplus(x, beta, threshold),
        F.softmax: _softmax, torch.softmax: _softmax, F.log_softmax: _log_softmax,
        torch.log_softmax: _log_softmax, torch.logsumexp: _logsumexp,
        F.linear: linalg.linear, F.layer_norm: _layer_norm, F.rms_norm: _rms_norm,
        F.embedding: _embedding, F.dropout: _dropout,
        F.scaled_dot_product_attention: _sdpa, F.cross_entropy: _cross_entropy,
        F.mse_loss: _mse, torch.multinomial: _multinomial,
        torch.cat: lambda ts, dim=0: shaping.cat(ts, dim), torch.concat:
        lambda ts, dim=0: shaping.cat(ts, dim), torch.stack: lambda ts, dim=0:
        shaping.stack(ts, dim),
        torch.matmul: ops.matmul, torch.mm: ops.matmul, torch.bmm: ops.bmm,
        torch.sum: _sum, torch.mean: _mean, torch.where: ops.where,
        torch.transpose: _transpose, torch.reshape: ops.reshape, torch.flatten: _flatten,
        torch.permute: lambda x, dims: tensor_methods.permute(x, *dims),
        torch.squeeze: lambda x, dim=None: tensor_methods.squeeze(x, dim),
        torch.unsqueeze: tensor_methods.unsqueeze, torch.masked_fill: attention.masked_fill,
        torch.maximum: ops.maximum, torch.minimum: ops.minimum,
        torch.amax: _fold(ops.amax), torch.amin: _fold(ops.amin), torch.prod: _prod,
    }
    for name, fn in (("add", ops.add), ("sub", ops.sub), ("mul", ops.mul),
                     ("div", ops.div), ("matmul", ops.matmul), ("truediv", ops.div)):
        for attr in (f"__{name}__", name):
            if hasattr(T, attr):
                table[getattr(T, attr)] = lambda a, b, *r, _fn=fn, **k: _fn(a, b)
        if hasattr(T, f"__r{name}__"):
            table[getattr(T, f"__r{name}__")] = _reflected(fn)
    return table


_TABLE: dict[Any, Callable[..., Any]] = {}


def table() -> dict[Any, Callable[..., Any]]:
    """The translation table: torch callable -> gtape implementation (built on first use)."""
    if not _TABLE:
        _TABLE.update(_table())
    return _TABLE


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run the gtape translation of torch ``func`` on ``args`` / ``kwargs`` (Vars stay Vars,
    torch tensors become host data)."""
    fn = table().get(func)
    if fn is None:
        raise NotImplementedError(f"torch function {torch_name(func)} was called with a gtape "
                                  "Var, and gtape has no translation of it; supported: "
                                  f"{supported_names()}")
    hargs, hkw = host(tuple(args)), {k: host(v) for k, v in kwargs.items()}
    tape = next((x.tape for x in (*args, *kwargs.values()) if isinstance(x, Var)), None)
    if tape is None or not const_roles.in_ported_forward():
        return fn(*hargs, **hkw)
    # inside a ported forward: the consts this call makes from host data are the caller's
    # data when some torch / numpy argument is (a view of) the forward's arguments, else
    # per-shape constants (gtape.const_roles)
    start = len(tape)
    out = fn(*hargs, **hkw)
    hosts = [x for x in _flat((*hargs, *hkw.values())) if isinstance(x, np.ndarray)]
    const_roles.mark_since(tape, start, const_roles.host_role(*hosts))
    return out


def _flat(xs: Any) -> Any:
    """The items of nested lists / tuples."""
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def torch_name(func: Any) -> str:
    """The public name of a torch callable: ``torch.cumsum``, ``torch.nn.functional.pad``,
    ``torch.Tensor.cumsum``."""
    import torch
    import torch.nn.functional as F

    name = getattr(func, "__name__", None)
    for prefix, space in (("torch.nn.functional", F), ("torch", torch),
                          ("torch.Tensor", torch.Tensor)):
        if name and getattr(space, name, None) is func:
            return f"{prefix}.{name}"
    return f"{getattr(func, '__module__', None) or 'torch'}.{getattr(func, '__qualname__', name)}"


def supported_names() -> str:
    """The names of the translated torch functions (for messages and docs)."""
    names = sorted({getattr(f, "__name__", str(f)) for f in table()})
    return ", ".join(names)
