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


def contiguous(k: int, n: int) -> list[int]:
    """Leaf i's holder among ``n`` replicas: contiguous, balanced blocks in leaf order (the
    first ``k % n`` replicas hold one leaf more), so most tree nodes have both children on one
    replica and only the blocks' partial sums travel.

    >>> contiguous(5, 2), contiguous(4, 3), contiguous(2, 3)
    ([0, 0, 0, 1, 1], [0, 0, 1, 2], [0, 1])
    """
    if n < 1:
        raise ValueError(f"gdist.tree.contiguous: n is {n!r}; expected an int >= 1")
    base, extra = divmod(k, n)
    out: list[int] = []
    for r in range(n):
        out += [r] * (base + (r < extra))
    return out


def owners(k: int, leaf_owner: Sequence[int]) -> dict[int, int]:
    """Who adds each node: a leaf's holder, and for an inner node the owner of its left child
    (so a node's left operand never travels: only right children are sent, to the owner of
    their parent). Keys are the node ids of ``plan(k)``."""
    own = {i: int(leaf_owner[i]) for i in range(k)}
    for node, left, _ in plan(k):
        own[node] = own[left]
    return own


def parents(k: int) -> dict[int, int]:
    """Each non-root node's parent id (``plan(k)``'s ids)."""
    return {c: node for node, left, right in plan(k) for c in (left, right)}


def broadcast_children(position: int, n: int) -> list[int]:
    """Positions a holder at ``position`` forwards the root to in a binomial tree over ``n``
    positions rooted at 0: ``position + 2**j`` for every ``2**j > position`` (log2 n rounds).

    >>> [broadcast_children(p, 6) for p in range(6)]
    [[1, 2, 4], [3, 5], [], [], [], []]
    """
    out, step = [], 1
    while step <= position:
        step *= 2
    while position + step < n:
        out.append(position + step)
        step *= 2
    return out
