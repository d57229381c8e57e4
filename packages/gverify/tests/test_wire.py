"""Array messages: exact round trips; every malformed message refused with WireError."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from gverify import canonical, wire


def _msg(head, data=b""):
    h = json.dumps(head).encode()
    return wire.MAGIC + struct.pack("<I", len(h)) + h + data


def test_round_trips_keep_bits_dtypes_shapes_and_digests():
    ents = [("w", np.array([[1.5, -0.0], [np.inf, np.nan]])), ("t", np.array(3, np.int64)),
            ("k", np.array([2**63 - 1, -5], np.int64)), ("m", np.array([True, False])),
            ("s", np.array("float64")), ("f", np.arange(6, dtype=np.float32).reshape(1, 2, 3)),
            ("e", np.zeros((0, 4)))]
    got = wire.unpack(wire.pack(ents))
    assert [n for n, _ in got] == [n for n, _ in ents]
    for (_, a), (_, b) in zip(ents, got):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    assert canonical.entries_digest(got) == canonical.entries_digest(ents)
    one = wire.unpack_array(wire.pack_array(np.float32(2.5)))
    assert one.shape == () and one.dtype == np.float32 and one == 2.5


@pytest.mark.parametrize("bad, match", [
    (b"XXXX" + b"\0" * 8, "does not start with"),
    (wire.MAGIC + b"\1", "truncated"),
    (wire.MAGIC + struct.pack("<I", 1 << 30), "does not fit"),
    (wire.MAGIC + struct.pack("<I", 3) + b"{x}", "not JSON"),
    (_msg([]), "no list 'arrays'"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8"}]}), "expected {name, dtype, shape}"),
    (_msg({"arrays": [{"name": "a", "dtype": "|O", "shape": []}]}), "dtype '|O'"),
    (_msg({"arrays": [{"name": "a", "dtype": ">f8", "shape": [1]}]}), "little-endian"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8", "shape": [-1]}]}), "shape \\[-1\\]"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8", "shape": [True]}]}), "shape \\[True\\]"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8", "shape": [2]}]}, b"\0" * 15), "truncated"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8", "shape": [1 << 40, 1 << 40]}]}),
     "truncated"),
    (_msg({"arrays": [{"name": "a", "dtype": "<f8", "shape": [1]}]}, b"\0" * 9), "1 bytes after"),
])
def test_malformed_messages_are_refused(bad, match):
    with pytest.raises(wire.WireError, match=match):
        wire.unpack(bad)


def test_one_array_expected():
    with pytest.raises(wire.WireError, match="holds 2 arrays; expected one"):
        wire.unpack_array(wire.pack([("a", np.zeros(1)), ("b", np.zeros(1))]))
