"""Philox4x64-10 in numpy: the definition of every random bit (numpy.random.Philox's stream).

A key is two uint64 words ``(k0, k1)``; a counter is four uint64 words ``(c0, c1, c2, c3)``
(c0 least significant of the 256-bit counter). ``block(key, ctr)`` is the Philox4x64-10
bijection (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), ten rounds,
the key bumped by the Weyl constants between rounds, exactly as Random123 and numpy define it.

The stream: numpy's ``Philox(key=K)`` starts at counter 0 and increments the 256-bit counter
by one BEFORE it computes each 4-word block, so word ``i`` of ``random_raw()`` is word
``i % 4`` of ``block(K, i // 4 + 1)``. ``words(key, n, start)`` is that stream's words
``start .. start + n - 1`` -- a pure function of (key, word index), computed here in bulk.
"""

from __future__ import annotations

import numpy as np

U64 = np.dtype(np.uint64)
M0, M1 = np.uint64(0xD2E7470EE14C6C93), np.uint64(0xCA5A826395121157)  # round multipliers
W0, W1 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBB67AE8584CAA73B)  # Weyl key bumps
ROUNDS = 10
_LO32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
MASK64 = (1 << 64) - 1


def mulhilo(a: np.uint64, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The high and low 64-bit words of the 128-bit product ``a * b`` (uint64 arrays)."""
    a_lo, a_hi = a & _LO32, a >> _S32
    b_lo, b_hi = b & _LO32, b >> _S32
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> _S32) + (lh & _LO32) + (hl & _LO32)
    hi = hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)
    return hi, a * b


def block(key: tuple[int, int], ctr: np.ndarray) -> np.ndarray:
    """Philox4x64-10 of counters ``ctr`` (uint64, shape (..., 4)) under ``key``: (..., 4)."""
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    c = np.asarray(ctr, dtype=U64)
    c0, c1, c2, c3 = (c[..., j].copy() for j in range(4))
    with np.errstate(over="ignore"):
        for r in range(ROUNDS):
            if r:
                k0, k1 = k0 + W0, k1 + W1
            hi0, lo0 = mulhilo(M0, c0)
            hi1, lo1 = mulhilo(M1, c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack([c0, c1, c2, c3], axis=-1)


def counters(first: int, n: int) -> np.ndarray:
    """The 256-bit counters ``first .. first + n - 1`` as (n, 4) uint64 words (mod 2**256)."""
    lo = first & MASK64
    hi = first >> 64
    out = np.zeros((n, 4), U64)
    idx = np.arange(n, dtype=U64)
    with np.errstate(over="ignore"):
        out[:, 0] = np.uint64(lo) + idx
    carry = (out[:, 0] < np.uint64(lo)).astype(U64)  # the low word wrapped past 2**64 - 1
    for j in range(1, 4):
        word = np.uint64((hi >> (64 * (j - 1))) & MASK64)
        with np.errstate(over="ignore"):
            out[:, j] = word + carry
        carry = carry & (out[:, j] == np.uint64(0)).astype(U64)
    return out


def words(key: tuple[int, int], n: int, start: int = 0, counter: int = 0) -> np.ndarray:
    """Words ``start .. start+n-1`` (uint64, shape (n,)) of numpy's ``Philox(key, counter)``
    stream: word ``i`` is word ``i % 4`` of ``block(key, counter + i // 4 + 1)``."""
    if n == 0:
        return np.zeros(0, U64)
    first_block = start // 4
    nblocks = (start + n - 1) // 4 - first_block + 1
    ctr = counters((counter + first_block + 1) % (1 << 256), nblocks)
    flat = block(key, ctr).reshape(-1)
    off = start - 4 * first_block
    return flat[off:off + n].copy()


def key_words(seed: int) -> tuple[int, int]:
    """numpy's ``Philox(key=seed)`` key words for an int seed in [0, 2**128): little-endian."""
    return seed & MASK64, seed >> 64
