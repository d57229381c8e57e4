"""Resume in a NEW process: a run checkpointed at step k and resumed in another Python process
(parameters, optimizer state, the data order's RNG state, the step counter) logs exactly the
lines of the uninterrupted run from step k+1 on; on the backend under test and for a captured
program."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gverify import read_checkpoint
from vutil import lines

SCRIPT = """
import sys
from gverify.example import Config, train
backend, engine, log, resume = sys.argv[1:5]
kw = dict(checkpoint_every=4, checkpoint_dir=sys.argv[5]) if resume == "-" else {}
train(Config(backend=backend, engine=engine, steps=10), log=log,
      resume=None if resume == "-" else resume, **kw)
"""


def _child(env, *args):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def _check_resume(env, tmp_path, backend, engine, resume_engine=None):
    full, cks = tmp_path / "full.jsonl", tmp_path / "ck"
    _child(env, backend, engine, full, "-", cks)
    for k in (4, 8):
        ck = cks / f"step-{k:08d}"
        assert read_checkpoint(ck).step == k
        part = tmp_path / f"from{k}.jsonl"
        _child(env, backend, resume_engine or engine, part, ck, "-")
        after = [ln for ln in lines(full) if ln[0] > k]
        assert lines(part) == after and len(after) == 10 - k


def test_resume_in_a_new_process_is_bit_identical(bname, tmp_path, child_env):
    _check_resume(child_env, tmp_path, bname, "tape")


def test_resume_of_a_captured_program_is_bit_identical(device, tmp_path, child_env):
    _check_resume(child_env, tmp_path, device, "replay")


def test_a_tape_checkpoint_resumes_as_a_captured_program(device, tmp_path, child_env):
    _check_resume(child_env, tmp_path, device, "tape", resume_engine="replay")


def test_a_resumed_log_appends_to_the_original(bname, tmp_path):
    from gverify.example import Config, train

    log, cks = tmp_path / "run.jsonl", tmp_path / "ck"
    train(Config(backend=bname, steps=10), log=log, checkpoint_every=5, checkpoint_dir=cks)
    want = lines(log)
    train(Config(backend=bname, steps=10), log=log, resume=cks / "step-00000005")
    assert lines(log) == want
    with pytest.raises(ValueError, match="read_log"):
        (tmp_path / "bad.jsonl").write_text("x\n")
        from gverify import RunLog

        RunLog(tmp_path / "bad.jsonl", resume_at=3)
