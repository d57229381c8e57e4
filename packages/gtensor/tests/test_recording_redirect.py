"""``Recorder.redirect_output``: a recorded launch that alone wrote an array writes another
buffer instead of a copy into it -- the same bits now and in every replay -- and nothing is
redirected where a replay could tell (the array read later or written twice, the buffer
touched after the launch, a read-modify-write launch, a different layout, no recording)."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest
from gtensor import testing
from gtensor.backends.kernel_backend import KernelBackend
from gtensor.dtypes import F64
from gtensor.ops.registry import UPDATES
from gtensor.recording import Recorder, replayable
from gtensor.testing import bits_equal

RNG = np.random.default_rng(11)
A, A2, B = (RNG.standard_normal(s) for s in ((5, 3), (5, 3), (3, 4)))


@pytest.fixture
def kb(be):
    """The kernel backend under test (sim in the numpy session: the recorder needs kernels)."""
    return be if isinstance(be, KernelBackend) else testing.require_backend("sim")


def _inputs(kb):
    """A recorder over ``kb``, a (5, 3) and b (3, 4), and a (5, 4) buffer of 7s."""
    rec = Recorder(kb)
    return rec, rec.asarray(A), rec.asarray(B), rec.asarray(np.full((5, 4), 7.0))


def test_the_one_writer_writes_the_buffer_in_every_replay(kb):
    """The matmul that alone wrote c writes dst: dst holds the product now (copied, not
    recorded), and a replay after a's values change writes the new product into dst while c
    keeps the old one."""
    rec, a, b, dst = _inputs(kb)
    with rec.recording() as launches:
        c = rec.matmul(a, b)
        assert rec.redirect_output(c, dst)
    assert len(launches) == 1 and launches[0].kernel.name.startswith("k_matmul")
    assert launches[0].args[2] is dst
    want = rec.to_numpy(kb.matmul(a, b))
    assert bits_equal(rec.to_numpy(dst), want) and bits_equal(rec.to_numpy(c), want)
    kb.write(a, A2)
    replayable(rec, launches)()
    assert bits_equal(rec.to_numpy(dst), rec.to_numpy(kb.matmul(a, b)))
    assert not bits_equal(rec.to_numpy(dst), want)
    assert bits_equal(rec.to_numpy(c), want)


def _refused(rec, launches, src, dst) -> None:
    """redirect_output refuses: the recording and dst are as they were."""
    kept = [(x.kernel, tuple(map(id, x.args))) for x in launches]
    before = rec.to_numpy(dst)
    assert not rec.redirect_output(src, dst)
    assert [(x.kernel, tuple(map(id, x.args))) for x in launches] == kept
    assert bits_equal(rec.to_numpy(dst), before)


CASES = ["read_later", "dst_read_later", "dst_written_later", "dst_read_by_writer",
         "two_writers", "read_modify_write", "shape", "dtype", "strided", "made_elsewhere",
         "writer_reads_src", "partial_writer"]


@pytest.mark.parametrize("case", CASES)
def test_what_a_replay_could_tell_is_refused(kb, case):
    """Each condition alone refuses the redirect (every other one holds)."""
    rec, a, b, dst = _inputs(kb)
    other = {"shape": (4, 5), "dtype": (5, 4), "strided": (5, 8), "made_elsewhere": (5, 3),
             "read_modify_write": (5, 3), "dst_read_by_writer": (5, 3), "partial_writer": (10, 4),
             "writer_reads_src": (5, 3)}
    if case in other:  # every buffer exists before the recording
        dst = rec.asarray(np.full(other[case], 7.0, np.float32 if case == "dtype" else None))
        dst = dst[:, ::2] if case == "strided" else dst
    p, g = rec.asarray(A), rec.asarray(A2)
    scalars = {"scale": rec.asarray(np.array(1.0)), "lr": rec.asarray(np.array(0.5))}
    with rec.recording() as launches:
        if case == "made_elsewhere":  # written before the recording: no writer in it
            src = a
        elif case == "read_modify_write":  # sgd updates p in place: it reads what it writes
            UPDATES["sgd_update"].prepare(rec, {"p": p, "g": g, **scalars}, {}, 0.0, False)()
            src = p
        elif case == "two_writers":
            src = rec.fill((5, 4), 1.0, np.float64)
            rec.matmul(a, b, out=src)  # the fill, then the matmul over it
        elif case == "dst_read_by_writer":
            src = rec.exp(dst)
        elif case == "writer_reads_src":  # the kernel door allows x == y: exp in place
            src = p
            kernel = gtensor.REGISTRY["exp"].kernel_set(F64, cpu=kb.uses_cpu_kernels).only
            rec.launch(kernel, 1, 1, (p, p, p.size))
        elif case == "partial_writer":  # the one launch writes half of src (a view of it)
            src = rec.asarray(np.zeros((10, 4)))
            rec.matmul(a, b, out=src[:5])
        else:
            src = rec.matmul(a, b)
            if case == "read_later":
                rec.exp(src)
            elif case == "dst_read_later":
                rec.exp(dst)
            elif case == "dst_written_later":
                rec.fill((5, 4), 2.0, np.float64, out=dst)
        _refused(rec, launches, src, dst)


def test_not_recording_is_refused(kb):
    """Outside a recording there is nothing to redirect."""
    rec, a, b, dst = _inputs(kb)
    c = rec.matmul(a, b)
    assert not rec.redirect_output(c, dst)
