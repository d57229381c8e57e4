"""Modules as torch names them: ``Module`` (parameters, names, state dicts), ``Sequential`` and
the parameter-free activation layers.

A module's parameters are its attributes that are param Vars, then its child modules'
(attributes that are Modules, or lists of them), in assignment order; names join the path
with dots as torch does (``0.weight``, ``layers.1.bias``), so a torch ``state_dict`` (as numpy
arrays) loads with ``load_state_dict``.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> model = g.nn.Sequential(g.nn.Linear(tp, 3, 4), g.nn.ReLU(), g.nn.Linear(tp, 4, 1, seed=1))
>>> [(k, v.shape) for k, v in model.named_parameters()]
[('0.weight', (4, 3)), ('0.bias', (4,)), ('2.weight', (1, 4)), ('2.bias', (1,))]
>>> model(tp.const(np.ones((5, 3)))).shape
(5, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
from gtensor import describe

from . import ops
from .var import Var


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped (torch's return value)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """A callable layer holding params of one tape; ``forward`` says what it computes."""

    def forward(self, x: Any) -> Var:
        """The layer's output for input ``x``."""
        raise NotImplementedError(f"{type(self).__name__}: forward is not defined")

    def __call__(self, x: Any) -> Var:
        """``forward(x)``."""
        return self.forward(x)

    # ---------------------------------------------------------------- structure
    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the direct children, in assignment order."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(
                    isinstance(m, Module) for m in value):
                for k, m in enumerate(value):
                    yield f"{name}.{k}", m

    def _own_parameters(self) -> Iterator[tuple[str, Var]]:
        for name, value in vars(self).items():
            if isinstance(value, Var) and value.op == "param":
                yield name, value

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Var]]:
        """(dotted name, param Var) of this module and its children (each param once)."""
        seen: set[tuple[int, int]] = set()
        for name, p in self._walk(prefix):
            key = (id(p.tape), p.index)
            if key not in seen:
                seen.add(key)
                yield name, p

    def _walk(self, prefix: str) -> Iterator[tuple[str, Var]]:
        for name, p in self._own_parameters():
            yield prefix + name, p
        for name, child in self.named_children():
            yield from child._walk(f"{prefix}{name}.")

    def parameters(self) -> list[Var]:
        """The param Vars, in ``named_parameters`` order."""
        return [p for _, p in self.named_parameters()]

    # ---------------------------------------------------------------- mode
    training: bool = True  # torch's flag: train() / eval() set it on the module and below

    def train(self, mode: bool = True) -> Module:
        """Training mode (``mode=True``) or evaluation mode for this module and every child
        (Dropout is the identity in evaluation mode); returns the module, as torch."""
        if not isinstance(mode, (bool, np.bool_)):
            raise TypeError(f"{type(self).__name__}.train: mode is {describe(mode)}; expected "
                            "a bool")
        self.training = bool(mode)
        for _, child in self.named_children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """``train(False)``: evaluation mode for this module and every child."""
        return self.train(False)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: a host numpy copy of the param's value}, in ``named_parameters`` order."""
        return {name: p.numpy() for name, p in self.named_parameters()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True
                        ) -> IncompatibleKeys:
        """Overwrite the params from ``state_dict`` ({name: array}, e.g. a torch state dict as
        numpy): all or nothing -- every key, shape and dtype is checked before any write.

        ``strict`` (default) refuses missing and unexpected keys; ``strict=False`` loads the
        keys both sides have and returns the ones it skipped. Values must be floating point
        arrays of the param's shape that convert to the tape's dtype exactly (float16/32 into
        a float64 tape; float64 into a float32 tape would round and is refused).
        """
        from .state import check_state
        loads, keys = check_state("load_state_dict", dict(self.named_parameters()), state_dict,
                                  strict)
        for p, arr in loads:
            p.tape.set_value(p, arr)
        return keys

    def __repr__(self) -> str:
        children = list(self.named_children())
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): {child!r}".replace("\n", "\n  ") for name, child in children]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        """The arguments shown in ``repr`` (none by default)."""
        return ""


class Sequential(Module):
    """Modules (or plain Var -> Var functions) applied in order; children named 0, 1, ..."""

    def __init__(self, *layers: Module | Callable[[Var], Var]) -> None:
        for k, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Sequential: layer {k} is {describe(layer)}; expected a "
                                "gtape.nn Module (or a function of one Var)")
        self.layers = list(layers)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """("0", first module), ("1", ...): positions, as torch names them."""
        for k, layer in enumerate(self.layers):
            if isinstance(layer, Module):
                yield str(k), layer

    def forward(self, x: Any) -> Var:
        """Each layer on the previous layer's output."""
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, k: int) -> Module | Callable[[Var], Var]:
        return self.layers[k]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Module | Callable[[Var], Var]]:
        return iter(self.layers)


class ReLU(Module):
    """max(x, 0) (``gtape.relu``)."""

    def forward(self, x: Any) -> Var:
        """relu(x)."""
        return ops.relu(x)


class Tanh(Module):
    """tanh(x) (``gtape.tanh``)."""

    def forward(self, x: Any) -> Var:
        """tanh(x)."""
        return ops.tanh(x)


class Sigmoid(Module):
    """1 / (1 + exp(-x)) (``gtape.sigmoid``)."""

    def forward(self, x: Any) -> Var:
        """sigmoid(x)."""
        return ops.sigmoid(x)


class Identity(Module):
    """x unchanged (no node is recorded)."""

    def forward(self, x: Any) -> Var:
        """x."""
        return x


class Flatten(Module):
    """Axes ``start_dim..end_dim`` joined into one, as ``torch.nn.Flatten`` (one ``reshape``)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Any) -> Var:
        """x reshaped: the flattened axes' sizes multiplied."""
        shape = x.shape
        nd = len(shape)
        a = self.start_dim + nd if self.start_dim < 0 else self.start_dim
        b = self.end_dim + nd if self.end_dim < 0 else self.end_dim
        if not 0 <= a <= b < nd:
            raise ValueError(f"Flatten: start_dim {self.start_dim}, end_dim {self.end_dim} do "
                             f"not name axes of an input of shape {shape}")
        new = shape[:a] + (int(np.prod(shape[a:b + 1])),) + shape[b + 1:]
        return x if new == shape else ops.reshape(x, new)

    def extra_repr(self) -> str:
        """start_dim, end_dim."""
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
