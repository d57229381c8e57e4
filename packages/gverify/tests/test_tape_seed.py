"""The tape's seed (``Tape(seed=...)``, where the modules' default keys come from) is part of a
run's identity: digests of the same parameter bits differ between seeds (seed 0 hashes as
before seeds existed), checkpoints refuse a tape of another seed (nothing changed), run logs of
two seeds do not compare."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from gverify import CheckpointError, RunLog, compare_logs, digest, load_checkpoint, save_checkpoint
from gverify.runlog import LogError, read_log

BIG = 2 ** 100 + 7  # beyond uint64: stored as decimal text


def _run(bname, seed):
    tp = g.Tape(bname, seed=seed)
    w = tp.param(np.arange(6.0).reshape(2, 3))  # the same bits for every seed
    opt = gopt.SGD(tp, lr=0.1)
    opt.add([w])
    return tp, opt


def test_digests_differ_between_seeds_on_the_same_bits(bname):
    runs = {s: _run(bname, s) for s in (0, 1, BIG)}
    got = {s: digest(tp, opt) for s, (tp, opt) in runs.items()}
    assert len(set(got.values())) == 3
    assert digest(*_run(bname, BIG)) == got[BIG]
    # seed 0 is the default: no entry, so a run made before seeds existed hashes the same
    tp = g.Tape(bname)
    w = tp.param(np.arange(6.0).reshape(2, 3))
    opt = gopt.SGD(tp, lr=0.1)
    opt.add([w])
    assert digest(tp, opt) == got[0]


def test_checkpoint_refuses_another_seed(bname, tmp_path):
    tp, opt = _run(bname, BIG)
    d = save_checkpoint(tmp_path / "ck", tp, opt, step=1)
    for other in (0, 1):
        tq, oq = _run(bname, other)
        before = digest(tq, oq)
        with pytest.raises(CheckpointError, match=f"load_checkpoint: the checkpoint holds a "
                                                  f"run of a tape with seed {BIG}; this tape's "
                                                  f"seed is {other}"):
            load_checkpoint(d, tq, oq)
        assert digest(tq, oq) == before
    t2, o2 = _run(bname, BIG)
    load_checkpoint(d, t2, o2)
    assert digest(t2, o2) == digest(tp, opt)


def test_logs_of_two_seeds_do_not_compare(bname, tmp_path):
    paths = []
    for seed in (0, 3):
        tp, opt = _run(bname, seed)
        path = tmp_path / f"{seed}.jsonl"
        RunLog(path).record(0, tp, opt, loss=1.0)
        paths.append(path)
    assert "seed" not in read_log(paths[0])[0] and read_log(paths[1])[0]["seed"] == "3"
    with pytest.raises(LogError, match=r"differ in \['seed'\]: \['0'\] vs \['3'\]"):
        compare_logs(*paths)
