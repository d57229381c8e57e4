"""``ModuleList`` and ``ModuleDict`` as torch's: containers whose items are children named by
their position or key (``blocks.0.attn.weight``, ``heads.cls.bias``).

>>> import gtape as g
>>> tp = g.Tape()
>>> blocks = g.nn.ModuleList([g.nn.Linear(tp, 4, 4) for _ in range(2)])
>>> heads = g.nn.ModuleDict({"cls": g.nn.Linear(tp, 4, 3)})
>>> [n for n, _ in blocks.named_parameters()], [n for n, _ in heads.named_parameters()]
(['0.weight', '0.bias', '1.weight', '1.bias'], ['cls.weight', 'cls.bias'])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gtensor import describe

from .modules import Module


def _module(where: str, m: Any) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{where}: {describe(m)} is not a gtape.nn Module")
    return m


class ModuleList(Module):
    """A list of modules, each a child named by its position (torch's ``ModuleList``); it has
    no forward of its own: iterate it."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        self._items: list[Module] = []
        if modules is not None:
            self.extend(modules)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """("0", first), ("1", second), ...: positions, as torch names them."""
        for k, m in enumerate(self._items):
            yield str(k), m

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end; returns the list."""
        self._items.append(_module("ModuleList.append", module))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add each of ``modules`` at the end (all checked first); returns the list."""
        if isinstance(modules, Module) or not isinstance(modules, Iterable):
            raise TypeError(f"ModuleList.extend: modules is {describe(modules)}; expected an "
                            "iterable of modules")
        items = [_module("ModuleList", m) for m in modules]
        self._items.extend(items)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``."""
        self._items.insert(index, _module("ModuleList.insert", module))

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return ModuleList(self._items[k])
        return self._items[k]

    def __setitem__(self, k: int, module: Module) -> None:
        self._items[k] = _module("ModuleList", module)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Not defined (as torch's): iterate the list in your module's forward."""
        raise NotImplementedError("ModuleList has no forward; iterate it: for block in "
                                  "self.blocks: x = block(x)")


class ModuleDict(Module):
    """Modules by name, each a child named by its key (torch's ``ModuleDict``), in insertion
    order; it has no forward of its own."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        self._items: dict[str, Module] = {}
        if modules is not None:
            self.update(modules)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(key, module) in insertion order."""
        yield from self._items.items()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace entries (all checked first)."""
        pairs = list(modules.items() if isinstance(modules, Mapping) else modules)
        for k, m in pairs:
            self._check_key(k)
            _module(f"ModuleDict[{k!r}]", m)
        self._items.update(pairs)

    def __getattr__(self, name: str) -> Any:
        items = self.__dict__.get("_items")
        if items is not None and name in items:  # torch's attribute access: self.blocks.wte
            return items[name]
        return super().__getattr__(name)

    @staticmethod
    def _check_key(k: Any) -> None:
        if not isinstance(k, str) or not k or "." in k:
            raise TypeError(f"ModuleDict: key {k!r} is not a valid name; expected a non-empty "
                            "str without '.'")

    def __getitem__(self, k: str) -> Module:
        return self._items[k]

    def __setitem__(self, k: str, module: Module) -> None:
        self._check_key(k)
        self._items[k] = _module(f"ModuleDict[{k!r}]", module)

    def __delitem__(self, k: str) -> None:
        del self._items[k]

    def __contains__(self, k: object) -> bool:
        return k in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._items.keys()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return self._items.values()

    def items(self) -> Iterable[tuple[str, Module]]:
        """(key, module) pairs, in insertion order."""
        return self._items.items()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Not defined (as torch's): pick a module by key."""
        raise NotImplementedError("ModuleDict has no forward; call one of its modules")
