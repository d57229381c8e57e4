"""Canonical bytes of arrays: what every digest hashes, the same on every backend and machine.

An array's canonical form is its dtype as a little-endian descriptor ("<f8", "<i8", "<U5"...),
its shape, and its data in C order, little-endian, with every NaN written as one quiet NaN
(NaNs compare by class, not payload). A sequence of named arrays is each name (UTF-8, length
prefixed) followed by its array's canonical form, after a version tag. Nothing depends on the
backend's array type, its memory layout or the machine's byte order.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

TAG = b"gverify-canonical-v1\0"
_QNAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}  # one quiet NaN per float width


def host(a: Any) -> np.ndarray:
    """``a`` as a host numpy array (backend arrays through their ``to_numpy``-like view)."""
    if isinstance(a, np.ndarray):
        return a.view(np.ndarray)
    get = getattr(a, "get", None)  # a cupy array
    if callable(get) and type(a).__module__.split(".")[0] == "cupy":
        return np.asarray(get())
    return np.asarray(a)


def array_bytes(a: Any) -> bytes:
    """The canonical bytes of one array (dtype descriptor, shape, little-endian C-order data)."""
    arr = host(a)
    dt = arr.dtype
    if dt.kind not in "biufU":
        raise TypeError(f"array_bytes: dtype {dt} has no canonical form; expected bool, int, "
                        "float or str data")
    native = dt.newbyteorder("=")
    data = np.ascontiguousarray(arr, dtype=native)
    if dt.kind == "f":
        nan = np.isnan(data)
        if nan.any():
            data = data.copy()
            data.view(f"u{dt.itemsize}")[nan] = _QNAN[dt.itemsize]
    le = native.newbyteorder("<")
    data = data.astype(le, copy=False)
    head = le.str.encode() + struct.pack(f"<I{data.ndim}Q", data.ndim, *data.shape)
    return struct.pack("<I", len(head)) + head + data.tobytes()


def entries_bytes(entries: Iterable[tuple[str, Any]]) -> bytes:
    """The canonical bytes of named arrays, in the order given."""
    parts = [TAG]
    for name, a in entries:
        raw = name.encode()
        parts += [struct.pack("<I", len(raw)), raw, array_bytes(a)]
    return b"".join(parts)


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def array_digest(a: Any) -> str:
    """The SHA-256 of one array's canonical bytes."""
    return sha256(TAG + array_bytes(a))


def entries_digest(entries: Iterable[tuple[str, Any]]) -> str:
    """The SHA-256 of named arrays' canonical bytes."""
    return sha256(entries_bytes(entries))


def json_bytes(obj: Any) -> bytes:
    """The canonical JSON of ``obj``: sorted keys, no spaces, ASCII, no NaN or infinity (what
    a record's or a trace leaf's hash covers)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()
