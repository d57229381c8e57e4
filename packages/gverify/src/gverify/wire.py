"""The array messages of the dispute protocol: JSON for the metadata, raw bytes for the data.

A message is ``b"GVW1"``, a little-endian uint32 header length, the header (UTF-8 JSON:
``{"arrays": [{"name": ..., "dtype": "<f8", "shape": [...]}, ...]}``) and then each array's
data, little-endian, C order, back to back -- nothing else (no pickle, no compression). The
receiver checks the header's dtypes (bool, int, uint, float, str), shapes and sizes against
the bytes that came before it builds an array, then the digest the commitment names
(``canonical.entries_digest`` / ``array_digest`` of what it read).

>>> import numpy as np
>>> body = pack([("w", np.arange(3.0))])
>>> unpack(body)[0][0], unpack(body)[0][1].tolist()
('w', [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import canonical

MAGIC = b"GVW1"
MAX_HEADER = 4 << 20  # bytes of JSON header
MAX_ARRAYS = 100_000
MAX_NDIM = 32
_DTYPE = re.compile(r"[<|][biuf][1248]|<U[0-9]{1,4}")


class WireError(ValueError):
    """A message that is not a well-formed array message (truncated, oversized, malformed
    header, unknown dtype, sizes that do not add up)."""


def pack(entries: Iterable[tuple[str, Any]]) -> bytes:
    """The message holding named arrays (host or backend arrays; canonical little-endian)."""
    heads, parts = [], []
    for name, a in entries:
        arr = canonical.host(a)
        le = arr.dtype.newbyteorder("<") if arr.dtype.kind != "b" else np.dtype("|b1")
        data = np.ascontiguousarray(arr).astype(le, copy=False)
        heads.append({"name": str(name), "dtype": le.str, "shape": list(arr.shape)})
        parts.append(data.tobytes())
    head = json.dumps({"arrays": heads}, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + b"".join(parts)


def pack_array(a: Any) -> bytes:
    """The message holding one array (named "")."""
    return pack([("", a)])


def _spec(where: str, k: int, h: Any) -> tuple[str, np.dtype, tuple[int, ...]]:
    if not isinstance(h, dict) or set(h) != {"name", "dtype", "shape"}:
        raise WireError(f"{where}: array {k} of the header is {h!r}; expected "
                        "{name, dtype, shape}")
    name, dt, shape = h["name"], h["dtype"], h["shape"]
    if not isinstance(name, str) or len(name) > 1024:
        raise WireError(f"{where}: array {k}'s name is {name!r}; expected a str")
    if not isinstance(dt, str) or not _DTYPE.fullmatch(dt):
        raise WireError(f"{where}: array {k} ({name!r}) has dtype {dt!r}; expected a "
                        "little-endian bool, int, uint, float or str dtype (e.g. '<f8')")
    if (not isinstance(shape, list) or len(shape) > MAX_NDIM
            or any(type(s) is not int or s < 0 for s in shape)):
        raise WireError(f"{where}: array {k} ({name!r}) has shape {shape!r}; expected a list "
                        f"of at most {MAX_NDIM} ints >= 0")
    return name, np.dtype(dt), tuple(shape)


def unpack(data: bytes, where: str = "unpack") -> list[tuple[str, np.ndarray]]:
    """The named arrays of message ``data`` (WireError when it is not well formed)."""
    if not isinstance(data, (bytes, bytearray)) or not data.startswith(MAGIC):
        raise WireError(f"{where}: the message does not start with {MAGIC!r}")
    if len(data) < 8:
        raise WireError(f"{where}: the message is truncated ({len(data)} bytes)")
    (hlen,) = struct.unpack_from("<I", data, 4)
    if hlen > MAX_HEADER or 8 + hlen > len(data):
        raise WireError(f"{where}: a header of {hlen} bytes does not fit the {len(data)}-byte "
                        f"message (at most {MAX_HEADER})")
    try:
        head = json.loads(data[8:8 + hlen].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise WireError(f"{where}: the header is not JSON ({e})") from None
    arrays = head.get("arrays") if isinstance(head, dict) else None
    if not isinstance(arrays, list) or len(arrays) > MAX_ARRAYS:
        raise WireError(f"{where}: the header has no list 'arrays' of at most {MAX_ARRAYS}")
    at, out = 8 + hlen, []
    for k, h in enumerate(arrays):
        name, dt, shape = _spec(where, k, h)
        count = 1
        for s in shape:
            count *= s
            if count * dt.itemsize > len(data) - at:
                raise WireError(f"{where}: array {name!r} ({dt.str} {shape}) needs more than "
                                f"the {len(data) - at} bytes left: the message is truncated")
        arr = np.frombuffer(data, dtype=dt, count=count, offset=at).reshape(shape)
        out.append((name, arr.astype(dt.newbyteorder("="), copy=True)))
        at += count * dt.itemsize
    if at != len(data):
        raise WireError(f"{where}: {len(data) - at} bytes after the last array")
    return out


def unpack_array(data: bytes, where: str = "unpack_array") -> np.ndarray:
    """The one array of message ``data``."""
    got = unpack(data, where)
    if len(got) != 1:
        raise WireError(f"{where}: the message holds {len(got)} arrays; expected one")
    return got[0][1]
