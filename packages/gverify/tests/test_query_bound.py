"""Phase 1 costs O(log T) queries: for a disagreement at any step k of a T-step run (k = 0,
the initial state, included), the commitment, the walk down the trainer's record tree over
HTTP and the proof of the record take at most ceil(log2 T) + 3 queries -- every k, several
small T (synthetic records: no training)."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from gverify import canonical, commit, merkle, server
from gverify.example_task import ExampleTask
from gverify.locate import RemoteTree, first_difference
from gverify.remote import Remote


def _records(T: int, cid: str, salt: bytes = b"") -> list[dict]:
    def h(*parts: object) -> str:
        return hashlib.sha256(repr(parts).encode() + salt).hexdigest()

    return [commit.record(0, cid, h(0), None, None)] + [
        commit.record(k, cid, h(k), h("b", k), f"0x{k:016x}") for k in range(1, T + 1)]


def synthetic_run(path, T: int) -> list[dict]:
    """A run directory with T synthetic records (the server needs no training for phase 1)."""
    task = ExampleTask({"steps": T})
    identity = {"synthetic": True}
    cid = commit.config_id(task.spec(), identity)
    recs = _records(T, cid)
    tree = merkle.Tree([commit.leaf_bytes(r) for r in recs])
    path.mkdir()
    (path / commit.RECORDS).write_bytes(b"".join(commit.leaf_bytes(r) + b"\n" for r in recs))
    (path / commit.TRAINER).write_text(json.dumps({"backend": "numpy", "checkpoint_every": 4,
                                                   "drill": None}))
    (path / commit.COMMITMENT).write_text(json.dumps(commit.commitment(task, identity,
                                                                       tree.root.hex())))
    return recs


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33])
def test_the_first_differing_step_costs_log_queries(tmp_path, T):
    committed = synthetic_run(tmp_path / "run", T)
    bound = math.ceil(math.log2(T)) + 3
    worst = 0
    with server.Server(tmp_path / "run") as srv:
        for k in range(T + 1):
            with Remote(srv.url, timeout=60.0) as remote:
                com = remote.json("/v1/commitment")
                tree = RemoteTree(remote, "/v1/steps", bytes.fromhex(com["root"]), T + 1, "steps")
                mine = committed[:k] + _records(T, com["config_id"], b"other")[k:]
                hashes = {i: merkle.leaf_hash(canonical.json_bytes(r)) for i, r in
                          enumerate(mine)}
                found = first_difference(tree, hashes, 0, T)
                got = tree.leaves([found])[found]["leaf"]
                assert found == k and got == committed[k]
                worst = max(worst, remote.queries)
                assert remote.queries <= bound, (T, k, remote.queries)
    assert worst == math.ceil(math.log2(T + 1)) + 2  # commitment + one per level + the record


def test_a_spot_check_adds_the_queries_along_its_edges(tmp_path):
    T = 33
    committed = synthetic_run(tmp_path / "run", T)
    with server.Server(tmp_path / "run") as srv, Remote(srv.url, timeout=60.0) as remote:
        com = remote.json("/v1/commitment")
        for a, b, k in ((5, 20, 12), (9, 33, 33), (1, 1, 1)):
            tree = RemoteTree(remote, "/v1/steps", bytes.fromhex(com["root"]), T + 1, "steps")
            before = remote.queries
            other = _records(T, com["config_id"], b"other")
            mine = {i: merkle.leaf_hash(canonical.json_bytes(other[i] if i >= k else
                                                             committed[i]))
                    for i in range(a, b + 1)}
            assert first_difference(tree, mine, a, b) == k
            assert remote.queries - before <= 2 * math.ceil(math.log2(T + 1))
