"""Merkle trees over byte strings, as RFC 6962 (Certificate Transparency) defines them.

A leaf hashes as ``SHA-256(0x00 || leaf)``, an inner node as ``SHA-256(0x01 || left || right)``
(the prefixes keep a leaf from passing for a node). The tree over ``n`` leaves splits at the
largest power of two below ``n``: a node is a half-open leaf range ``[lo, hi)`` and its
children are ``[lo, lo + k)`` and ``[lo + k, hi)``. A membership proof of leaf ``m`` is the
list of sibling hashes from the leaf up (RFC 6962's audit path); ``verify_path`` recomputes the
root from it. Depth: ``ceil(log2 n)``.

>>> t = Tree([b"a", b"b", b"c"])
>>> verify_path(2, 3, leaf_hash(b"c"), t.path(2), t.root)
True
>>> t.children(0, 3)[0][:2], t.children(0, 3)[1][:2]
((0, 2), (2, 3))
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_BYTES = 32


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data): the hash of one leaf."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an inner node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n >= 2): the size of the left child."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def is_node(lo: int, hi: int, n: int) -> bool:
    """Whether ``[lo, hi)`` is a node of the tree over ``n`` leaves."""
    if not (0 <= lo < hi <= n):
        return False
    a, b = 0, n
    while (a, b) != (lo, hi):
        if b - a == 1:
            return False
        mid = a + split(b - a)
        if hi <= mid:
            b = mid
        elif lo >= mid:
            a = mid
        else:
            return False
    return True


class Tree:
    """Every node hash of the tree over ``leaves`` (raw leaf bytes or, with ``hashed=True``,
    leaf hashes), kept by range."""

    def __init__(self, leaves: Sequence[bytes], hashed: bool = False) -> None:
        if not leaves:
            raise ValueError("Tree: no leaves; expected at least one")
        self.n = len(leaves)
        self.leaf_hashes = [bytes(x) if hashed else leaf_hash(x) for x in leaves]
        self._nodes: dict[tuple[int, int], bytes] = {}
        self.root = self._build(0, self.n)

    def _build(self, lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            h = self.leaf_hashes[lo]
        else:
            mid = lo + split(hi - lo)
            h = node_hash(self._build(lo, mid), self._build(mid, hi))
        self._nodes[(lo, hi)] = h
        return h

    def hash(self, lo: int, hi: int) -> bytes:
        """The hash of node ``[lo, hi)`` (KeyError when it is not a node)."""
        return self._nodes[(lo, hi)]

    def children(self, lo: int, hi: int) -> tuple[tuple[int, int, bytes], tuple[int, int, bytes]]:
        """The two children of inner node ``[lo, hi)`` as (lo, hi, hash) each."""
        if hi - lo < 2 or (lo, hi) not in self._nodes:
            raise KeyError(f"[{lo}, {hi}) is not an inner node of a tree of {self.n} leaves")
        mid = lo + split(hi - lo)
        return (lo, mid, self._nodes[(lo, mid)]), (mid, hi, self._nodes[(mid, hi)])

    def path(self, m: int) -> list[bytes]:
        """The membership proof of leaf ``m``: sibling hashes, from the leaf up."""
        if not 0 <= m < self.n:
            raise IndexError(f"Tree.path: leaf {m} does not exist; the tree has {self.n}")
        out: list[bytes] = []
        lo, hi = 0, self.n
        while hi - lo > 1:
            mid = lo + split(hi - lo)
            if m < mid:
                out.append(self._nodes[(mid, hi)])
                hi = mid
            else:
                out.append(self._nodes[(lo, mid)])
                lo = mid
        return out[::-1]


def root_from_path(m: int, n: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root that leaf hash ``leaf`` at index ``m`` of ``n`` and ``path`` imply; None when
    the path has the wrong length for ``(m, n)`` or a hash of the wrong size."""
    if not (0 <= m < n) or any(len(p) != HASH_BYTES for p in path) or len(leaf) != HASH_BYTES:
        return None
    steps = []  # (sibling on the left?) from the top down
    lo, hi = 0, n
    while hi - lo > 1:
        mid = lo + split(hi - lo)
        if m < mid:
            steps.append(False)
            hi = mid
        else:
            steps.append(True)
            lo = mid
    if len(steps) != len(path):
        return None
    h = leaf
    for left, sib in zip(reversed(steps), path):
        h = node_hash(sib, h) if left else node_hash(h, sib)
    return h


def verify_path(m: int, n: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> bool:
    """Whether ``path`` proves that leaf hash ``leaf`` is leaf ``m`` of the ``n``-leaf tree
    with root ``root``."""
    got = root_from_path(m, n, leaf, path)
    return got is not None and got == root


def subtree_hash(leaf_hashes: dict[int, bytes], lo: int, hi: int) -> bytes | None:
    """The hash of node ``[lo, hi)`` from known leaf hashes (None when one is missing)."""
    if hi - lo == 1:
        return leaf_hashes.get(lo)
    mid = lo + split(hi - lo)
    left = subtree_hash(leaf_hashes, lo, mid)
    right = subtree_hash(leaf_hashes, mid, hi) if left is not None else None
    return None if right is None else node_hash(left, right)
