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
* ``normal``: Box-Muller on words ``2i`` and ``2i + 1`` with the correctly rounded ``log``
  and ``cos`` (gtensor.scalar.crmath): ``u1 = ((w[2i] >> 11) + 1) * 2**-53`` in (0, 1],
  ``u2 = (w[2i+1] >> 11) * 2**-53``, ``z = sqrt(-2 * log(u1)) * cos(TWO_PI * u2)``, each
  operation rounded once in float64; f32: ``z`` rounded once to float32.
* ``Key.fold(i)``: the key ``(b0, b1)`` where ``b = Philox(K, counter=(i, 0, 0, 1))``;
  ``Key.split(n)[j]``: ``(b0, b1)`` of ``Philox(K, counter=(j, 0, 0, 2))``. A draw uses
  counters with c3 == 0, so derived keys come from blocks no draw of K uses.
* ``dropout(x, p, key)``: keep where the element's f64 uniform is >= p, times
  ``1 / (1 - p)``; dropped elements are +0.0; the backward regenerates the mask.

With ``tp=None`` (and a Key) a draw is a numpy array computed by the numpy reference of the
gtensor op; with a tape (``tp=``, or a key that is a Var of a tape) it is a recorded op:
``rng_bits``, ``rng_uniform``, ``rng_normal``, ``rng_fold``, ``dropout``, whose key input is
an int64 const of shape (2,) (named ``"rng_key"``: a captured program's ``set_input``
refreshes it with the next step's Key, e.g. ``base.fold(step)``).

Keys of modules. A module that draws (``nn.Dropout``, ``nn.MultiheadAttention``, a module
ported by ``from_torch`` for its random functions) hands out ``OwnedKey``s: Keys that also say
which module drew them and which of its draws (``t``) they are. Recorded as a key const, an
owned key registers its owner on the tape (``key_owner``), so a captured program knows the
module of each key input and refreshes them all with ``prog.advance_keys()``: the keys the
modules' next training forward draws (``KeyOwner.next_keys``), the eager run's by
construction.
"""


from __future__ import annotations

import weakref
from typing import Any, Protocol, runtime_checkable

import gtensor
import numpy as np
from gtensor import describe, philox
from gtensor.ops import random as rops

from .var import Var

SEED_LIMIT = 1 << 128  # seeds are ints in [0, 2**128)
KEY_NAME = "rng_key"  # the name of a key const a draw records (a program's input name)


class Key:
    """A Philox key: two uint64 words ``(k0, k1)``, numpy's ``Philox(key=k0 + 2**64 * k1)``."""

    __slots__ = ("_words",)

    def __init__(self, k0: int, k1: int = 0) -> None:
        if type(k0) is int and type(k1) is int and 0 <= k0 <= philox.MASK64 and \
                0 <= k1 <= philox.MASK64:  # the common case, checked in one line
            self._words = (k0, k1)
            return
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
    def from_array(cls, a: Any) -> Key:
        """The key held in an int64 (or uint64) array of two words."""
        a = np.asarray(a)
        if a.shape != (2,) or a.dtype not in (np.dtype(np.int64), np.dtype(np.uint64)):
            raise TypeError(f"rng.Key.from_array: expected an int64 array of shape (2,), got "
                            f"{describe(a)}")
        w = a.view(np.uint64)
        return cls(int(w[0]), int(w[1]))

    def fold(self, i: int) -> Key:
        """A new key from this key and an int ``i`` in [0, 2**64) (e.g. a step number)."""
        return Key(*rops.fold_words(self._words, rops.check_fold_index("rng.Key.fold", i)))

    def split(self, n: int) -> list[Key]:
        """``n`` new keys, independent of each other and of this key's own draws."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n < 2**32:
            raise TypeError(f"rng.Key.split: n must be an int in [0, 2**32), got {n!r}")
        return [Key(*w) for w in rops.split_words(self._words, int(n))]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other._words == self._words

    def __hash__(self) -> int:
        return hash(("rng.Key", self._words))

    def __repr__(self) -> str:
        return f"Key(0x{self._words[0]:016x}, 0x{self._words[1]:016x})"


class OwnedKey(Key):
    """A Key a module drew as its draw number ``t`` (``owner``: the module, a ``KeyOwner``).

    Equal to the plain Key of the same words (``==``, hash); recorded as a key const it
    registers ``(owner, t)`` on the tape (``key_owner``). Derived keys (``fold``, ``split``) are
    plain Keys.
    """

    __slots__ = ("owner", "t")

    def __init__(self, k0: int, k1: int, owner: Any, t: int) -> None:
        super().__init__(k0, k1)
        self.owner, self.t = owner, int(t)


@runtime_checkable
class KeyOwner(Protocol):
    """A module that draws keys one by one: its training forwards draw ``next_keys``'s keys
    in order, so a captured program can draw what the next eager forward would."""

    def next_keys(self, n: int) -> list[Key]:
        """The module's next ``n`` keys (as its next forward draws them); counts them."""
        ...


def key(seed: int) -> Key:
    """The key of an int ``seed`` in [0, 2**128), as ``numpy.random.Philox(key=seed)``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"rng.key: seed must be an int in [0, 2**128), got {describe(seed)}")
    if not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(f"rng.key: seed must be an int in [0, 2**128), got {int(seed)}")
    return Key(*philox.key_words(int(seed)))


class KeyStream:
    """A seeded stream of keys: the n-th key (n = 0, 1, ...) is words 0, 1 of the Philox block
    of ``key(seed)`` at counter (n, 0, 0, 3) -- a tag no draw, ``fold`` or ``split`` uses.

    Every ``gtape.Tape`` holds one (``Tape(seed=s)``, default 0): each module made without an
    explicit key takes the tape's next key, in construction order, so two default layers never
    share weights or dropout masks, and a re-run of the same program gets the same bits.

    >>> s = KeyStream(0)
    >>> a, b = s.next(), s.next()
    >>> a != b, s.drawn, KeyStream(0).next() == a
    (True, 2, True)
    """

    __slots__ = ("_seed", "_root", "_n")

    def __init__(self, seed: int) -> None:
        self._root = key(seed)  # checks the seed (an int in [0, 2**128))
        self._seed = int(seed)
        self._n = 0

    @property
    def seed(self) -> int:
        """The stream's seed."""
        return self._seed

    @property
    def drawn(self) -> int:
        """How many keys were taken so far (the next key is number ``drawn``)."""
        return self._n

    def at(self, n: int) -> Key:
        """The n-th key of the stream (whether or not it was taken)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or \
                not 0 <= int(n) <= philox.MASK64:
            raise TypeError(f"rng.KeyStream.at: n must be an int in [0, 2**64), got {n!r}")
        return Key(*rops.stream_words(self._root.words, int(n)))

    def next(self) -> Key:
        """The next key of the stream (counts it)."""
        k = self.at(self._n)
        self._n += 1
        return k

    def __repr__(self) -> str:
        return f"KeyStream(seed={self._seed}, drawn={self._n})"


# ---------------------------------------------------------------- keys on a tape
# per tape: key const node -> (its serial, owner module, draw t); entries of nodes a reset_to
# dropped are told apart by the serial (the node at that index is another one)
_OWNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def key_input(tp: Any, k: Key | np.ndarray, name: str = KEY_NAME) -> Var:
    """Record key ``k`` on tape ``tp`` as an int64 const (2,) called ``name`` (a program input
    that ``set_input(name, next_key)`` refreshes); an ``OwnedKey`` registers its owner."""
    k = check_key("rng.key_input", k, var_ok=False)
    v = tp.const(k.array(), name=name, dtype="int64")
    if isinstance(k, OwnedKey):
        _OWNERS.setdefault(tp, {})[v.index] = (v.serial, k.owner, k.t)
    return v


def key_owner(v: Var) -> tuple[Any, int] | None:
    """(owner module, draw t) of key const ``v`` when a module's ``OwnedKey`` made it, else
    None (a key given as a plain Key: ``g.dropout(x, p, key)``)."""
    got = _OWNERS.get(v.tape, {}).get(v.index)
    return None if got is None or got[0] != v.serial else (got[1], got[2])


def fold(k: Key | Var, i: int) -> Key | Var:
    """``k.fold(i)`` for a Key; for a key Var, the recorded op ``rng_fold`` (same bits)."""
    k = check_key("rng.fold", k)
    if isinstance(k, Key):
        return k.fold(i)
    return k.tape._record("rng_fold", [k], {"i": rops.check_fold_index("rng.fold", i)})


def check_key(where: str, k: Any, var_ok: bool = True) -> Key | Var:
    """``k`` as a Key (a Key, or its array form: an int64 / uint64 numpy array of shape (2,)),
    or with ``var_ok`` an int64 key Var of shape (2,) of a tape; TypeError otherwise."""
    if isinstance(k, Key):
        return k
    if isinstance(k, np.ndarray) and k.shape == (2,) and k.dtype in (np.int64, np.uint64):
        return Key.from_array(k)
    if var_ok and isinstance(k, Var) and np.dtype(k.dtype) == np.int64 and k.shape == (2,):
        return k
    accepted = "a gtape.rng.Key (g.rng.key(seed)) or its int64 array (Key.array())" + (
        " or an int64 key Var of shape (2,)" if var_ok else "")
    raise TypeError(f"{where}: key must be {accepted}, got {describe(k)}")


def _tape_of(where: str, k: Key | Var, tp: Any) -> Any:
    """The tape a draw records on: ``tp``, or the key Var's tape (None: a host draw)."""
    from .tape import Tape

    if tp is not None and not isinstance(tp, Tape):
        raise TypeError(f"{where}: tp must be a gtape.Tape or None, got {describe(tp)}")
    if isinstance(k, Var):
        if tp is not None and tp is not k.tape:
            raise ValueError(f"{where}: the key Var belongs to another tape than tp")
        return k.tape
    return tp


def _dtype(where: str, dtype: Any, tp: Any) -> np.dtype:
    if dtype is None:
        return np.dtype(np.float64) if tp is None else np.dtype(tp.dtype)
    dt = gtensor.dtypes.normalize(dtype, where)
    if tp is not None and dt != np.dtype(tp.dtype):
        raise TypeError(f"{where}: dtype {dt.name} differs from the tape's {tp.dtype.name}; "
                        "a draw on a tape takes the tape's dtype")
    return dt


def _draw(op: str, where: str, k: Any, shape: Any, tp: Any, dtype: Any = None,
          typed: bool = True) -> Any:
    k = check_key(where, k)
    tape = _tape_of(where, k, tp)
    attrs = {"shape": rops.check_shape(where, shape)}
    if typed:
        attrs["dtype"] = _dtype(where, dtype, tape)
    if tape is None:
        ref = gtensor.backend("numpy")
        return ref.to_numpy(ref.apply(op, [ref.asarray(k.array(), dtype=np.int64)], **attrs))
    tape._check_open(where)
    kv = key_input(tape, k) if isinstance(k, Key) else k
    return tape._record(op, [kv], attrs)


# ---------------------------------------------------------------- public draws
def bits(key: Key | Var, shape: Any, tp: Any = None) -> Any:
    """Philox4x64-10 words: element i (row-major) is word i of numpy's ``Philox(key)`` stream.

    Host (tp=None): uint64. On a tape: an int64 Var holding the words' bit patterns."""
    out = _draw("rng_bits", "rng.bits", key, shape, tp, typed=False)
    return out.view(np.uint64) if isinstance(out, np.ndarray) else out


def uniform(key: Key | Var, shape: Any, tp: Any = None, dtype: Any = None) -> Any:
    """Uniforms in [0, 1): f64 ``(w >> 11) * 2**-53`` (numpy's ``Generator.random()``),
    f32 ``(w >> 40) * 2**-24``. ``dtype``: float64 on the host unless given; a tape's own."""
    return _draw("rng_uniform", "rng.uniform", key, shape, tp, dtype)


def normal(key: Key | Var, shape: Any, tp: Any = None, dtype: Any = None) -> Any:
    """Standard normals (Box-Muller on word pairs, correctly rounded log and cos)."""
    return _draw("rng_normal", "rng.normal", key, shape, tp, dtype)


def dropout(x: Any, p: float, key: Key | Var) -> Any:
    """Inverted dropout: ``x * 1/(1-p)`` where the element's uniform is >= p, else +0.0.

    ``x`` a Var: the recorded op ``dropout`` (its backward regenerates the mask from the key);
    ``x`` a numpy array and ``key`` a Key: the numpy reference's result. ``p == 0`` returns
    ``x`` itself (nothing recorded): the identity, as in eval mode.
    """
    p = rops.check_p("dropout", p)
    k = check_key("dropout", key)
    if isinstance(x, Var):
        if isinstance(k, Var) and k.tape is not x.tape:
            raise ValueError("dropout: key is a Var of another tape than x")
        x.tape._check_var(x, "dropout: x")
        if p == 0.0:
            return x
        x.tape._check_open("dropout")
        kv = key_input(x.tape, k) if isinstance(k, Key) else k
        return x.tape._record("dropout", [x, kv], {"p": p})
    if isinstance(k, Var):
        raise TypeError(f"dropout: x is {describe(x)} but key is a Var; expected x to be a Var "
                        "of the key's tape")
    if p == 0.0:
        return x
    ref = gtensor.backend("numpy")
    arr = ref.asarray(x)
    return ref.to_numpy(ref.dropout(arr, ref.asarray(k.array(), dtype=np.int64), p))


def multinomial(probs: Any, num_samples: int = 1, replacement: bool = False, *,
                key: Key) -> np.ndarray:
    """Category indices drawn by weight (torch's ``multinomial``), a host int64 array of shape
    (num_samples,) for 1-D ``probs``, (rows, num_samples) for 2-D; ``probs`` (a Var or host
    data) holds finite weights >= 0 with a positive sum per row.

    The rule, in float64 (the weights converted exactly): for row r and sample j, ``u`` is the
    f64 uniform at element ``r * num_samples + j`` of ``key`` (``uniform(key, (rows,
    num_samples))``), ``target = u * total`` with ``total`` the serial sum of the row, and the
    pick is the first index i whose serial cumulative sum exceeds ``target`` (a zero weight is
    never picked; the last positive weight if rounding left none). Without replacement each
    pick's weight is then set to 0 and the row's sums recomputed for the next sample.
    """
    key = check_key("multinomial", key, var_ok=False)
    w = np.asarray(probs.numpy() if isinstance(probs, Var) else probs)
    if w.dtype.kind not in "iuf" or w.ndim not in (1, 2) or w.shape[-1] == 0:
        raise ValueError(f"multinomial: probs is {describe(probs)}; expected real weights of "
                         "shape (n,) or (rows, n), n >= 1")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or \
            num_samples < 1:
        raise ValueError(f"multinomial: num_samples is {num_samples!r}; expected an int >= 1")
    rows = w.reshape(-1, w.shape[-1]).astype(np.float64)
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise ValueError("multinomial: probs must be finite and >= 0")
    positive = (rows > 0).sum(axis=1)
    if (positive == 0).any():
        raise ValueError("multinomial: a row of probs sums to 0; expected a positive sum")
    if not replacement and num_samples > positive.min():
        raise ValueError(f"multinomial: {num_samples} samples without replacement but a row "
                         f"has only {positive.min()} categories of positive weight")
    u = uniform(key, (rows.shape[0], int(num_samples)))
    out = np.empty((rows.shape[0], int(num_samples)), dtype=np.int64)
    for r in range(rows.shape[0]):
        row = rows[r].copy()
        for j in range(int(num_samples)):
            cum = np.cumsum(row)  # serial: each partial sum rounded in turn
            target = u[r, j] * cum[-1]
            above = np.nonzero(cum > target)[0]
            pick = int(above[0]) if above.size else int(np.nonzero(row > 0)[0][-1])
            out[r, j] = pick
            if not replacement:
                row[pick] = 0.0
    return out.reshape(num_samples) if w.ndim == 1 else out


__all__ = ["Key", "KeyOwner", "KeyStream", "OwnedKey", "bits", "dropout", "fold", "key",
           "key_input", "key_owner", "multinomial", "normal", "uniform"]
