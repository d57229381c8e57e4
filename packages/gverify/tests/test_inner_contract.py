"""The inner-product contract is part of a run's identity: digests differ between contracts
(on the same parameter bits), checkpoints refuse a tape of the other contract, run logs of
the two contracts do not compare."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from gverify import CheckpointError, RunLog, compare_logs, digest, load_checkpoint, save_checkpoint
from gverify.runlog import LogError


def _model(bname, inner):
    tp = g.Tape(bname, inner=inner)
    ps = [tp.param(np.random.default_rng(1).standard_normal((2, 3)))]
    opt = gopt.SGD(tp, lr=0.1)
    opt.add(ps)
    return tp, ps, opt


def test_digests_differ_on_the_same_bits(bname):
    (tp, _, opt), (tq, _, oq) = _model(bname, "plain"), _model(bname, "fma")
    assert digest(tp) != digest(tq) and digest(tp, opt) != digest(tq, oq)
    t3, _, o3 = _model(bname, "fma")
    assert digest(tq, oq) == digest(t3, o3)


def test_checkpoint_refuses_the_other_contract(bname, tmp_path):
    tp, ps, opt = _model(bname, "fma")
    d = save_checkpoint(tmp_path / "ck", tp, opt, step=1)
    tq, qs, oq = _model(bname, "plain")
    before = digest(tq, oq)
    with pytest.raises(CheckpointError, match=r"load_checkpoint: the checkpoint holds a run "
                                              r"under the 'fma' inner-product contract; this "
                                              r"tape's is 'plain'"):
        load_checkpoint(d, tq, oq)
    assert digest(tq, oq) == before
    t2, _, o2 = _model(bname, "fma")
    load_checkpoint(d, t2, o2)
    assert digest(t2, o2) == digest(tp, opt)


def test_logs_of_two_contracts_do_not_compare(bname, tmp_path):
    paths = []
    for inner in ("plain", "fma"):
        tp, ps, opt = _model(bname, inner)
        path = tmp_path / f"{inner}.jsonl"
        RunLog(path).record(0, tp, opt, loss=1.0)
        paths.append(path)
    with pytest.raises(LogError, match=r"differ in \['inner'\]"):
        compare_logs(*paths)
