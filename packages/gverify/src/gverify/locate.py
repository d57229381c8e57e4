"""Reading a committed Merkle tree through queries, and finding the first leaf that differs
from one's own in O(log n) of them.

``RemoteTree`` checks every answer against what the trainer committed: children must hash to
their parent (the root, or a child an earlier answer proved), a leaf's membership proof must
lead to the root. An answer that fails raises ``ProofError`` (the trainer contradicted its
own commitment: it loses); an answer that is not even well formed raises
``remote.TransportError`` (inconclusive).

``first_difference`` walks down from the root: a node whose hash equals the auditor's own
hash of the same leaves is skipped unasked, so a disagreement costs one query per level
(``ceil(log2 n)``); a range [a, b] of known leaves (an audit from a checkpoint) adds the
queries along its two edges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import canonical, merkle
from .remote import Remote, TransportError

HEX = set("0123456789abcdef")


class ProofError(Exception):
    """A trainer's answer that does not verify against its commitment; ``evidence`` is what a
    referee needs to check that (JSON data)."""

    def __init__(self, message: str, evidence: dict) -> None:
        super().__init__(message)
        self.evidence = evidence


def _hash(what: str, x: Any) -> bytes:
    if not isinstance(x, str) or len(x) != 64 or not set(x) <= HEX:
        raise TransportError(f"{what}: {x!r} is not a SHA-256 in hex")
    return bytes.fromhex(x)


class RemoteTree:
    """The tree of ``n`` leaves with root ``root`` the trainer committed to, under the routes
    ``prefix + "/tree"`` and ``prefix + "/leaves"`` of ``remote``."""

    def __init__(self, remote: Remote, prefix: str, root: bytes, n: int, name: str) -> None:
        self.remote, self.prefix, self.root, self.n, self.name = remote, prefix, root, n, name
        self.known: dict[tuple[int, int], bytes] = {(0, n): root}
        self.transcript: list[dict] = []  # the children answers, in order

    def children(self, lo: int, hi: int) -> tuple[tuple[int, int, bytes], tuple[int, int, bytes]]:
        """The children of node ``[lo, hi)``, checked against its known hash."""
        what = f"{self.name} node [{lo}, {hi})"
        got = self.remote.json(self.prefix + "/tree", {"lo": lo, "hi": hi})
        mid = lo + merkle.split(hi - lo)
        try:
            left, right = got["left"], got["right"]
            ok = (got["lo"], got["hi"], left["lo"], left["hi"], right["lo"], right["hi"]) == (
                lo, hi, lo, mid, mid, hi)
            hl, hr = _hash(what, left["hash"]), _hash(what, right["hash"])
        except (KeyError, TypeError) as e:
            raise TransportError(f"{what}: the answer {str(got)[:200]} is not a children "
                                 f"message ({e})") from None
        if not ok:
            raise TransportError(f"{what}: the answer names other ranges: {str(got)[:200]}")
        step = {"lo": lo, "hi": hi, "left": hl.hex(), "right": hr.hex()}
        self.transcript.append(step)
        if merkle.node_hash(hl, hr) != self.known[(lo, hi)]:
            raise ProofError(f"{what}: the children the trainer sent do not hash to the node's "
                             "committed hash",
                             {"kind": "children", "tree": self.name, "root": self.root.hex(),
                              "leaves": self.n, "transcript": list(self.transcript)})
        self.known[(lo, mid)], self.known[(mid, hi)] = hl, hr
        return (lo, mid, hl), (mid, hi, hr)

    def leaves(self, ids: list[int]) -> dict[int, dict]:
        """Leaves ``ids`` with their proofs, each checked: ``{index: {"leaf", "path"}}``."""
        ids = sorted(set(ids))
        got = self.remote.json(self.prefix + "/leaves", {"ids": ",".join(map(str, ids))})
        what = f"{self.name} leaves {ids}"
        try:
            items = got["items"]
            if got["leaves"] != self.n or [it["index"] for it in items] != ids:
                raise TransportError(f"{what}: the answer names other leaves or another tree "
                                     f"size: {str(got)[:200]}")
            out = {}
            for it in items:
                leaf, path = it["leaf"], [_hash(what, h) for h in it["path"]]
                if not isinstance(leaf, dict):
                    raise TransportError(f"{what}: leaf {it['index']} is not a JSON object")
                out[it["index"]] = {"leaf": leaf, "path": [h.hex() for h in path]}
        except (KeyError, TypeError) as e:
            raise TransportError(f"{what}: the answer is not a leaves message ({e})") from None
        for i, item in out.items():
            h = merkle.leaf_hash(canonical.json_bytes(item["leaf"]))
            path = [bytes.fromhex(x) for x in item["path"]]
            seen = self.known.get((i, i + 1))
            if not merkle.verify_path(i, self.n, h, path, self.root) or (
                    seen is not None and seen != h):
                raise ProofError(f"{self.name} leaf {i}: its membership proof does not lead to "
                                 "the committed root",
                                 {"kind": "leaf", "tree": self.name, "root": self.root.hex(),
                                  "leaves": self.n, "index": i, **item,
                                  "transcript": list(self.transcript)})
        return out


def first_difference(tree: RemoteTree, mine: dict[int, bytes], a: int, b: int,
                     on_query: Callable[[], None] | None = None) -> int | None:
    """The first leaf in ``[a, b]`` (inclusive) whose committed hash differs from ``mine``'s
    (leaf hashes of at least ``[a, b]``); None when they all agree."""
    memo: dict[tuple[int, int], bytes | None] = {}

    def own(lo: int, hi: int) -> bytes | None:
        if (lo, hi) not in memo:
            if hi - lo == 1:
                memo[(lo, hi)] = mine.get(lo)
            else:
                mid = lo + merkle.split(hi - lo)
                left, right = own(lo, mid), own(mid, hi)
                memo[(lo, hi)] = None if left is None or right is None else merkle.node_hash(
                    left, right)
        return memo[(lo, hi)]

    def walk(lo: int, hi: int) -> int | None:
        if hi <= a or lo > b:
            return None
        inside = a <= lo and hi - 1 <= b
        if inside and own(lo, hi) == tree.known[(lo, hi)]:
            return None
        if hi - lo == 1:
            return lo
        (l0, l1, _), (r0, r1, _) = tree.children(lo, hi)
        if on_query is not None:
            on_query()
        found = walk(l0, l1)
        return found if found is not None else walk(r0, r1)

    return walk(0, tree.n)
