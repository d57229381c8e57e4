"""gdist.heap: a worker keeps its freed arrays (glibc malloc's thresholds), set when the
replica service starts on a worker."""

from __future__ import annotations

import sys

import pytest
from gdist import heap, service


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_keep_freed_memory_sets_glibcs_thresholds():
    assert heap.keep_freed_memory() is True


def test_the_service_sets_them_once_when_it_starts(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(service, "_EXEC", None)

    class Worker:
        handlers: dict = {}

    for _ in range(2):  # a second registration (another trainer) changes nothing
        service.Service().setup(Worker())
    assert calls == [1] and Worker.handlers["gdist"]
    service._EXEC.shutdown()


def test_off_linux_nothing_is_done(monkeypatch):
    monkeypatch.setattr(heap.sys, "platform", "darwin")
    assert heap.keep_freed_memory() is False
