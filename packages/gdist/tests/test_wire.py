"""gdist.wire and gdist.links: a step's messages on direct sockets come back with the same
bits, types and structure; closed connections, refused values and failed links are clear."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
from gdist import links, wire


def _through(obj):
    a, b = socket.socketpair()
    try:
        got: list = []
        t = threading.Thread(target=lambda: got.append(wire.recv(b)))
        t.start()
        wire.send(a, obj)
        t.join(30)
        return got[0]
    finally:
        a.close()
        b.close()


def _same_bits(x, y) -> bool:
    return (type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape
            and np.asarray(x).tobytes() == np.asarray(y).tobytes())


def test_arrays_and_scalars_keep_their_bits_types_and_shapes():
    rng = np.random.default_rng(5)
    nan_payload = np.array([0x7FF8000000000001, 0x8000000000000000, 1], np.uint64)
    values = {
        "f64": rng.standard_normal((3, 4)),
        "nan_payloads": nan_payload.view(np.float64),  # a NaN's payload, -0.0, a subnormal
        "f32": np.array([np.nan, -0.0, np.inf, 1e-45], np.float32),
        "i64": np.array([-(2 ** 63), 2 ** 63 - 1], np.int64),
        "bool": np.array([[True, False]]),
        "zero_d": np.array(2.5),
        "empty": np.zeros((0, 7), np.float32),
        "strided": rng.standard_normal((6, 5))[::2, 1::2],
        "fortran": np.asfortranarray(rng.standard_normal((3, 2))),
        "big": rng.standard_normal(200_000),  # more than one socket buffer
        "big_endian": np.arange(4, dtype=">f8"),
    }
    got = _through(values)
    for k, v in values.items():
        expect = np.ascontiguousarray(v) if v.ndim else v
        assert _same_bits(got[k], expect), k
        assert got[k].flags.writeable, k
    loss = np.float64(-0.0)
    back = _through({"loss": loss, "f32": np.float32(3.25), "i": np.int64(7)})
    assert type(back["loss"]) is np.float64 and np.signbit(back["loss"])
    assert type(back["f32"]) is np.float32 and back["f32"] == np.float32(3.25)
    assert type(back["i"]) is np.int64


def test_small_arrays_ride_in_the_header_and_large_ones_as_buffers_with_the_same_bits():
    at = wire.INLINE // 8  # float64 elements that fill the inline limit exactly
    rng = np.random.default_rng(3)
    values = {"inline": rng.standard_normal(at), "buffer": rng.standard_normal(at + 1),
              "inline_f32": np.array([-0.0, np.nan], "<f4"), "inline_be": np.arange(3, dtype=">i8"),
              "inline_empty": np.zeros((0, 3)), "inline_0d": np.array(-0.0),
              "scalar": np.float32(-0.0)}
    pieces = wire.encode(values)
    assert len(pieces) == 2 + 2  # prefix, header, then one buffer: the large array's
    got = _through(values)
    for k, v in values.items():
        if isinstance(v, np.generic):
            assert type(got[k]) is type(v) and np.signbit(got[k]), k
            continue
        assert _same_bits(got[k], v), k
        assert got[k].flags.writeable, k
    got["inline"][0] = 1.0  # the receiver's own copy


def test_structure_comes_back_as_it_left():
    result = (np.float64(1.5), {"W": np.ones((2, 2)), "b": np.zeros(2)})
    msg = {"op": "deliver", "run": "abc", "step": 3, "node": "root", "value": result,
           "parts": {0: np.arange(3, dtype=np.int64), 5: {"x": np.ones(1)}},
           "plain": [None, True, 2 ** 62, -1.0e300, "s", b"\x00\xff", (1, (2, [3]))]}
    got = _through(msg)
    assert set(got) == set(msg)
    assert isinstance(got["value"], tuple) and type(got["value"][0]) is np.float64
    assert set(got["value"][1]) == {"W", "b"}
    assert set(got["parts"]) == {0, 5} and got["parts"][0].dtype == np.int64
    assert got["plain"] == [None, True, 2 ** 62, -1.0e300, "s", b"\x00\xff", (1, (2, [3]))]
    assert isinstance(got["plain"][6], tuple) and isinstance(got["plain"][6][1][1], list)


def test_values_that_cannot_travel_are_refused_naming_them():
    with pytest.raises(TypeError, match="object array"):
        wire.encode({"x": np.array([object()])})
    with pytest.raises(TypeError, match="cannot send set"):
        wire.encode({"x": {1, 2}})


def test_a_closed_connection_is_a_wire_error():
    a, b = socket.socketpair()
    a.sendall(wire.encode({"x": 1})[0])  # a message cut after its prefix
    a.close()
    with pytest.raises(wire.WireError, match="closed"):
        wire.recv(b)
    b.close()
    assert issubclass(wire.WireError, ConnectionError)  # the driver counts it as a lost worker


def test_a_server_answers_on_each_connection_and_a_bad_request_ends_only_its_own():
    def handle(msg, reply):
        if isinstance(msg, str) and msg == "bad":
            raise ValueError("not a request")
        reply({"echo": msg})

    server = links.Server("127.0.0.1", handle)
    pool = links.Links(timeout=5.0)
    try:
        one, two = links.Link(server.address, 5.0), pool.get(server.address)
        one.send(np.arange(3.0))
        assert np.array_equal(one.recv()["echo"], np.arange(3.0))
        two.send("bad")
        with pytest.raises(wire.WireError):
            two.recv()  # that connection was closed ...
        one.send("still")
        assert one.recv() == {"echo": "still"}  # ... the other one serves on
        pool.drop(server.address)
        pool.send(server.address, "again")  # a new link made on demand
        assert pool.get(server.address).recv() == {"echo": "again"}
        one.close()
    finally:
        pool.close()
        server.close()


def test_a_link_to_nothing_fails_and_a_stale_one_is_made_again():
    server = links.Server("127.0.0.1", lambda msg, reply: reply(msg))
    address = server.address
    pool = links.Links(timeout=5.0)
    try:
        pool.send(address, 1)
        assert pool.get(address).recv() == 1
        stale = pool.get(address)
        stale.sock.shutdown(socket.SHUT_RDWR)  # the cached connection is dead
        pool.send(address, 2)  # resent once on a new link
        assert pool.get(address) is not stale and pool.get(address).recv() == 2
    finally:
        pool.close()
        server.close()
    with pytest.raises(OSError):
        links.Links(timeout=5.0).send(address, 3)  # nothing listens there now
    assert links.tcp_host("tcp://127.0.0.1:8786") == "127.0.0.1"
    assert links.tcp_host("tls://127.0.0.1:8786") is None
    assert links.tcp_host("inproc://10.0.0.1/5/1") is None
