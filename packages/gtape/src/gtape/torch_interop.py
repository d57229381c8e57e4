"""``from_torch``: a torch module rebuilt as gtape modules on a tape, holding torch's weights.

Supported: ``torch.nn.Sequential`` (nested too), ``Linear``, ``ReLU``, ``Tanh``, ``Sigmoid``,
``Flatten``, ``Identity``. Names and shapes are torch's, so ``model.state_dict()`` has the torch
module's keys and shapes. Convolutions are refused: gtensor has no convolution op yet.

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

from gtensor import describe

from . import modules
from .tape import Tape

SUPPORTED = ("Sequential", "Linear", "ReLU", "Tanh", "Sigmoid", "Flatten", "Identity")
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


def _check(torch: Any, m: Any, path: str) -> None:
    """Refuse (TypeError naming the layer's path) anything ``_build`` cannot rebuild."""
    kind = _kind(torch, m)
    where = f"layer {path!r}" if path else "the module"
    if kind is None:
        why = (" (gtensor has no convolution op yet)" if "Conv" in type(m).__name__ else "")
        raise TypeError(f"from_torch: {where} is torch.nn.{type(m).__name__}, which is not "
                        f"supported{why}; supported: {', '.join(SUPPORTED)}")
    if kind == "Sequential":
        for name, child in m.named_children():
            _check(torch, child, f"{path}.{name}" if path else name)
    if kind == "Linear" and m.weight.dtype not in (torch.float16, torch.float32, torch.float64):
        raise TypeError(f"from_torch: {where} has weights of dtype {m.weight.dtype}; expected "
                        "a floating point dtype")


def _build(torch: Any, m: Any, tp: Tape) -> modules.Module:
    kind = _kind(torch, m)
    if kind == "Sequential":
        return modules.Sequential(*[_build(torch, c, tp) for c in m.children()])
    if kind == "Linear":
        from .nn import Linear

        bias = None if m.bias is None else m.bias.detach().cpu().numpy()
        return Linear.from_weights(tp, m.weight.detach().cpu().numpy(), bias)
    if kind == "Flatten":
        return modules.Flatten(m.start_dim, m.end_dim)
    return _PLAIN[kind]()
