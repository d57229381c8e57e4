"""Tree values between replicas of one machine through shared memory (the links transport).

A replica that sends a tree value -- a (loss, gradients) result -- to a replica on its own
machine writes the gradients into a shared-memory segment it keeps for that (run, peer rank,
node), reused every step, and sends the peer only a descriptor on the link (the segment's name,
each array's dtype, shape and offset, the loss); the peer copies the arrays out into arrays of
its own. Over TCP the same value is copied by the kernel twice and read in many pieces: a 600
KB float64 gradient took ~0.4 ms from one replica to the other on the 2-core host
(docs/distributed.md), where the copy in and the copy out take ~0.1 ms.

Segments are files in ``/dev/shm`` named ``gdist-<run>-<pid>-<peer>-<node>-<generation>``. A
segment's header holds the attempt tag of the value in it twice: written before the data and
after it; the reader checks the second before copying and the first after, so a value
overwritten meanwhile (which the driver's one-step-at-a-time order rules out: checked anyway)
is refused, never read torn. The values' bits are the sender's: a copy changes none. A run's
segments are removed when its replica is dropped; those of a process that died (killed
workers) are removed by the next process that serves replicas on the machine (``sweep``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

ROOT = "/dev/shm"
HEADER = 64  # bytes before the first array: the two tags, then padding to a cache line
ALIGN = 64  # each array starts on a cache line


class SharedValueLost(RuntimeError):
    """A shared value was gone or overwritten before its peer read it."""


@functools.cache
def available() -> bool:
    """Whether this machine has a writable ``/dev/shm`` (Linux)."""
    return os.path.isdir(ROOT) and os.access(ROOT, os.W_OK)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _pid_of(name: str) -> int | None:
    parts = name.split("-")
    if len(parts) != 6 or parts[0] != "gdist" or not parts[2].isdigit():
        return None
    return int(parts[2])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep() -> int:
    """Remove the segments of processes that no longer run; how many were removed."""
    if not available():
        return 0
    gone = 0
    for name in os.listdir(ROOT):
        pid = _pid_of(name)
        if pid is not None and not _alive(pid):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(ROOT, name))
                gone += 1
    return gone


class _Segment:
    """One file in /dev/shm mapped read-write (the sender's) or read-only (a reader's)."""

    def __init__(self, name: str, size: int | None = None) -> None:
        self.name = name
        path = os.path.join(ROOT, name)
        if size is None:  # a reader's: the file as its writer made it
            fd = os.open(path, os.O_RDONLY)
            try:
                self.size = os.fstat(fd).st_size
                self.map = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                # the pages reserved now (OSError when /dev/shm is too small: a container's
                # 64 MB), not found missing by a write to the mapping (SIGBUS)
                os.posix_fallocate(fd, 0, size)
                self.size = size
                self.map = mmap.mmap(fd, size)
            except BaseException:
                os.unlink(path)
                raise
            finally:
                os.close(fd)
        self.tags = np.frombuffer(self.map, np.int64, 2)  # before the data, after it

    def array(self, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
        """The array of ``dtype`` and ``shape`` at ``offset`` (a view of the mapping)."""
        count = math.prod(shape)
        if offset < HEADER or offset + count * dtype.itemsize > self.size:
            raise SharedValueLost(f"gdist: shared value {self.name}: an array at {offset} "
                                  f"({count} x {dtype}) lies outside its {self.size} bytes")
        return np.frombuffer(self.map, dtype, count, offset).reshape(shape)

    def close(self, unlink: bool) -> None:
        """Unmap (and remove the file: the writer's)."""
        self.tags = None  # the views go before the mapping closes
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()
        if unlink:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(ROOT, self.name))


class Outbox:
    """A process's segments for the values it sends, by (run, peer rank, node)."""

    def __init__(self) -> None:
        self._segs: dict[tuple[str, int, str], _Segment] = {}
        self._generation = 0

    def put(self, run: str, peer: int, node: Any, tag: int, value: Any) -> dict:
        """Write ``value`` ((loss, {name: array})) for ``peer``; its descriptor (OSError when
        no segment can hold it: the caller sends the value itself)."""
        loss, grads = value
        arrays = {n: np.asarray(g) for n, g in grads.items()}
        arrays = {n: a if a.flags.c_contiguous else a.copy(order="C") for n, a in arrays.items()}
        size = HEADER + sum(_aligned(a.nbytes) for a in arrays.values())
        key = (run, int(peer), str(node))
        seg = self._segs.get(key)
        if seg is None or seg.size < size:
            if seg is not None:  # too small: the next generation replaces it
                self._segs.pop(key).close(unlink=True)
            self._generation += 1
            seg = _Segment(f"gdist-{run}-{os.getpid()}-{int(peer)}-{node}-{self._generation}",
                           size)
            self._segs[key] = seg
        seg.tags[0] = tag
        layout, offset = [], HEADER
        for n, a in arrays.items():
            np.copyto(seg.array(a.dtype, a.shape, offset), a)
            layout.append([n, a.dtype.str, list(a.shape), offset])
            offset += _aligned(a.nbytes)
        seg.tags[1] = tag
        return {"name": seg.name, "tag": int(tag), "loss": loss, "arrays": layout}

    def drop(self, run: str) -> None:
        """Remove the run's segments."""
        for key in [k for k in self._segs if k[0] == run]:
            self._segs.pop(key).close(unlink=True)

    def close(self) -> None:
        """Remove every segment."""
        for seg in self._segs.values():
            seg.close(unlink=True)
        self._segs.clear()


class Inbox:
    """A process's read-only mappings of its peers' segments, by name (used by the links'
    threads and the event loop: one at a time)."""

    def __init__(self) -> None:
        self._maps: dict[str, _Segment] = {}
        self._lock = threading.Lock()

    def take(self, desc: Mapping[str, Any], copy: bool) -> tuple[Any, dict[str, np.ndarray]]:
        """The value a descriptor names (SharedValueLost when its segment is gone or holds
        another attempt's value): read-only views of the segment, or (``copy``) new arrays --
        a value kept past its step (the root, which the log keeps) must be copied; a tree
        node is added within the step, before its sender can write the segment again."""
        with self._lock:
            return self._take(desc, copy)

    def _take(self, desc: Mapping[str, Any], copy: bool) -> tuple[Any, dict[str, np.ndarray]]:
        name, tag = str(desc["name"]), int(desc["tag"])
        seg = self._maps.get(name)
        if seg is None:
            try:
                seg = _Segment(name)
            except (OSError, ValueError) as e:
                raise SharedValueLost(f"gdist: shared value {name} cannot be read: {e}") \
                    from None
            stem = name.rsplit("-", 1)[0]  # an older generation of it is done with
            for old in [n for n in self._maps if n.rsplit("-", 1)[0] == stem]:
                self._maps.pop(old).close(unlink=False)
            self._maps[name] = seg
        if int(seg.tags[1]) != tag:
            raise SharedValueLost(f"gdist: shared value {name} holds attempt "
                                  f"{int(seg.tags[1])}'s value; expected {tag}'s")
        out = {str(n): seg.array(np.dtype(dt), tuple(shape), int(off))
               for n, dt, shape, off in desc["arrays"]}
        if copy:
            out = {n: a.copy() for n, a in out.items()}
        if int(seg.tags[0]) != tag:
            raise SharedValueLost(f"gdist: shared value {name} was overwritten while read "
                                  f"(attempt {int(seg.tags[0])}, expected {tag})")
        return desc["loss"], out

    def drop(self, run: str) -> None:
        """Unmap the run's segments."""
        with self._lock:
            for name in [n for n in self._maps if n.split("-")[1] == run]:
                self._maps.pop(name).close(unlink=False)

    def close(self) -> None:
        """Unmap everything."""
        with self._lock:
            for seg in self._maps.values():
                seg.close(unlink=False)
            self._maps.clear()
