"""faults: bad input refused with a clear error and nothing changed; the public API exists;
the docstring examples run."""

from __future__ import annotations

import doctest

import gopt
import gtape as g
import gverify
import gverify.digests
import gverify.merkle
import gverify.runlog
import gverify.wire
import numpy as np
import pytest
from gverify import digest, faults, ulps


def _tape(bname):
    tp = g.Tape(bname)
    w = tp.param(np.array([[0.5, -1.0], [2.0, 0.25]]))
    c = tp.const(np.ones((2, 2)))
    loss = g.sum(g.tanh(w @ c))
    return tp, w, c, loss


def test_perturb_moves_exactly_ulps(bname):
    tp, w, c, loss = _tape(bname)
    h = tp.node(loss.index - 1)
    before = np.array(tp.backend.to_numpy(tp.value_at(h.index)))
    faults.perturb(tp, h.index, -3, element=1)
    after = np.array(tp.backend.to_numpy(tp.value_at(h.index)))
    assert ulps.compare(before, after) == (1, 3)
    want = before.copy()
    for _ in range(3):
        want.reshape(-1)[1] = np.nextafter(want.reshape(-1)[1], -np.inf)
    assert after.tobytes() == want.tobytes()


def test_bad_input_is_refused_and_changes_nothing(bname):
    tp, w, c, loss = _tape(bname)
    before = [np.array(tp.backend.to_numpy(tp.value_at(i))).tobytes() for i in range(len(tp))]
    with pytest.raises(TypeError, match="perturb: ulps is"):
        faults.perturb(tp, w, 0)
    with pytest.raises(TypeError, match="perturb: ulps is"):
        faults.perturb(tp, w, 1.5)
    with pytest.raises(ValueError, match="perturb: phase is 'sideways'"):
        faults.perturb(tp, w, 1, "sideways")
    with pytest.raises(ValueError, match="node 1 \\(const\\) gets no gradient"):
        faults.perturb(tp, c, 1, "backward")
    with pytest.raises(ValueError, match="phase 'update' moves a parameter"):
        faults.perturb(tp, loss, 1, "update")
    with pytest.raises(ValueError, match="perturb: element is 4"):
        faults.perturb(tp, w, 1, element=4)
    with pytest.raises(IndexError, match="node 99 does not exist"):
        faults.perturb(tp, 99)
    with pytest.raises(TypeError, match="perturb: tp is"):
        faults.perturb(np.zeros(2), 0)
    other = g.Tape(bname)
    with pytest.raises(ValueError, match="not a live Var of this tape"):
        faults.perturb(other, w)
    after = [np.array(tp.backend.to_numpy(tp.value_at(i))).tobytes() for i in range(len(tp))]
    assert after == before
    opt = gopt.Adam(tp)
    opt.add(w)
    d = digest(tp, opt)
    with pytest.raises(ValueError, match="perturb_state: key is 'q.0'"):
        faults.perturb_state(opt, "q.0")
    with pytest.raises(ValueError, match="perturb_state: key is 'kind'"):
        faults.perturb_state(opt, "kind")
    assert digest(tp, opt) == d
    faults.perturb_state(opt, "m.0", 1)
    assert digest(tp, opt) != d


def test_every_public_name_exists_and_the_examples_run():
    for name in gverify.__all__:
        assert hasattr(gverify, name), name
    for mod in (gverify, gverify.digests, gverify.runlog, gverify.merkle, gverify.wire):
        res = doctest.testmod(mod)
        assert res.failed == 0 and res.attempted > 0, mod


def test_flip_bit_flips_one_bit_and_refuses_bad_input(bname):
    tp, w, c, loss = _tape(bname)
    before = np.array(tp.backend.to_numpy(tp.value_at(w.index)))
    faults.flip_bit(tp, w, 52, element=3)
    after = np.array(tp.backend.to_numpy(tp.value_at(w.index)))
    diff = before.view(np.uint64) ^ after.view(np.uint64)
    assert diff.reshape(-1).tolist() == [0, 0, 0, 1 << 52]
    with pytest.raises(ValueError, match="flip_bit: node 1 is a 'const' node"):
        faults.flip_bit(tp, c, 0)
    with pytest.raises(ValueError, match="flip_bit: bit is 64"):
        faults.flip_bit(tp, w, 64)
    with pytest.raises(ValueError, match="flip_bit: element is 4"):
        faults.flip_bit(tp, w, 0, element=4)
    assert np.array(tp.backend.to_numpy(tp.value_at(w.index))).tobytes() == after.tobytes()


def test_drills_are_checked_and_round_trip():
    d = faults.Drill("ulp", 3, op="tanh", phase="backward", ulps=-2)
    assert faults.Drill.from_dict(d.to_dict()) == d
    for kw, match in (({"kind": "melt", "step": 1}, "kind is 'melt'"),
                      ({"kind": "ulp", "step": 0, "op": "tanh"}, "step is 0"),
                      ({"kind": "ulp", "step": 1}, "needs op"),
                      ({"kind": "ulp", "step": 1, "op": "tanh", "phase": "up"}, "phase is 'up'"),
                      ({"kind": "flip", "step": 1, "bit": -1}, "bit is -1"),
                      ({"kind": "flip", "step": 1, "node": True}, "node is True")):
        with pytest.raises(ValueError, match=match):
            faults.Drill(**kw)
    with pytest.raises(TypeError, match="ulps is"):
        faults.Drill("ulp", 1, op="tanh", ulps=0)
    with pytest.raises(ValueError, match="is not a drill"):
        faults.Drill.from_dict({"kind": "ulp", "step": 1, "evil": 1})
