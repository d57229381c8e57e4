"""The fixed pairwise summation tree over microbatch index (never over workers).

Definition: level 0 is the k leaves in microbatch order. Each next level pairs neighbours in
order -- (0, 1), (2, 3), ... -- and adds each pair as ``left + right`` (the lower index on the
left); an odd last item is carried up unchanged. The level with one item is the root. So for
k = 5: ``((g0 + g1) + (g2 + g3)) + g4``. The shape depends on k alone; which worker computes a
leaf or a node, and when, cannot change a bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def plan(k: int) -> list[tuple[int, int, int]]:
    """The tree's inner nodes for ``k`` leaves: ``(node, left, right)`` in a valid order.

    Leaves are ids ``0 .. k-1``; inner nodes get ids ``k, k+1, ...`` in creation order (level
    by level, left to right); the last node created is the root (for k == 1 there is none:
    the root is leaf 0).

    >>> plan(5)
    [(5, 0, 1), (6, 2, 3), (7, 5, 6), (8, 7, 4)]
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"gdist.tree.plan: k is {k!r}; expected an int >= 1 (leaves)")
    level, nodes, nxt = list(range(k)), [], k
    while len(level) > 1:
        up = []
        for j in range(0, len(level) - 1, 2):
            nodes.append((nxt, level[j], level[j + 1]))
            up.append(nxt)
            nxt += 1
        if len(level) % 2:
            up.append(level[-1])
        level = up
    return nodes


def root(k: int) -> int:
    """The id of the root for ``k`` leaves (see ``plan``)."""
    nodes = plan(k)
    return nodes[-1][0] if nodes else 0


def reduce(leaves: Sequence[T], add: Callable[[T, T], T]) -> T:
    """The leaves summed along ``plan(len(leaves))`` with ``add(left, right)``."""
    vals: dict[int, T] = dict(enumerate(leaves))
    for node, left, right in plan(len(leaves)):
        vals[node] = add(vals.pop(left), vals.pop(right))
    return vals[root(len(leaves))]


def depth(k: int) -> int:
    """Levels of additions on the longest path (ceil(log2 k)); 0 for k == 1."""
    d, n = 0, k
    while n > 1:
        n, d = (n + 1) // 2, d + 1
    return d
