"""The form a gdist request or reply takes on Dask's comms: plain when it can be.

Dask sends plain data (dicts, lists, str, int, float, bool, None) as msgpack; anything wrapped
in ``to_serialize`` goes through its serializer families (pickle with out-of-band buffers),
which costs ~0.3-0.5 ms a message on the 2-core machine even for a few hundred bytes (measured:
a step request 554 us to dump and load as ``to_serialize``, 20 us as plain data; its reply 288
vs 10 us). A step sends one request and one reply per replica, so the small ones -- the
plan, index microbatches, losses, digests, timings -- go plain; arrays of values (gradients,
states, microbatches of data) keep ``to_serialize`` (their buffers travel without copies).
A Python float travels as an IEEE double: no bit of a loss changes either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from distributed.protocol import to_serialize

_SCALARS = (str, int, float, bool, type(None))


def is_plain(x: Any) -> bool:
    """Whether ``x`` is msgpack's plain data (exact builtin types; dict keys str or int)."""
    t = type(x)
    if t in _SCALARS:
        return True
    if t is list or t is tuple:
        return all(is_plain(v) for v in x)
    if t is dict:
        return all(type(k) in (str, int) and is_plain(v) for k, v in x.items())
    return False


def wrap(x: Any) -> Any:
    """``x`` as a request or reply body: itself when plain, else ``to_serialize(x)``."""
    return x if is_plain(x) else to_serialize(x)


def encode_parts(parts: dict[int, Any]) -> Any:
    """A replica's microbatches of a step: ``[[leaf, [row, ...]], ...]`` when every one is a
    1-d int64 array of row indices (resident data), else the dict itself."""
    if all(isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1
           for p in parts.values()):
        return [[int(i), p.tolist()] for i, p in parts.items()]
    return parts


def decode_parts(parts: Any) -> dict[int, Any]:
    """What ``encode_parts`` made, back as ``{leaf: microbatch}`` (Dask's msgpack reads
    lists back as tuples)."""
    if isinstance(parts, (list, tuple)):
        return {int(i): np.asarray(rows, dtype=np.int64) for i, rows in parts}
    return parts
