"""``from_torch``: a torch module rebuilt as gtape modules on a tape, holding torch's weights.

Supported: ``torch.nn.Sequential`` (nested too), ``Linear``, ``ReLU``, ``Tanh``, ``Sigmoid``,
``Flatten``, ``Identity``, ``Conv2d`` (groups 1, dilation 1, zero padding given as ints),
``MaxPool2d`` / ``AvgPool2d`` (no padding, no ceil_mode), ``Dropout``, ``LayerNorm`` /
``RMSNorm`` (over the last axis), ``Embedding`` (no padding_idx, max_norm). Names and shapes are
torch's, so ``model.state_dict()`` has the torch module's keys and shapes; each module keeps
torch's train/eval mode. A Dropout's masks come from ``gtape.rng`` (key 0), not torch's
generator. ``RMSNorm(eps=None)`` gets the tape dtype's machine epsilon, as torch's.

>>> import numpy as np, torch, gtape as g
>>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
>>> tp = g.Tape()
>>> model = g.nn.from_torch(net.double(), tp)
>>> x = np.ones((2, 3))
>>> bool(np.allclose(model(tp.const(x)).numpy(), net(torch.from_numpy(x)).detach().numpy(),
...                  rtol=1e-14, atol=0))
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe

from . import layers, modules, norm_layers
from .tape import Tape

SUPPORTED = ("Sequential", "Linear", "ReLU", "Tanh", "Sigmoid", "Flatten", "Identity", "Conv2d",
             "MaxPool2d", "AvgPool2d", "Dropout", "LayerNorm", "RMSNorm", "Embedding")
_PLAIN = {"ReLU": modules.ReLU, "Tanh": modules.Tanh, "Sigmoid": modules.Sigmoid,
          "Identity": modules.Identity}


def from_torch(module: Any, tp: Tape) -> modules.Module:
    """The gtape equivalent of ``module`` with its parameters registered on ``tp`` (copied in
    under the tape's conversion rule); refuses an unsupported layer before registering any."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch: module is {describe(module)}; expected a torch.nn.Module")
    if not isinstance(tp, Tape):
        raise TypeError(f"from_torch: tp is {describe(tp)}; expected a gtape.Tape")
    _check(torch, module, "")
    return _build(torch, module, tp)


def _kind(torch: Any, m: Any) -> str | None:
    for name in SUPPORTED:
        if type(m) is getattr(torch.nn, name):
            return name
    return None


def _limits(m: Any, kind: str) -> list[str]:
    """What of layer ``m`` (of ``kind``) gtape's layer cannot do, as 'attr=value' strings."""
    def two(v: Any) -> tuple:
        return tuple(v) if isinstance(v, (tuple, list)) else (v, v)

    bad = []
    if kind == "Conv2d":
        if m.groups != 1:
            bad.append(f"groups={m.groups}")
        if two(m.dilation) != (1, 1):
            bad.append(f"dilation={m.dilation}")
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            bad.append(f"padding={m.padding!r}, padding_mode={m.padding_mode!r}")
    if kind in ("MaxPool2d", "AvgPool2d"):
        if two(m.padding) != (0, 0):
            bad.append(f"padding={m.padding}")
        if m.ceil_mode:
            bad.append("ceil_mode=True")
    if kind == "MaxPool2d" and (two(m.dilation) != (1, 1) or m.return_indices):
        bad.append(f"dilation={m.dilation}, return_indices={m.return_indices}")
    if kind == "AvgPool2d" and m.divisor_override is not None:
        bad.append(f"divisor_override={m.divisor_override}")
    if kind in ("LayerNorm", "RMSNorm") and len(m.normalized_shape) != 1:
        bad.append(f"normalized_shape={tuple(m.normalized_shape)} (the last axis only)")
    if kind == "Embedding" and (m.padding_idx is not None or m.max_norm is not None):
        bad.append(f"padding_idx={m.padding_idx}, max_norm={m.max_norm}")
    return bad


def _check(torch: Any, m: Any, path: str) -> None:
    """Refuse (TypeError naming the layer's path) anything ``_build`` cannot rebuild."""
    kind = _kind(torch, m)
    where = f"layer {path!r}" if path else "the module"
    if kind is None:
        raise TypeError(f"from_torch: {where} is torch.nn.{type(m).__name__}, which is not "
                        f"supported; supported: {', '.join(SUPPORTED)}")
    if kind == "Sequential":
        for name, child in m.named_children():
            _check(torch, child, f"{path}.{name}" if path else name)
    bad = _limits(m, kind)
    if bad:
        raise TypeError(f"from_torch: {where} is torch.nn.{kind} with {', '.join(bad)}, which "
                        f"gtape.nn.{kind} does not support")
    for _, p in m.named_parameters(recurse=False):
        if p.dtype not in (torch.float16, torch.float32, torch.float64):
            raise TypeError(f"from_torch: {where} has weights of dtype {p.dtype}; expected "
                            "a floating point dtype")


def _host(t: Any) -> Any:
    return None if t is None else t.detach().cpu().numpy()


def _build(torch: Any, m: Any, tp: Tape) -> modules.Module:
    out = _build_one(torch, m, tp)
    out.training = bool(m.training)
    return out


def _build_one(torch: Any, m: Any, tp: Tape) -> modules.Module:
    kind = _kind(torch, m)
    if kind == "Sequential":
        return modules.Sequential(*[_build(torch, c, tp) for c in m.children()])
    if kind == "Linear":
        from .nn import Linear

        return Linear.from_weights(tp, _host(m.weight), _host(m.bias))
    if kind == "Conv2d":
        return layers.Conv2d.from_weights(tp, _host(m.weight), _host(m.bias), m.stride,
                                          m.padding)
    if kind in ("MaxPool2d", "AvgPool2d"):
        return getattr(layers, kind)(m.kernel_size, m.stride)
    if kind == "Dropout":
        return layers.Dropout(m.p)
    if kind in ("LayerNorm", "RMSNorm"):
        h = m.normalized_shape[0]
        affine = m.weight is not None
        if kind == "LayerNorm":
            layer = norm_layers.LayerNorm(tp, h, m.eps, affine, m.bias is not None)
        else:
            eps = float(np.finfo(tp.dtype).eps) if m.eps is None else m.eps
            layer = norm_layers.RMSNorm(tp, h, eps, affine)
        for name in ("weight", "bias"):
            p = getattr(layer, name, None)
            if p is not None:
                tp.set_value(p, _host(getattr(m, name)))
        return layer
    if kind == "Embedding":
        layer = layers.Embedding(tp, m.num_embeddings, m.embedding_dim)
        tp.set_value(layer.weight, _host(m.weight))
        return layer
    if kind == "Flatten":
        return modules.Flatten(m.start_dim, m.end_dim)
    return _PLAIN[kind]()
