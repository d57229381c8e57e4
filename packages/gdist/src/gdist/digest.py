"""A canonical sha256 of a set of named arrays (the params): equal digests, equal bits."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np


def params_digest(params: Mapping[str, np.ndarray]) -> str:
    """sha256 over the arrays in name order: each name, dtype, shape and little-endian
    C-order bytes (so the digest does not depend on dict order, layout or host byte order).

    >>> params_digest({"w": np.zeros(2)})[:16]
    'd839fc6620865775'
    """
    h = hashlib.sha256(b"gdist-params-v1\0")
    for name in sorted(params):
        a = np.asarray(params[name])
        le = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        h.update(f"{name}\0{le.dtype.str}\0{list(a.shape)}\0".encode())
        h.update(le.tobytes())
    return h.hexdigest()
