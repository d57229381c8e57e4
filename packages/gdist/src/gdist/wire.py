"""One message on a stream socket: msgpack for the structure, arrays as raw buffers after it.

A message is plain data (dicts, lists, tuples, str, int, float, bool, None, bytes) with numpy
arrays and numpy scalars anywhere inside. On the wire: a 12-byte prefix (the header's length,
the number of buffers), the header (msgpack; an array is an ext record naming its dtype, its
shape and its buffer's index -- or, up to ``INLINE`` bytes, holding its bytes itself: a step's
row indices and scalars cost no reads of their own; a tuple an ext record of its items), each
buffer's length (8 bytes) and its bytes. Arrays travel as their bytes with their dtype's byte
order: the receiver gets the same bits, writeable arrays of the same dtype and shape, numpy
scalars back as numpy scalars and tuples as tuples. Nothing is unpickled.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

_PREFIX = struct.Struct("<IQ")  # header bytes, buffer count
_LEN = struct.Struct("<Q")
_ARRAY, _SCALAR, _TUPLE, _INLINE_ARRAY, _INLINE_SCALAR = 1, 2, 3, 4, 5
INLINE = 4096  # arrays of at most this many bytes travel inside the header


class WireError(ConnectionError):
    """The peer closed the connection (or sent what is not a message)."""


def _packer(buffers: list[memoryview]) -> msgpack.Packer:
    def default(x: Any) -> msgpack.ExtType:
        if isinstance(x, tuple):
            return msgpack.ExtType(_TUPLE, msgpack.packb(list(x), default=default,
                                                         strict_types=True))
        if isinstance(x, np.ndarray) or isinstance(x, np.generic):
            scalar = isinstance(x, np.generic)
            a = np.asarray(x)
            if not a.flags.c_contiguous:
                a = a.copy(order="C")
            if a.dtype.hasobject:
                raise TypeError(f"gdist.wire: an object array ({a.dtype}) cannot be sent")
            if a.nbytes <= INLINE:
                return msgpack.ExtType(_INLINE_SCALAR if scalar else _INLINE_ARRAY,
                                       msgpack.packb([a.dtype.str, list(a.shape), a.tobytes()]))
            buffers.append(memoryview(a.reshape(-1).view(np.uint8)))
            return msgpack.ExtType(_SCALAR if scalar else _ARRAY, msgpack.packb(
                [a.dtype.str, list(a.shape), len(buffers) - 1]))
        for base in (bool, int, float, str, bytes):  # subclasses as their base value
            if isinstance(x, base):
                return base(x)
        if isinstance(x, Mapping):
            return dict(x)
        if isinstance(x, list):
            return list(x)
        raise TypeError(f"gdist.wire: cannot send {type(x).__name__}; expected plain data "
                        "and numpy arrays")

    return msgpack.Packer(default=default, strict_types=True, use_bin_type=True)


def encode(obj: Any) -> list[bytes | memoryview]:
    """``obj`` as the byte pieces of one message (arrays' buffers not copied)."""
    buffers: list[memoryview] = []
    header = _packer(buffers).pack(obj)
    pieces: list[bytes | memoryview] = [_PREFIX.pack(len(header), len(buffers)), header]
    for b in buffers:
        pieces += [_LEN.pack(b.nbytes), b]
    return pieces


def decode(header: bytes, buffers: list[np.ndarray]) -> Any:
    """The message whose header and buffers these are (``encode``'s inverse)."""

    def ext(code: int, data: bytes) -> Any:
        if code == _TUPLE:
            return tuple(msgpack.unpackb(data, ext_hook=ext, raw=False,
                                         strict_map_key=False))
        if code in (_ARRAY, _SCALAR):
            dtype, shape, i = msgpack.unpackb(data, raw=False)
            a = buffers[i].view(np.dtype(dtype)).reshape(shape)
            return a[()] if code == _SCALAR else a
        if code in (_INLINE_ARRAY, _INLINE_SCALAR):
            dtype, shape, raw = msgpack.unpackb(data, raw=False)
            a = np.frombuffer(bytearray(raw), np.dtype(dtype)).reshape(shape)  # writeable
            return a[()] if code == _INLINE_SCALAR else a
        raise WireError(f"gdist.wire: unknown record type {code}")

    return msgpack.unpackb(header, ext_hook=ext, raw=False, strict_map_key=False)


def send(sock: socket.socket, obj: Any) -> None:
    """Send ``obj`` as one message (blocking until the socket took every byte)."""
    pieces = encode(obj)
    if sum(len(p) for p in pieces) <= 65536:
        sock.sendall(b"".join(pieces))
        return
    for p in pieces:
        sock.sendall(p)


_WAITALL = getattr(socket, "MSG_WAITALL", 0)  # one call (the GIL let go) for a whole buffer


def _exact(sock: socket.socket, n: int) -> np.ndarray:
    out = np.empty(n, np.uint8)  # not bytearray: its zero-fill touches every page first
    view, got = memoryview(out), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got, _WAITALL)
        if k == 0:
            raise WireError("gdist.wire: the connection was closed")
        got += k
    return out


def recv(sock: socket.socket) -> Any:
    """The next message on ``sock`` (WireError when the peer closed the connection)."""
    hlen, nbuf = _PREFIX.unpack(_exact(sock, _PREFIX.size).tobytes())
    header = _exact(sock, hlen).tobytes()
    buffers = [_exact(sock, _LEN.unpack(_exact(sock, _LEN.size).tobytes())[0])
               for _ in range(nbuf)]
    return decode(header, buffers)
