"""Per-process counters (``gdist.worker_stats``): models built, microbatches, tree additions,
captures, tree values sent to peers through shared memory and on links' sockets, replicas
held."""

from __future__ import annotations

import os
import threading

_LOCK = threading.Lock()
_COUNTS = {"builds": 0, "microbatches": 0, "adds": 0, "captures": 0, "steps": 0,
           "shared_values": 0, "socket_values": 0}


def count(what: str, n: int = 1) -> None:
    """Add ``n`` to counter ``what``."""
    with _LOCK:
        _COUNTS[what] += n


def stats() -> dict[str, int]:
    """This process's counters, its pid and the replicas it holds now."""
    from . import service

    with _LOCK:
        return {**_COUNTS, "pid": os.getpid(), "replicas": service.held()}
