"""RunLog and compare_logs: equal runs compare equal across engines, a drill is found at its
step, and bad logs (another run shape, truncated or damaged lines) are errors, never verdicts."""

from __future__ import annotations

import json
from dataclasses import replace

import gopt
import gtape as g
import numpy as np
import pytest
from gverify import LogError, RunLog, compare_logs, read_log
from gverify.example import Config, train
from vutil import Probe, lines


@pytest.fixture(scope="module")
def ref_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    train(Config(), log=path)
    return path


def test_a_run_logs_the_same_lines_on_every_backend(bname, ref_log, tmp_path):
    train(Config(backend=bname), log=tmp_path / "b.jsonl")
    assert lines(tmp_path / "b.jsonl") == lines(ref_log)
    assert compare_logs(ref_log, tmp_path / "b.jsonl") is None
    header, rows = read_log(ref_log)
    assert header["dtype"] == "float64" and header["optimizer"] == "adam"
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert all(r["loss_bits"].startswith("0x") and len(r["digest"]) == 64 for r in rows)
    x = rows[0]["loss"]
    assert np.float64(x).view(np.uint64) == int(rows[0]["loss_bits"], 16)


def test_a_replayed_run_logs_the_same_lines(device, ref_log, tmp_path):
    train(Config(backend=device, engine="replay"), log=tmp_path / "r.jsonl")
    assert lines(tmp_path / "r.jsonl") == lines(ref_log)


@pytest.mark.parametrize("k", [1, 6, 12])
def test_the_first_differing_step_is_the_drilled_one(bname, ref_log, tmp_path, k):
    train(Config(backend=bname), log=tmp_path / "d.jsonl", probe=Probe(k, node=8, phase="backward"))
    d = compare_logs(ref_log, tmp_path / "d.jsonl")
    assert d is not None and d.step == k and d.digest_a != d.digest_b
    ref = dict((s, dg) for s, _, dg in lines(ref_log))
    assert d.digest_a == ref[k]


def test_every_and_common_steps(tmp_path, ref_log):
    train(Config(), log=tmp_path / "e.jsonl")
    p = tmp_path / "every3.jsonl"
    tp = g.Tape()
    w = tp.param(np.ones(2))
    opt = gopt.SGD(tp, lr=0.1)
    opt.add(w)
    with RunLog(p, every=3) as log:
        out = []
        for step in range(1, 8):
            tp.backward(g.sum(w * w))
            opt.step()
            out.append(log.record(step, tp, opt, loss=1.5))
    assert [o is not None for o in out] == [False, False, True, False, False, True, False]
    assert [r["step"] for r in read_log(p)[1]] == [3, 6]
    with pytest.raises(ValueError, match="RunLog.record: step 2 after step 7"):
        log.record(2, tp, opt)


def test_logs_of_another_run_shape_are_refused(bname, ref_log, tmp_path):
    train(Config(hidden=6), log=tmp_path / "h.jsonl")
    with pytest.raises(LogError, match="different run shapes.*params"):
        compare_logs(ref_log, tmp_path / "h.jsonl")
    train(replace(Config(), dtype="float32"), log=tmp_path / "f.jsonl")
    with pytest.raises(LogError, match="different run shapes.*dtype"):
        compare_logs(ref_log, tmp_path / "f.jsonl")


def test_truncated_and_damaged_logs_are_errors_not_verdicts(ref_log, tmp_path):
    text = ref_log.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[:-20])  # a crash mid-line
    with pytest.raises(LogError, match=r"cut.jsonl:13: the last line is truncated"):
        compare_logs(ref_log, cut)
    rows = text.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows[:4] + [rows[4][:30]] + rows[5:]) + "\n")
    with pytest.raises(LogError, match=r"bad.jsonl:5 is not a JSON line"):
        compare_logs(bad, ref_log)
    nodigest = tmp_path / "nd.jsonl"
    row = json.loads(rows[2])
    row["digest"] = "abc"
    nodigest.write_text("\n".join(rows[:2] + [json.dumps(row)] + rows[3:]) + "\n")
    with pytest.raises(LogError, match=r"nd.jsonl:3 is not a step line"):
        compare_logs(nodigest, ref_log)
    swapped = tmp_path / "sw.jsonl"
    swapped.write_text("\n".join([rows[0], rows[2], rows[1]]) + "\n")
    with pytest.raises(LogError, match="expected increasing steps"):
        compare_logs(swapped, ref_log)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(LogError, match="is empty"):
        compare_logs(tmp_path / "empty.jsonl", ref_log)
    (tmp_path / "nohead.jsonl").write_text("\n".join(rows[1:]) + "\n")
    with pytest.raises(LogError, match="is not a gverify-runlog-v1 header"):
        compare_logs(tmp_path / "nohead.jsonl", ref_log)
    only_head = tmp_path / "head.jsonl"
    only_head.write_text(rows[0] + "\n")
    with pytest.raises(LogError, match="no step in common"):
        compare_logs(only_head, ref_log)
    with pytest.raises(FileNotFoundError):
        compare_logs(tmp_path / "missing.jsonl", ref_log)


def test_runlog_refuses_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="RunLog: every is"):
        RunLog(tmp_path / "x.jsonl", every=0)
    with pytest.raises(ValueError, match="checkpoint_every=2 needs checkpoint_dir"):
        RunLog(tmp_path / "x.jsonl", checkpoint_every=2)
    tp = g.Tape()
    tp.param(np.ones(2))
    log = RunLog(tmp_path / "x.jsonl")
    with pytest.raises(TypeError, match="RunLog.record: loss is"):
        log.record(1, tp, None, loss=np.ones(3))
    with pytest.raises(TypeError, match="RunLog.record: step is"):
        log.record(-1, tp)
    assert not (tmp_path / "x.jsonl").exists()
