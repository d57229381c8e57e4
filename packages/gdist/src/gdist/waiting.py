"""How the driver waits for a step's replies on the direct links: asleep, or polling where a
core is free for it.

A process asleep in ``select`` is woken by the kernel when a reply arrives; where its CPU
went idle meanwhile (on a virtual machine, a halted vCPU the host has to schedule again) that
wake-up alone costs 0.1-0.2 ms, measured on the 2-core KVM host (docs/distributed.md): a
tenth of a small model's step. Polling the links instead keeps a core busy, so the driver
polls only where one is free for it, and only around the time the replies are expected:
``reply_wait="auto"`` polls when this machine's CPUs outnumber the compute threads of the
replicas running on it by at least one (the driver's); it sleeps until ``AHEAD`` seconds
before the reply the last steps predict (the shortest of their reply times), polls until
``SPAN`` seconds after it, then sleeps again. ``"poll"`` polls whatever the placement,
``"sleep"`` never does. How the driver waits changes when it notices a reply, never a bit.
"""

from __future__ import annotations

import functools
import os
import selectors
import socket
import time
from collections import deque
from collections.abc import Iterable

WAITS = ("auto", "poll", "sleep")
AHEAD = 1e-3  # seconds before the expected reply that polling starts
SPAN = 4e-3  # seconds after the expected reply that polling gives up (then sleeps)
FIRST = 20e-3  # with no reply time known yet: poll this long from the send


@functools.cache
def machine() -> str:
    """This machine's identity as its processes see it: the host name, the (Linux) boot id
    and the identity of ``/dev/shm``, so two processes compare equal when they share the CPUs
    and the shared memory (containers with a private /dev/shm do not)."""
    boot = shm = ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat("/dev/shm")
        shm = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        pass
    return f"{socket.gethostname()} {boot} {shm}"


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def compute_threads(backend: str) -> int:
    """The threads a replica computes on: the cpu backend's kernel threads
    (``GTENSOR_CPU_THREADS``, else every CPU of the process), one on the other backends."""
    if backend != "cpu":
        return 1
    from gtensor.runtime.cpu import THREADS_ENV

    try:
        n = int(os.environ.get(THREADS_ENV, ""))
    except ValueError:
        n = 0
    return n if n > 0 else cpus()


class ReplyWait:
    """The driver's wait for replies (see the module docstring)."""

    def __init__(self, mode: str = "auto") -> None:
        if mode not in WAITS:
            raise ValueError(f"gdist.DataParallel: reply_wait is {mode!r}; expected one of "
                             f"{WAITS}")
        self.mode = mode
        self.polling = mode == "poll"
        self._recent: deque[float] = deque(maxlen=8)  # the last steps' reply times (s)

    def place(self, replicas: Iterable[tuple[str, int]]) -> None:
        """Decide for the replicas now running: their (machine, compute threads)."""
        if self.mode != "auto":
            return
        here = machine()
        busy = sum(threads for where, threads in replicas if where == here)
        self.polling = busy + 1 <= cpus()

    def select(self, sel: selectors.BaseSelector, sent: float, deadline: float) -> list:
        """``sel``'s ready links (``sent``: the requests' ``perf_counter`` time; ``deadline``:
        ``time.monotonic`` time to give up at, then ``[]``)."""
        if self.polling:
            if self._recent:
                expect = min(self._recent)
                start, stop = sent + expect - AHEAD, sent + expect + SPAN
            else:
                start, stop = sent, sent + FIRST
            ahead = start - time.perf_counter()
            if ahead > 0:
                events = sel.select(timeout=min(ahead, max(0.0, deadline - time.monotonic())))
                if events:
                    return events
            while time.perf_counter() < stop:
                events = sel.select(timeout=0)
                if events:
                    return events
        return sel.select(timeout=max(0.0, deadline - time.monotonic()))

    def took(self, seconds: float) -> None:
        """A step's replies all came ``seconds`` after its requests were sent."""
        self._recent.append(seconds)
