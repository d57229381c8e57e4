"""Counter-based random numbers: every bit a pure function of (key, element index).

The generator is Philox4x64-10 exactly as ``numpy.random.Philox`` defines it
(``gtensor.philox``). Element ``i`` (row-major) of a draw with key ``K`` is word ``i`` of the
stream ``numpy.random.Philox(key=K).random_raw()`` produces, so a draw does not depend on the
backend, the launch geometry, the thread count or how a batch is split.

>>> import numpy as np
>>> import gtape as g
>>> k = g.rng.key(42)
>>> bool(np.array_equal(g.rng.bits(k, (2, 3)).ravel(),
...                     np.random.Philox(key=42).random_raw(6)))
True
>>> ref = np.random.Generator(np.random.Philox(key=42)).random(5)
>>> bool(np.array_equal(g.rng.uniform(k, 5), ref))
True

Transforms (``docs/semantics.md``, "Random numbers"):

* ``bits``: the uint64 words themselves.
* ``uniform`` f64: ``(w >> 11) * 2**-53`` (numpy's ``Generator.random()``), in [0, 1);
  f32: ``(w >> 40) * 2**-24``, in [0, 1). Both exact (no rounding).
* ``normal``: Box-Muller on words ``2i`` and ``2i + 1`` with our own ``log_f64`` and
  ``cos_f64``: ``u1 = ((w[2i] >> 11) + 1) * 2**-53`` in (0, 1],
  ``u2 = (w[2i+1] >> 11) * 2**-53``, ``z = sqrt(-2 * log(u1)) * cos(TWO_PI * u2)``, each
  operation rounded once in float64; f32: ``z`` rounded once to float32.
* ``Key.fold(i)``: the key ``(b0, b1)`` where ``b = Philox(K, counter=(i, 0, 0, 1))``;
  ``Key.split(n)[j]``: ``(b0, b1)`` of ``Philox(K, counter=(j, 0, 0, 2))``. A draw uses
  counters with c3 == 0, so derived keys come from blocks no draw of K uses.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
from gtensor import describe, philox
from gtensor.scalar.transcendental import LOG_F64
from gtensor.scalar.trig import COS_F64

SEED_LIMIT = 1 << 128  # seeds (and fold indices) are ints in [0, 2**128) ([0, 2**64))
MAX_ELEMENTS = 1 << 60  # a draw's size limit: word indices stay far from 2**62
TWO_PI = 6.283185307179586  # 2*pi rounded to float64 (0x1.921fb54442d18p+2)
_FOLD_TAG, _SPLIT_TAG = 1, 2  # counter word c3 of the blocks that derive keys


class Key:
    """A Philox key: two uint64 words ``(k0, k1)``, numpy's ``Philox(key=k0 + 2**64 * k1)``."""

    __slots__ = ("_words",)

    def __init__(self, k0: int, k1: int = 0) -> None:
        for name, w in (("k0", k0), ("k1", k1)):
            if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or \
                    not 0 <= int(w) <= philox.MASK64:
                raise TypeError(f"rng.Key: {name} must be an int in [0, 2**64), got {w!r}")
        self._words = (int(k0), int(k1))

    @property
    def words(self) -> tuple[int, int]:
        """The two key words (k0, k1)."""
        return self._words

    @property
    def seed(self) -> int:
        """The key as one int, ``k0 + 2**64 * k1`` (``numpy.random.Philox(key=...)``)."""
        return self._words[0] | (self._words[1] << 64)

    def array(self) -> np.ndarray:
        """The key as the int64 array (2,) of the words' bit patterns (an op's key input)."""
        return np.array(self._words, dtype=np.uint64).view(np.int64)

    @classmethod
    def from_array(cls, a: Any) -> "Key":
        """The key held in an int64 (or uint64) array of two words."""
        a = np.asarray(a)
        if a.shape != (2,) or a.dtype not in (np.dtype(np.int64), np.dtype(np.uint64)):
            raise TypeError(f"rng.Key.from_array: expected an int64 array of shape (2,), got "
                            f"{describe(a)}")
        w = a.view(np.uint64)
        return cls(int(w[0]), int(w[1]))

    def fold(self, i: int) -> "Key":
        """A new key from this key and an int ``i`` in [0, 2**64) (e.g. a step number)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or \
                not 0 <= int(i) <= philox.MASK64:
            raise TypeError(f"rng.Key.fold: i must be an int in [0, 2**64), got {i!r}")
        b = philox.block(self._words, np.array([[int(i), 0, 0, _FOLD_TAG]], dtype=np.uint64))
        return Key(int(b[0, 0]), int(b[0, 1]))

    def split(self, n: int) -> list["Key"]:
        """``n`` new keys, independent of each other and of this key's own draws."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n < 2**32:
            raise TypeError(f"rng.Key.split: n must be an int in [0, 2**32), got {n!r}")
        ctr = np.zeros((int(n), 4), np.uint64)
        ctr[:, 0] = np.arange(int(n), dtype=np.uint64)
        ctr[:, 3] = _SPLIT_TAG
        b = philox.block(self._words, ctr)
        return [Key(int(b[j, 0]), int(b[j, 1])) for j in range(int(n))]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other._words == self._words

    def __hash__(self) -> int:
        return hash(("rng.Key", self._words))

    def __repr__(self) -> str:
        return f"Key(0x{self._words[0]:016x}, 0x{self._words[1]:016x})"


def key(seed: int) -> Key:
    """The key of an int ``seed`` in [0, 2**128), as ``numpy.random.Philox(key=seed)``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"rng.key: seed must be an int in [0, 2**128), got {describe(seed)}")
    if not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"rng.key: seed must be an int in [0, 2**128), got {int(seed)}")
    k0, k1 = philox.key_words(int(seed))
    return Key(k0, k1)


def check_key(where: str, k: Any) -> Key:
    """``k`` when it is a Key; TypeError naming ``where`` otherwise."""
    if not isinstance(k, Key):
        raise TypeError(f"{where}: key must be a gtape.rng.Key (from g.rng.key(seed)), got "
                        f"{describe(k)}")
    return k


def check_shape(where: str, shape: Any) -> tuple[int, ...]:
    """``shape`` (an int or a tuple of ints >= 0) as a tuple; ValueError/TypeError otherwise."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) \
        else shape
    ok = isinstance(dims, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims)
    if not ok:
        raise TypeError(f"{where}: shape must be an int or a tuple of ints, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims) or prod(dims) > MAX_ELEMENTS:
        raise ValueError(f"{where}: shape {dims} is not a valid draw shape; expected sizes "
                         f">= 0 and at most 2**60 elements")
    return dims


def _dtype(where: str, dtype: Any) -> np.dtype:
    dt = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise TypeError(f"{where}: dtype must be float64 or float32, got {dt.name}")
    return dt


# ---------------------------------------------------------------- the numpy definitions
def bits_ref(k: Key, shape: tuple[int, ...]) -> np.ndarray:
    """The uint64 words of a draw of ``shape`` (numpy reference)."""
    return philox.words(k.words, prod(shape)).reshape(shape)


def uniform_ref(k: Key, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """Uniforms in [0, 1) of a draw (numpy reference)."""
    w = philox.words(k.words, prod(shape))
    if np.dtype(dtype) == np.float32:
        return ((w >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)).reshape(shape)
    return ((w >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(shape)


def normal_ref(k: Key, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """Standard normals of a draw: Box-Muller on word pairs (numpy reference)."""
    n = prod(shape)
    w = philox.words(k.words, 2 * n).reshape(n, 2)
    u1 = ((w[:, 0] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (w[:, 1] >> np.uint64(11)).astype(np.float64) * 2.0**-53
    with np.errstate(all="ignore"):
        r = np.sqrt(-2.0 * LOG_F64.eval(u1))
        z = r * COS_F64.eval(TWO_PI * u2)
    return z.astype(np.dtype(dtype)).reshape(shape)


# ---------------------------------------------------------------- public draws
def _draw(where: str, k: Any, shape: Any, tp: Any, dtype: Any = None) -> tuple:
    k = check_key(where, k)
    shape = check_shape(where, shape)
    if tp is not None:
        raise NotImplementedError(f"{where}: drawing on a tape is not available yet; "
                                  "pass tp=None for a numpy array")
    return k, shape, _dtype(where, dtype)


def bits(key: Key, shape: Any, tp: Any = None) -> np.ndarray:
    """uint64 words of Philox4x64-10: element i (row-major) is word i of numpy's stream."""
    k, shape, _ = _draw("rng.bits", key, shape, tp)
    return bits_ref(k, shape)


def uniform(key: Key, shape: Any, tp: Any = None, dtype: Any = None) -> np.ndarray:
    """Uniforms in [0, 1): f64 ``(w >> 11) * 2**-53`` (numpy's ``Generator.random()``),
    f32 ``(w >> 40) * 2**-24``. ``dtype`` defaults to float64 (a tape's dtype on a tape)."""
    k, shape, dt = _draw("rng.uniform", key, shape, tp, dtype)
    return uniform_ref(k, shape, dt)


def normal(key: Key, shape: Any, tp: Any = None, dtype: Any = None) -> np.ndarray:
    """Standard normals (Box-Muller on word pairs with gtensor's own log and cos)."""
    k, shape, dt = _draw("rng.normal", key, shape, tp, dtype)
    return normal_ref(k, shape, dt)


__all__ = ["Key", "bits", "key", "normal", "uniform"]
