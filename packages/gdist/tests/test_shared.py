"""gdist.shared: tree values through /dev/shm keep their bits; a value overwritten, torn or
gone is refused, never read; segments grow by generation, go with their run, and those of
dead processes are swept."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gdist import shared

pytestmark = pytest.mark.skipif(not shared.available(), reason="no writable /dev/shm here")


def value(rng, scale: int = 1) -> tuple:
    nan = np.array([0x7FF8000000000001, 0x8000000000000000, 1], np.uint64).view(np.float64)
    return np.float64(-0.0), {
        "W": rng.standard_normal((3 * scale, 5)),
        "nan_payloads": nan,  # a NaN's payload, -0.0, a subnormal
        "f32": np.array([np.nan, -0.0, 1e-45, 3.5], np.float32),
        "zero_d": np.array(2.5),
        "empty": np.zeros((0, 4)),
    }


def files(run: str) -> list[str]:
    return sorted(n for n in os.listdir(shared.ROOT) if n.startswith(f"gdist-{run}-"))


@pytest.fixture
def boxes():
    out, inb = shared.Outbox(), shared.Inbox()
    yield out, inb
    inb.close()
    out.close()


def test_a_value_comes_back_with_its_bits_as_views_or_copies(boxes) -> None:
    out, inb = boxes
    v = value(np.random.default_rng(0))
    desc = out.put("r0", 1, 6, 11, v)
    for copy in (False, True):
        loss, got = inb.take(desc, copy=copy)
        assert type(loss) is np.float64 and np.signbit(loss)
        assert set(got) == set(v[1])
        for n, a in v[1].items():
            assert got[n].dtype == a.dtype and got[n].shape == a.shape, n
            assert got[n].tobytes() == a.tobytes(), n
            assert got[n].flags.writeable is copy, n  # views of the segment are read-only
    kept = inb.take(desc, copy=True)[1]
    out.put("r0", 1, 6, 12, (np.float64(1.0), {n: np.zeros_like(a) for n, a in v[1].items()}))
    assert kept["W"].tobytes() == v[1]["W"].tobytes()  # a copy outlives the segment's next use


def test_another_attempts_value_is_refused_not_read(boxes) -> None:
    out, inb = boxes
    rng = np.random.default_rng(1)
    old = out.put("r1", 0, 3, 20, value(rng))
    out.put("r1", 0, 3, 21, value(rng))  # the same (run, peer, node), the next attempt
    with pytest.raises(shared.SharedValueLost, match="holds attempt 21's value; expected 20"):
        inb.take(old, copy=True)


def test_a_value_overwritten_while_read_is_refused(boxes, monkeypatch) -> None:
    out, inb = boxes
    desc = out.put("r2", 0, 3, 30, value(np.random.default_rng(2)))
    inb.take(desc, copy=False)  # mapped now
    seg = inb._maps[desc["name"]]
    real = seg.array

    def writer_starts_meanwhile(*args):  # the next attempt's writer begins during the read
        got = real(*args)
        out._segs[("r2", 0, "3")].tags[0] = 31
        return got

    monkeypatch.setattr(seg, "array", writer_starts_meanwhile)
    with pytest.raises(shared.SharedValueLost, match="overwritten while read"):
        inb.take(desc, copy=True)


def test_a_gone_segment_is_refused(boxes) -> None:
    out, inb = boxes
    desc = out.put("r3", 0, 3, 40, value(np.random.default_rng(3)))
    out.drop("r3")
    assert files("r3") == []
    with pytest.raises(shared.SharedValueLost, match="cannot be read"):
        inb.take(desc, copy=True)
    bad = dict(desc, name="gdist-r3-1-0-3-9", arrays=[["W", "<f8", [4], 10 ** 9]])
    with pytest.raises(shared.SharedValueLost):
        inb.take(bad, copy=True)


def test_a_larger_value_takes_a_new_generation_and_the_old_goes(boxes) -> None:
    out, inb = boxes
    rng = np.random.default_rng(4)
    small = out.put("r4", 2, "root", 50, value(rng))
    assert inb.take(small, copy=False)[1]["W"].shape == (3, 5)
    same = out.put("r4", 2, "root", 51, value(rng))
    assert same["name"] == small["name"]  # reused while the value fits
    big = out.put("r4", 2, "root", 52, value(rng, scale=40))
    assert big["name"] != small["name"] and files("r4") == [big["name"]]
    got = inb.take(big, copy=False)[1]["W"]
    assert got.shape == (120, 5)
    assert list(inb._maps) == [big["name"]]  # the reader let the old generation go
    out.put("r5", 0, 3, 1, value(rng))
    out.drop("r4")
    assert files("r4") == [] and len(files("r5")) == 1
    inb.drop("r4")
    assert inb._maps == {}


def test_segments_of_dead_processes_are_swept() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    stale = os.path.join(shared.ROOT, f"gdist-sweeptest-{pid}-0-3-1")
    live = os.path.join(shared.ROOT, f"gdist-sweeptest-{os.getpid()}-0-3-1")
    other = os.path.join(shared.ROOT, f"gdist-sweeptest-{pid}")  # not a segment name
    for p in (stale, live, other):
        with open(p, "wb") as f:
            f.write(b"x")
    try:
        assert shared.sweep() >= 1
        assert not os.path.exists(stale)
        assert os.path.exists(live) and os.path.exists(other)
    finally:
        for p in (stale, live, other):
            if os.path.exists(p):
                os.unlink(p)


def test_a_segment_that_does_not_fit_is_refused_up_front_and_leaves_nothing(boxes,
                                                                          monkeypatch) -> None:
    """/dev/shm too small (a container's 64 MB): put raises OSError before writing (the
    caller then sends the value on the socket), never a SIGBUS on a write to the mapping."""
    import errno

    out, inb = boxes
    rng = np.random.default_rng(6)
    small = value(rng)
    out.put("r6", 0, 3, 1, small)
    reserve = os.posix_fallocate

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="No space left"):
        out.put("r6", 0, 3, 2, value(rng, scale=50))  # grows: the new generation fails
    with pytest.raises(OSError, match="No space left"):
        out.put("r7", 0, 3, 1, small)
    assert files("r6") == files("r7") == [] and out._segs == {}
    monkeypatch.setattr(os, "posix_fallocate", reserve)
    desc = out.put("r6", 0, 3, 3, small)  # space again: a value fits and is read back
    assert inb.take(desc, copy=True)[1]["W"].tobytes() == small[1]["W"].tobytes()
