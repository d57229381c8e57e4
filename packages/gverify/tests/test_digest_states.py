"""gverify's digest covers a tape's states (BatchNorm's running statistics): it changes when
only a state changes, and a captured program's digest equals the tape's after the same steps
(ggpu-replay's BatchNorm model, read from its test case file)."""

from __future__ import annotations

import runpy
from pathlib import Path

import gtape as g
from ggpu_replay import capture
from gverify import digest

BN = runpy.run_path(str(Path(__file__).resolve().parents[2] / "ggpu-replay" / "tests"
                        / "bn_case.py"))


def test_digest_covers_the_running_statistics(device):
    tp = g.Tape()
    model = BN["bn_model"](tp)
    mark = tp.mark()
    d0 = digest(tp)
    x, y = BN["bn_batches"](1)[0]
    with tp.no_grad():
        model(tp.const(x))  # a training-mode forward: only the states move
    assert digest(tp) != d0  # the pending update is the state's current value
    tp.reset_to(mark)
    d1 = digest(tp)
    assert d1 != d0
    loss = g.cross_entropy(model(tp.const(x)), y)
    prog = capture(tp, loss, backend=device)
    assert digest(prog) == d1  # the capture's own run does not move them
    prog.forward()
    prog.backward()
    assert digest(prog) != d1
