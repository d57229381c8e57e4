"""gtape.recording: a recording is handed back only while every declared version and its key
are as recorded; a stale one is refused by ``require`` with a message naming what moved."""

from __future__ import annotations

import pytest
from gtape.recording import Recording, StaleRecording, Version


def test_fresh_until_a_version_moves():
    lr, clip = Version("lr"), Version("clip")
    r = Recording("the update", [lr, clip])
    assert r.current() is None and not r.fresh() and r.stale() == ["nothing recorded"]
    assert r.keep("run") == "run"
    assert r.current() == "run" and r.require() == "run" and r.stale() == []
    clip.bump()
    assert r.current() is None and r.held == "run"
    assert r.stale() == ["clip (version 0, now 1)"]
    with pytest.raises(StaleRecording, match=r"the update: the recording is stale \(clip "):
        r.require()
    r.keep("again")
    assert r.current() == "again"


def test_the_key_is_compared_by_value():
    r = Recording("zeroing")
    r.keep("fills", key=(1, 2))
    assert r.current((1, 2)) == "fills"
    assert r.current((1, 3)) is None and r.held == "fills"  # kept until replaced
    assert r.stale((1, 3)) == ["its inputs (graph, shapes, dtypes or buffers)"]
    r.clear()
    assert r.held is None and r.current((1, 2)) is None


def test_a_dependency_declared_later_makes_a_held_recording_stale():
    r = Recording("segment")
    r.keep("launches")
    v = Version("alpha")
    r.depend(v)
    assert r.current() is None and r.deps == (v,)
    r.keep("launches")
    assert r.current() == "launches"
    v.bump()
    assert r.current() is None


def test_the_tapes_zeroing_follows_its_gradient_buffers(bname):
    """reset_to's zeroing is recorded keyed by the gradient buffers it fills: a parameter
    registered after it was recorded is zeroed too (on kernel backends the fills replay)."""
    import gtape as g
    import numpy as np
    from gtensor.testing import bits_equal

    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, 2.0]))
        mark = tp.mark()
        for _ in range(2):  # the zeroing of [w's gradient] is recorded and replayed
            tp.backward(g.sum(w * w))
            tp.reset_to(mark)
        u = tp.param(np.array([3.0, -1.0]))
        mark = tp.mark()
        tp.backward(g.sum(w * u))
        tp.reset_to(mark)
        for v in (w, u):
            got = np.asarray(tp.backend.to_numpy(tp.grad(v)))
            assert bits_equal(got, np.zeros(2)), f"{v!r}: {got} after reset_to"
