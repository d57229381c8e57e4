"""The analysis sees every buffer an in-place optimizer update writes (m, v and p, not just the
first), so hazards on each of them order and separate launches correctly; the grouped hazard search
finds exactly the pairwise hazards."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from ggpu_fuse.analysis import Buffer, analyse, buffer
from ggpu_fuse.planner import dependencies, plan
from gtensor import testing
from gtensor.kernels import Kind
from gtensor.ops.updates import adam_update, sgd_update
from gtensor.recording import Recorder


@pytest.fixture
def rec(device) -> Recorder:
    return Recorder(testing.require_backend(device))


def _arrays(rec, n=7):
    rng = np.random.default_rng(0)
    m, v, p, g = (rec.asarray(rng.standard_normal(n)) for _ in range(4))
    v = rec.asarray(np.abs(rec.to_numpy(v)))
    return m, v, p, g, rec.asarray(np.array(1.0)), rec.asarray(np.array(0.01))


def test_an_update_launch_writes_and_reads_every_state_buffer(rec):
    m, v, p, g, scale, lr_t = _arrays(rec)
    with rec.recording() as launches:
        adam_update(rec, m, v, p, g, scale, lr_t, beta1=0.9, beta2=0.999, eps=1e-8,
                    alpha=1e-3, clip=True)()
    (info,) = [analyse(i, x) for i, x in enumerate(launches)]
    assert info.kind is Kind.UPDATE
    assert info.written == [buffer(m), buffer(v), buffer(p)]
    read = {name: b for name, b in info.reads}
    assert {name: read[name] for name in ("m", "v", "p", "g", "scale", "lr_t")} == {
        "m": buffer(m), "v": buffer(v), "p": buffer(p), "g": buffer(g),
        "scale": buffer(scale), "lr_t": buffer(lr_t)}
    assert info.fusable and info.out_identity and not info.row_local(7)
    assert all(info.aligned(name) for name in ("m", "v", "p", "g"))
    assert not info.aligned("lr_t")  # a 0-d input: read whole


def test_hazards_on_every_written_buffer(rec):
    m, v, p, g, scale, lr_t = _arrays(rec)
    with rec.recording() as launches:
        before = rec.exp(p)  # reads p before the update overwrites it (write after read)
        adam_update(rec, m, v, p, g, scale, lr_t, beta1=0.9, beta2=0.999, eps=1e-8)()
        after_v = rec.exp(v)  # reads v, the update's SECOND write (read after write)
        total = rec.sum(p)  # reads p, its third write, whole
        rec.exp(g, out=v)  # overwrites v (write after write)
    infos = [analyse(i, x) for i, x in enumerate(launches)]
    deps = dependencies(infos)
    assert 0 in deps[1]  # the update follows the read of the old p
    assert 1 in deps[2] and 1 in deps[3] and 1 in deps[4]
    assert 2 in deps[4]  # and the overwrite of v follows its reader
    segments, _ = plan(infos, rows=0)
    order = [i.index for s in segments for i in s.items]
    assert order.index(0) < order.index(1) < order.index(2) < order.index(4)
    assert order.index(1) < order.index(3)
    where = {i.index: s for s in segments for i in s.items}
    # the whole read of p (a reduction: tail) never shares a segment with the update
    assert where[3] is not where[1]
    del before, after_v, total


def test_a_whole_read_keeps_an_update_out_of_its_segment(rec):
    """A launch reading a buffer across elements, then an update writing it: the update may
    not join (another thread of the segment would read the overwritten element)."""
    n = 6
    p = rec.asarray(np.arange(float(n)))
    g = rec.asarray(np.ones(n))
    lr = rec.asarray(np.array(0.5))
    scale = rec.asarray(np.array(1.0))
    with rec.recording() as launches:
        rev = rec.transpose(p.reshape(2, 3))  # a copy reading p out of element order
        sgd_update(rec, p, g, scale, lr)()
    infos = [analyse(i, x) for i, x in enumerate(launches)]
    assert infos[-1].written == [buffer(p)]
    assert 0 in dependencies(infos)[1]
    segments, _ = plan(infos, rows=0)
    where = {i.index: s for s in segments for i in s.items}
    assert not infos[0].aligned("x")  # premise: the copy reads p across elements
    assert where[0] is not where[1]
    del rev


def _pairwise_dependencies(infos) -> list[set[int]]:
    """The hazard definition, launch pair by launch pair (what ``dependencies`` groups)."""
    def writes_into(a, b) -> bool:
        return any(w.overlaps(b) for w in a.written)
    return [{i for i in range(j)
             if (any(writes_into(infos[i], r) for _, r in infos[j].reads)
                 or any(writes_into(infos[i], w) for w in infos[j].written)
                 or any(writes_into(infos[j], r) for _, r in infos[i].reads))}
            for j in range(len(infos))]


@dataclass
class _Accesses:
    """Just what ``dependencies`` reads of an Info: its reads and written buffers."""

    reads: list
    written: list


def test_grouped_dependencies_are_the_pairwise_hazards():
    """Random launches over overlapping views (nested, shifted, empty, shared): the grouped
    search finds exactly the pairwise hazards."""
    rng = np.random.default_rng(5)
    for trial in range(300):
        def buf() -> Buffer:
            addr = int(rng.integers(0, 40)) * 8
            nbytes = int(rng.choice([0, 8, 16, 64, 128]))
            return Buffer(addr, nbytes, (nbytes // 8,), nbytes // 8)
        infos = [_Accesses([("x", buf()) for _ in range(rng.integers(0, 3))],
                           [buf() for _ in range(rng.integers(0, 3))])
                 for _ in range(int(rng.integers(1, 12)))]
        assert dependencies(infos) == _pairwise_dependencies(infos), trial
