"""How the driver waits for replies (gdist.waiting) and a replica for its peers' values (the
mailbox): polling only where a core is free, around the expected reply, sleeping otherwise;
values, aborts and unreadable values delivered to the waiter."""

from __future__ import annotations

import threading
import time

import pytest
from gdist import waiting
from gdist.service import Mailbox, StepAborted


class Recorder:
    """A selector stand-in: records each select's timeout; ready after ``after`` calls."""

    def __init__(self, after: int) -> None:
        self.timeouts: list[float] = []
        self.after = after

    def select(self, timeout: float) -> list:
        self.timeouts.append(timeout)
        return ["ready"] if len(self.timeouts) > self.after else []


def test_modes_are_checked_and_named() -> None:
    with pytest.raises(ValueError, match=r"reply_wait is 'spin'; expected one of \('auto', "
                                         r"'poll', 'sleep'\)"):
        waiting.ReplyWait("spin")


def test_auto_polls_only_where_a_core_is_free(monkeypatch) -> None:
    monkeypatch.setattr(waiting, "cpus", lambda: 2)
    here, there = waiting.machine(), "another machine"
    w = waiting.ReplyWait("auto")
    w.place([(here, 1)])  # one replica of one thread beside the driver: a core each
    assert w.polling
    w.place([(here, 1), (here, 1)])  # the replicas take both cores: the driver sleeps
    assert not w.polling
    w.place([(here, 2)])
    assert not w.polling
    w.place([(there, 4), (there, 4), (here, 1)])  # replicas elsewhere take no core here
    assert w.polling
    for mode, polls in (("poll", True), ("sleep", False)):
        fixed = waiting.ReplyWait(mode)
        fixed.place([(here, 8)])
        assert fixed.polling is polls, mode


def test_sleeping_waits_in_one_select_until_the_deadline() -> None:
    w = waiting.ReplyWait("sleep")
    sel = Recorder(after=0)
    assert w.select(sel, time.perf_counter(), time.monotonic() + 30) == ["ready"]
    assert len(sel.timeouts) == 1 and 29 < sel.timeouts[0] <= 30


def test_polling_sleeps_until_shortly_before_the_expected_reply_then_polls() -> None:
    w = waiting.ReplyWait("poll")
    for s in (0.050, 0.040, 0.045):
        w.took(s)  # the shortest reply time so far: 40 ms
    sel = Recorder(after=3)
    sent = time.perf_counter()
    assert w.select(sel, sent, time.monotonic() + 30) == ["ready"]
    first, *polls = sel.timeouts
    assert 0.030 < first <= 0.040 - waiting.AHEAD + 1e-9  # asleep until 1 ms before
    assert polls == [0, 0, 0]  # then looks without sleeping


def test_polling_gives_up_after_its_span_and_sleeps() -> None:
    w = waiting.ReplyWait("poll")
    w.took(0.001)
    sel = Recorder(after=10 ** 9)  # nothing ever arrives
    assert w.select(sel, time.perf_counter(), time.monotonic() + 0.05) == []
    assert sel.timeouts[-1] > 0 and sel.timeouts.count(0) >= 1  # polled, then slept
    sel = Recorder(after=10 ** 9)
    t0 = time.perf_counter()
    assert waiting.ReplyWait("poll").select(sel, t0, time.monotonic() + 0.05) == []
    assert time.perf_counter() - t0 >= waiting.FIRST  # no reply time yet: polls FIRST s


def test_compute_threads_follow_the_cpu_backends_setting(monkeypatch) -> None:
    monkeypatch.setattr(waiting, "cpus", lambda: 6)
    for env, want in (("3", 3), (None, 6), ("junk", 6), ("0", 6)):
        if env is None:
            monkeypatch.delenv("GTENSOR_CPU_THREADS", raising=False)
        else:
            monkeypatch.setenv("GTENSOR_CPU_THREADS", env)
        assert waiting.compute_threads("cpu") == want, env
    assert waiting.compute_threads("numpy") == 1
    assert waiting.machine() == waiting.machine() and waiting.machine()


@pytest.mark.parametrize("spin", [0.0, 0.5])
def test_a_mailbox_wait_gets_the_value_the_abort_or_the_failure(spin: float) -> None:
    box = Mailbox()
    threading.Timer(0.02, box.put, (1, 7, "v")).start()
    assert box.wait(1, 7, 30, spin) == "v"
    threading.Timer(0.02, box.abort, (2,)).start()
    with pytest.raises(StepAborted, match="step 2 was aborted"):
        box.wait(2, 7, 30, spin)
    threading.Timer(0.02, box.put, (3, "root", RuntimeError("unreadable"))).start()
    with pytest.raises(RuntimeError, match="unreadable"):
        box.wait(3, "root", 30, spin)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="no value for tree node 9 within 0.05 s"):
        box.wait(4, 9, 0.05, spin)
    assert time.monotonic() - t0 < 0.4  # polling ends at the deadline too
