"""Recordings that cannot go stale: a recorded replay states what it depends on.

"Record once, replay" is the speed of every engine (the tape's gradient zeroing, its backward
passes, the optimizer's recorded update, a device optimizer's segment, a fused program's
units). Each of those is a ``Recording``: the recorded thing plus the dependencies it was
recorded under --

* ``Version`` objects, one per piece of mutable configuration (an optimizer's lr, betas, eps,
  clip, per-parameter alpha and registered parameters; ...): whoever changes that piece calls
  ``bump()``; a recording holds the versions it saw;
* a ``key``: a hashable summary of what the recording was made from that is compared by value
  (a graph's ops, inputs, attributes, shapes, dtypes; the identities of the buffers it reads;
  the backend).

``current(key)`` hands back the recording only when every version and the key are those it
was recorded under -- otherwise the caller records again (``keep``); ``require(key)`` refuses a
stale replay with a message naming what moved. No cache is invalidated by hand.

>>> clip = Version("clip")
>>> r = Recording("the update", [clip])
>>> r.keep("launches", key=("w",))
'launches'
>>> r.current(("w",))
'launches'
>>> clip.bump()
>>> r.current(("w",)) is None
True
>>> r.stale(("w",))
['clip (version 0, now 1)']
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_UNSET = object()


class StaleRecording(RuntimeError):
    """A replay was asked of a recording whose dependencies moved since it was made."""


class Version:
    """One dependency of recordings: a name and a counter that every change bumps."""

    __slots__ = ("name", "version")

    def __init__(self, name: str) -> None:
        self.name = name
        self.version = 0

    def bump(self) -> None:
        """Record that the thing this version stands for changed (recordings of it go stale)."""
        self.version += 1

    def __repr__(self) -> str:
        return f"<Version {self.name} {self.version}>"


class Recording(Generic[T]):
    """A recorded value (launches, a replay callable...) valid while its dependencies hold.

    ``what`` names the recording in messages; ``deps`` are the ``Version`` objects it depends
    on (more can be declared later with ``depend``).
    """

    def __init__(self, what: str, deps: Sequence[Version] = ()) -> None:
        self.what = what
        self._deps: list[Version] = list(deps)
        self._value: Any = _UNSET
        self._stamp: tuple = ()
        self._key: Any = None

    def depend(self, *deps: Version) -> None:
        """Declare more dependencies (a held recording made without them becomes stale)."""
        self._deps += [d for d in deps if all(d is not e for e in self._deps)]
        self._stamp = ()

    @property
    def deps(self) -> tuple[Version, ...]:
        """The declared dependencies."""
        return tuple(self._deps)

    def _versions(self) -> tuple:
        return tuple((id(d), d.version) for d in self._deps)

    def keep(self, value: T, key: Hashable = None) -> T:
        """Hold ``value``, recorded now under the current versions and ``key``; returns it."""
        self._value, self._stamp, self._key = value, self._versions(), key
        return value

    def fresh(self, key: Hashable = None) -> bool:
        """Whether a recording is held and every dependency and the key are as recorded."""
        return (self._value is not _UNSET and self._stamp == self._versions()
                and self._key == key)

    def current(self, key: Hashable = None) -> T | None:
        """The held recording when fresh for ``key``, otherwise None (the caller records
        again and ``keep``s the new one; a recording of another key stays held till then)."""
        return self._value if self.fresh(key) else None

    @property
    def held(self) -> T | None:
        """The held recording, fresh or not (None when nothing is held): for read-outs only."""
        return None if self._value is _UNSET else self._value

    def stale(self, key: Hashable = None) -> list[str]:
        """What moved since the recording was made (empty when fresh; "nothing recorded")."""
        if self._value is _UNSET:
            return ["nothing recorded"]
        was = dict(self._stamp)
        out = [f"{d.name} (version {was.get(id(d), 'undeclared')}, now {d.version})"
               for d in self._deps if was.get(id(d)) != d.version]
        if self._key != key:
            out.append("its inputs (graph, shapes, dtypes or buffers)")
        return out

    def require(self, key: Hashable = None) -> T:
        """The held recording; ``StaleRecording`` naming what moved when it is not fresh."""
        if not self.fresh(key):
            moved = ", ".join(self.stale(key))
            raise StaleRecording(f"{self.what}: the recording is stale ({moved}); record it "
                                 "again instead of replaying it")
        return self._value

    def clear(self) -> None:
        """Drop the held recording (and what it keeps alive)."""
        self._value, self._stamp, self._key = _UNSET, (), None

    def __repr__(self) -> str:
        state = "empty" if self._value is _UNSET else ("fresh" if self.fresh(self._key) else
                                                       "stale")
        return f"<Recording {self.what}: {state}, deps {[d.name for d in self._deps]}>"


__all__ = ["Recording", "StaleRecording", "Version"]
