"""The kinds of leaf node: parameters, constants and states (objects, not strings)."""

from __future__ import annotations


class Leaf:
    """The kind of a leaf node; ``name`` is what ``Node.name`` and ``Var.op`` report."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"gtape.{self.name.upper()}"


PARAM = Leaf("param")  # a trained value: gets a persistent gradient buffer
CONST = Leaf("const")  # data: no gradient flows into it
STATE = Leaf("state")  # not trained, updated by the step (running statistics): gtape.states
