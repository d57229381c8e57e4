"""The node table: one entry per node in parallel lists (append, truncate, field access)."""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

from gtensor import Op

from .leaves import Leaf
from .var import Var


class Node(NamedTuple):
    """A read-only description of one node (for replay / emission packages and debugging)."""

    index: int
    op: Op | Leaf  # a gtensor Op, or gtape.PARAM / gtape.CONST for leaves
    inputs: tuple[int, ...]
    attrs: dict
    shape: tuple[int, ...]
    requires_grad: bool

    @property
    def name(self) -> str:
        """The op's name, or "param" / "const"."""
        return self.op.name

    @property
    def is_leaf(self) -> bool:
        """True for params and consts."""
        return isinstance(self.op, Leaf)


class NodeTable:
    """Flat node storage, mixed into ``Tape``: the lists are the tape's own attributes, so the
    recording hot path reads and appends them with no call in between.

    Needs ``self._clock`` (the staleness clock each node is stamped with, ``Freshness``).
    """

    def _init_table(self) -> None:
        """Empty node lists and the buffers kept across ``reset_to`` (by node index)."""
        self._serials = itertools.count()
        # flat storage: one entry per node in each list (parallel arrays)
        self._op: list[Op | Leaf] = []  # an Op, or PARAM / CONST for leaves
        self._inputs: list[tuple[int, ...]] = []
        self._attrs: list[dict] = []
        self._shape: list[tuple[int, ...]] = []
        self._req: list[bool] = []
        self._serial: list[int] = []
        self._node_clock: list[int] = []  # the staleness clock each node was recorded at
        self._values: list[Any] = []
        self._grads: list[Any] = []  # None where no gradient is stored
        # buffers kept across reset_to, by node index, reused through ``out=``
        self._vcache: list[Any] = []

    def __len__(self) -> int:
        return len(self._op)

    def _append(self, op: Op | Leaf, inputs: tuple, attrs: dict, value: Any, req: bool,
                grad: Any = None) -> Var:
        i = len(self._op)
        serial = next(self._serials)
        self._op.append(op)
        self._inputs.append(inputs)
        self._attrs.append(attrs)
        self._shape.append(tuple(value.shape))
        self._req.append(req)
        self._serial.append(serial)
        self._node_clock.append(self._clock)
        self._values.append(value)
        self._grads.append(grad)
        if i < len(self._vcache):
            self._vcache[i] = value
        else:
            self._vcache.append(value)
        return Var(self, i, serial)

    def _truncate(self, n: int) -> None:
        """Drop every node from index ``n`` on (the value buffers stay in ``_vcache``)."""
        for lst in (self._op, self._inputs, self._attrs, self._shape, self._req, self._serial,
                    self._node_clock, self._values, self._grads):
            del lst[n:]

    def _clear_table(self) -> None:
        """Drop every node and every kept buffer."""
        for lst in (self._op, self._inputs, self._attrs, self._shape, self._req, self._serial,
                    self._node_clock, self._values, self._grads, self._vcache):
            lst.clear()

    def _var(self, i: int) -> Var:
        return Var(self, i, self._serial[i])

    def _node_at(self, i: int) -> Node:
        """The ``Node`` description of index ``i`` (unchecked)."""
        return Node(i, self._op[i], self._inputs[i], dict(self._attrs[i]), self._shape[i],
                    self._req[i])

    def _field_at(self, i: int, field: str) -> Any:
        """Node ``i``'s shape, requires_grad, or op name (unchecked)."""
        if field == "shape":
            return self._shape[i]
        if field == "requires_grad":
            return self._req[i]
        return self._op[i].name
