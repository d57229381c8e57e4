"""Merkle trees (RFC 6962): membership of every record of a 100-step log, any one-bit change
to a record, a proof or the root refused (property tests), the tree's shape."""

from __future__ import annotations

import hashlib
import json

import pytest
from gverify import canonical, merkle
from gverify.commit import leaf_bytes, record
from hypothesis import given
from hypothesis import strategies as st

T = 100


def _log(T: int) -> list[bytes]:
    cid = "c" * 64
    recs = [record(0, cid, hashlib.sha256(b"s0").hexdigest(), None, None)]
    for k in range(1, T + 1):
        recs.append(record(k, cid, hashlib.sha256(b"s%d" % k).hexdigest(),
                           hashlib.sha256(b"b%d" % k).hexdigest(), f"0x{k:016x}"))
    return [leaf_bytes(r) for r in recs]


LOG = _log(T)
TREE = merkle.Tree(LOG)


def test_every_record_of_a_100_step_log_proves_membership():
    for m, leaf in enumerate(LOG):
        path = TREE.path(m)
        assert len(path) <= 7  # ceil(log2 101)
        assert merkle.verify_path(m, len(LOG), merkle.leaf_hash(leaf), path, TREE.root)
        # at any other index the same proof fails (the leaf count is the commitment's)
        assert not merkle.verify_path((m + 1) % len(LOG), len(LOG), merkle.leaf_hash(leaf),
                                      path, TREE.root)


def _flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


@given(st.integers(0, T), st.data())
def test_a_one_bit_change_to_a_record_fails(m, data):
    leaf = LOG[m]
    bit = data.draw(st.integers(0, 8 * len(leaf) - 1))
    assert not merkle.verify_path(m, len(LOG), merkle.leaf_hash(_flip(leaf, bit)),
                                  TREE.path(m), TREE.root)


@given(st.integers(0, T), st.data())
def test_a_one_bit_change_to_a_proof_fails(m, data):
    path = TREE.path(m)
    at = data.draw(st.integers(0, len(path) - 1))
    bit = data.draw(st.integers(0, 8 * merkle.HASH_BYTES - 1))
    bad = list(path)
    bad[at] = _flip(bad[at], bit)
    assert not merkle.verify_path(m, len(LOG), merkle.leaf_hash(LOG[m]), bad, TREE.root)
    assert not merkle.verify_path(m, len(LOG), merkle.leaf_hash(LOG[m]), path[:-1], TREE.root)
    assert not merkle.verify_path(m, len(LOG), merkle.leaf_hash(LOG[m]), path + path[:1],
                                  TREE.root)


@given(st.integers(0, T), st.integers(0, 8 * merkle.HASH_BYTES - 1))
def test_a_one_bit_change_to_the_root_fails(m, bit):
    assert not merkle.verify_path(m, len(LOG), merkle.leaf_hash(LOG[m]), TREE.path(m),
                                  _flip(TREE.root, bit))


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40))
def test_the_tree_is_rfc6962s(leaves):
    """MTH as RFC 6962 section 2.1 defines it, written out recursively here."""
    def mth(d):
        if len(d) == 1:
            return hashlib.sha256(b"\x00" + d[0]).digest()
        k = 1
        while k * 2 < len(d):
            k *= 2
        return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()

    t = merkle.Tree(leaves)
    assert t.root == mth(leaves)
    n = len(leaves)
    for m in range(n):
        assert merkle.verify_path(m, n, merkle.leaf_hash(leaves[m]), t.path(m), t.root)
    assert merkle.subtree_hash(dict(enumerate(t.leaf_hashes)), 0, n) == t.root


def test_nodes_and_children():
    n = 11
    t = merkle.Tree([bytes([i]) for i in range(n)])
    assert merkle.is_node(0, 11, n) and merkle.is_node(0, 8, n) and merkle.is_node(8, 11, n)
    assert merkle.is_node(10, 11, n) and not merkle.is_node(0, 9, n)
    assert not merkle.is_node(3, 3, n) and not merkle.is_node(-1, 4, n)
    assert not merkle.is_node(0, 12, n)
    (a, b, ha), (c, d, hb) = t.children(0, 11)
    assert (a, b, c, d) == (0, 8, 8, 11) and merkle.node_hash(ha, hb) == t.root
    with pytest.raises(KeyError, match="not an inner node"):
        t.children(3, 4)
    with pytest.raises(IndexError, match="leaf 11 does not exist"):
        t.path(11)
    with pytest.raises(ValueError, match="no leaves"):
        merkle.Tree([])
    # a leaf can never pass for an inner node (the 0x00 / 0x01 prefixes)
    assert merkle.leaf_hash(ha + hb) != merkle.node_hash(ha, hb)
    assert canonical.json_bytes({"b": 1, "a": [1.5]}) == b'{"a":[1.5],"b":1}'


def test_a_run_log_commits_to_its_lines(tmp_path):
    from gverify.commit import runlog_root
    from gverify.example import Config, train

    train(Config(steps=5), log=tmp_path / "a.jsonl")
    root, n = runlog_root(tmp_path / "a.jsonl")
    assert n == 6 and root == runlog_root(tmp_path / "a.jsonl")[0]
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["digest"] = "0" * 64
    lines[3] = json.dumps(row)
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    assert runlog_root(tmp_path / "b.jsonl")[0] != root
