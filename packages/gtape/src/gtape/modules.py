"""Modules as torch names them: ``Module`` (parameters, names, state dicts), ``Sequential`` and
the parameter-free activation layers.

A module's parameters are its attributes that are param Vars, then its child modules'
(attributes that are Modules, or lists / dicts of them, ``ModuleList``, ``ModuleDict``), in
assignment order; names join the path with dots as torch does (``0.weight``,
``layers.1.bias``), so a torch ``state_dict`` (as numpy arrays) loads with ``load_state_dict``.

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
    """A callable layer holding params of one tape; ``forward`` says what it computes.

    Structure (torch's): a module's parameters are its attributes that are param Vars, its
    buffers those registered with ``register_buffer`` (host arrays: masks, tables), its
    children the attributes that are Modules (or lists / tuples / dicts of Modules, and the
    containers ``ModuleList`` / ``ModuleDict``), all in assignment order.
    """

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The layer's output for its inputs."""
        raise NotImplementedError(f"{type(self).__name__}: forward is not defined")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward(*args, **kwargs)``."""
        return self.forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # called only when normal lookup fails: a registered buffer, read as an attribute (a
        # tape state: its current value, ``Tape.state_var``)
        bufs = self.__dict__.get("_buffers")
        if bufs is not None and name in bufs:
            b = bufs[name]
            return b.tape.state_var(b) if _is_state(b) else b
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
            elif isinstance(value, dict) and value and not name.startswith("_") and all(
                    isinstance(m, Module) for m in value.values()):
                for k, m in value.items():
                    yield f"{name}.{k}", m

    def children(self) -> Iterator[Module]:
        """The direct children (``named_children``'s modules)."""
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(dotted path, module) of this module ("" or ``prefix``) and every descendant, each
        module once, parents before children (torch's order)."""
        seen: set[int] = set()

        def walk(m: Module, path: str) -> Iterator[tuple[str, Module]]:
            if id(m) in seen:
                return
            seen.add(id(m))
            yield path, m
            for name, child in m.named_children():
                yield from walk(child, f"{path}.{name}" if path else name)

        yield from walk(self, prefix)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant (``named_modules``'s)."""
        for _, m in self.named_modules():
            yield m

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """``fn(m)`` for every child module (recursively, children first), then for this one;
        returns the module (torch's ``apply``, e.g. ``model.apply(init_weights)``)."""
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}.apply: fn is {describe(fn)}; expected a "
                            "callable taking a module")
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def _own_parameters(self) -> Iterator[tuple[str, Var]]:
        for name, value in vars(self).items():
            if isinstance(value, Var) and value.op == "param":
                yield name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Var]]:
        """(dotted name, param Var) of this module and its children; a param reachable by two
        names (tied weights) is listed once, by its first name, unless ``remove_duplicate`` is
        False (torch's)."""
        seen: set[tuple[int, int]] = set()
        walk = self._walk(prefix) if recurse else ((prefix + n, p)
                                                   for n, p in self._own_parameters())
        for name, p in walk:
            key = (id(p.tape), p.index)
            if remove_duplicate and key in seen:
                continue
            seen.add(key)
            yield name, p

    def _walk(self, prefix: str) -> Iterator[tuple[str, Var]]:
        for name, p in self._own_parameters():
            yield prefix + name, p
        for name, child in self.named_children():
            yield from child._walk(f"{prefix}{name}.")

    def parameters(self, recurse: bool = True) -> list[Var]:
        """The param Vars, in ``named_parameters`` order (tied ones once)."""
        return [p for _, p in self.named_parameters(recurse=recurse)]

    @property
    def tape(self) -> Any:
        """The tape of the module's parameters (None for a module without any)."""
        for _, p in self.named_parameters():
            return p.tape
        return None

    # ---------------------------------------------------------------- buffers
    def register_buffer(self, name: str, value: Any, persistent: bool = True) -> None:
        """Keep host array ``value`` (a mask, a table; numpy, or a torch tensor copied to
        numpy) as buffer ``name``: read as ``self.name``, listed by ``named_buffers`` and, when
        ``persistent``, saved in ``state_dict`` (torch's). None removes nothing and stores no
        value (torch's "no buffer"). A tape state Var (``tp.state``: running statistics the
        training step updates) is kept as it is: ``self.name`` reads its current value
        (``Tape.state_var``), ``state_dict`` a host copy of it."""
        if not isinstance(name, str) or not name.isidentifier() or "." in name:
            raise TypeError(f"register_buffer: name is {name!r}; expected an identifier")
        if name in vars(self) and name not in self.__dict__.get("_buffers", {}):
            raise KeyError(f"register_buffer: {type(self).__name__} already has an attribute "
                           f"{name!r}")
        if value is not None and not _is_state(value):
            value = np.array(_to_host(value))  # a copy the module owns
        self.__dict__.setdefault("_buffers", {})[name] = value
        keep = self.__dict__.setdefault("_persistent", set())
        if persistent:
            keep.add(name)
        else:
            keep.discard(name)

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """(dotted name, host array) of every buffer of this module and its children."""
        for path, m in self.named_modules():
            for name, b in m.__dict__.get("_buffers", {}).items():
                if b is not None:
                    yield (f"{prefix}{path}.{name}" if path else f"{prefix}{name}",
                           m._buffer_host(name, b))

    def named_states(self, prefix: str = "") -> Iterator[tuple[str, Var]]:
        """(dotted name, state Var) of every buffer that is a tape state (``tp.state``), in
        ``named_buffers`` order: what the training step updates."""
        for path, m in self.named_modules():
            for name, b in m.__dict__.get("_buffers", {}).items():
                if _is_state(b):
                    yield f"{prefix}{path}.{name}" if path else f"{prefix}{name}", b

    def _buffer_host(self, name: str, b: Any) -> np.ndarray:
        """Buffer ``name`` as a host array: a state's current value (int64 for the module's
        integer counters, ``_int_states``), a host buffer itself."""
        if not _is_state(b):
            return b
        host = np.array(b.tape.backend.to_numpy(b.tape.state_value(b)))
        return host.astype(np.int64) if name in getattr(self, "_int_states", ()) else host

    def _state_items(self, prefix: str = "") -> Iterator[tuple[str, Any, bool]]:
        """(name, param Var or buffer array, is_param) in torch's state_dict order: each
        module's own params, then its persistent buffers, then its children's; tied params
        under every name."""
        for name, p in self._own_parameters():
            yield prefix + name, p, True
        bufs, keep = self.__dict__.get("_buffers", {}), self.__dict__.get("_persistent", set())
        for name, b in bufs.items():
            if b is not None and name in keep:
                yield prefix + name, b, False
        for name, child in self.named_children():
            yield from child._state_items(f"{prefix}{name}.")

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
        """{name: a host numpy copy} of every param (tied ones under each of their names) and
        persistent buffer, in torch's order."""
        out, mods = {}, self._paths()
        for name, v, is_param in self._state_items():
            if is_param:
                out[name] = v.numpy()
            else:
                owner, _, short = name.rpartition(".")
                out[name] = np.array(mods[owner]._buffer_host(short, v))
        return out

    def _paths(self) -> dict[str, Module]:
        """{dotted path: module} of this module ("") and every descendant under every path
        (a module shared by two parents under both, unlike ``named_modules``)."""
        out: dict[str, Module] = {}

        def walk(m: Module, path: str) -> None:
            out[path] = m
            for name, child in m.named_children():
                walk(child, f"{path}.{name}" if path else name)

        walk(self, "")
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True
                        ) -> IncompatibleKeys:
        """Overwrite the params (and buffers) from ``state_dict`` ({name: array}, e.g. a torch
        state dict as numpy): all or nothing -- every key, shape and dtype is checked before
        any write.

        ``strict`` (default) refuses missing and unexpected keys; ``strict=False`` loads the
        keys both sides have and returns the ones it skipped. Values must be floating point
        arrays of the param's shape that convert to the tape's dtype exactly (float16/32 into
        a float64 tape; float64 into a float32 tape would round and is refused). A tied param
        named twice must get the same values under both names.
        """
        from .state import check_state
        items = list(self._state_items())
        params = {n: v for n, v, is_param in items if is_param}
        buffers, mods = {}, self._paths()
        for n, v, is_param in items:
            if not is_param:
                owner, _, short = n.rpartition(".")
                buffers[n] = mods[owner]._buffer_host(short, v)
        loads, bufs, keys = check_state("load_state_dict", params, state_dict, strict, buffers)
        for p, arr in loads:
            p.tape.set_value(p, arr)
        for name, arr in bufs:
            self._set_buffer(name, arr)
        return keys

    def _set_buffer(self, dotted: str, value: np.ndarray) -> None:
        """Overwrite the buffer at dotted path ``dotted`` (checked by ``check_state``)."""
        path, _, name = dotted.rpartition(".")
        owner = self._paths()[path]
        have = owner.__dict__["_buffers"][name]
        if _is_state(have):
            have.tape.set_state(have, value)
        else:
            owner.__dict__["_buffers"][name] = np.array(value)

    # ---------------------------------------------------------------- copies
    def to(self, target: Any) -> Module:
        """A copy of this module tree on another tape (torch's ``to``, but a copy: the module
        itself is unchanged): ``target`` a dtype ("float32", "float64"), a backend name
        ("numpy", "sim", "cpu", "cuda") or a ``gtape.Tape``. A dtype or backend gives a new
        tape like this one's (backend, dtype, inner, seed) with that one thing changed; the
        copy's ``tape`` is it. Params are copied (rounded to nearest-even into float32), tied
        params stay tied, buffers and dropout keys are kept."""
        from .module_copy import copy_to
        return copy_to(self, target)

    def __repr__(self) -> str:
        children = list(self.named_children())
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"  ({name}): {child!r}".replace("\n", "\n  ") for name, child in children]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        """The arguments shown in ``repr`` (none by default)."""
        return ""


def _is_state(value: Any) -> bool:
    """Whether ``value`` is a tape state Var (``tp.state``)."""
    return isinstance(value, Var) and value.op == "state"


def _to_host(value: Any) -> Any:
    """A torch tensor as a numpy array; anything else unchanged."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return value


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
