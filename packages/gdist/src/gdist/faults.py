"""Fault drills: make a worker process die (SIGKILL) at a chosen point of a chosen step.

The recovery of ``DataParallel`` is only believable if it is exercised where it hurts. A drill
is armed in the worker process that should die, e.g. with Dask's ``client.run``::

    client.run(gdist.faults.arm, "reduce", 3, workers=[address])

and that process SIGKILLs itself when its replica reaches the point in step 3:

* ``"leaf"``: before computing one of its microbatches (mid-step);
* ``"reduce"``: after its partial sums are sent, before the root arrives (mid-reduce);
* ``"apply"``: right after applying the root (the step committed here, the driver not told).

A drill fires once; ``disarm()`` clears every armed drill of the process.
"""

from __future__ import annotations

import os
import signal

POINTS = ("leaf", "reduce", "apply")
_ARMED: set[tuple[str, int]] = set()


def arm(point: str, step: int) -> None:
    """SIGKILL this process when a replica of it reaches ``point`` in step ``step``."""
    if point not in POINTS:
        raise ValueError(f"gdist.faults.arm: point is {point!r}; expected one of {POINTS}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"gdist.faults.arm: step is {step!r}; expected an int >= 0")
    _ARMED.add((point, step))


def disarm() -> None:
    """Clear every armed drill of this process."""
    _ARMED.clear()


def hit(point: str, step: int) -> None:
    """Called by the replica service at ``point`` of ``step``: dies if a drill is armed."""
    if (point, step) in _ARMED:
        _ARMED.discard((point, step))
        os.kill(os.getpid(), signal.SIGKILL)
