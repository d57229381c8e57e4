"""Nothing recorded goes stale: configuration changed through any door (the wrapper or the
gopt optimizer it hands out) reaches the next replayed step; a device optimizer loads its own
state dict; a refused load changes nothing (issue 24)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _program(device: str, init=(3.0, 4.0)):
    tp = g.Tape("numpy")
    w = tp.param(np.array(init))
    x = tp.const(np.array([1.0, 1.0]))
    return tp, w, capture(tp, g.sum(w * w * x), backend=device)


def _tape_run(changes, steps: int = 3, kind: str = "sgd") -> tuple[np.ndarray, list]:
    """The numpy tape's reference: ``changes[k](opt, params)`` before step k."""
    tp = g.Tape("numpy")
    w = tp.param(np.array([3.0, 4.0]))
    u = tp.param(np.array([1.0, -2.0]))
    opt = gopt.SGD(tp, 0.1) if kind == "sgd" else gopt.Adam(tp, 0.1)
    opt.add(w)
    mark = tp.mark()
    norms = []
    for k in range(steps):
        if k in changes:
            changes[k](opt, [w, u])
        tp.backward(g.sum(w * w * u * tp.const(np.array([1.0, 1.0]))))
        opt.step()
        norms.append(opt.last_norm)
        tp.reset_to(mark)
    return np.asarray(w.numpy()), norms


def _device_run(device, changes, steps: int = 3, kind: str = "sgd", whole: bool = False):
    tp = g.Tape("numpy")
    w = tp.param(np.array([3.0, 4.0]))
    u = tp.param(np.array([1.0, -2.0]))
    prog = capture(tp, g.sum(w * w * u * tp.const(np.array([1.0, 1.0]))), backend=device)
    dev = prog.sgd(0.1) if kind == "sgd" else prog.adam(0.1)
    dev.add(w)
    norms = []
    for k in range(steps):
        if k in changes:
            changes[k](dev, [w, u])
        if whole:
            prog.step(dev)
        else:
            prog.forward()
            prog.backward()
            dev.step()
        norms.append(dev.last_norm)
    return prog.value(w), norms


def test_the_issue_snippet_clips(device):
    """``dev.optimizer.set_clip`` after a recorded step: the next step is clipped."""
    tp, w, prog = _program(device)
    dev = prog.sgd(lr=0.1)
    dev.add(w)
    prog.forward()
    prog.backward()
    dev.step()  # recorded without clipping
    dev.optimizer.set_clip(1.0)
    prog.forward()
    prog.backward()
    dev.step()
    _, w2, prog2 = _program(device)
    ref = prog2.sgd(lr=0.1)
    ref.add(w2)
    prog2.forward()
    prog2.backward()
    ref.step()
    ref.set_clip(1.0)
    prog2.forward()
    prog2.backward()
    ref.step()
    got, want = prog.value(w), prog2.value(w2)
    assert bits_equal(got, want), first_difference(want, got)
    assert not bits_equal(got, np.array([1.92, 2.56]))  # the unclipped (stale) result
    assert dev.last_norm == ref.last_norm and dev.last_norm is not None


CHANGES = {
    "set_clip": {1: lambda o, ps: (o.optimizer if hasattr(o, "optimizer") else o).set_clip(1.0)},
    "lr": {1: lambda o, ps: setattr(o.optimizer if hasattr(o, "optimizer") else o, "lr", 0.03)},
    "load": {1: lambda o, ps: (o.optimizer if hasattr(o, "optimizer") else o).load_state_dict(
        {**(o.optimizer if hasattr(o, "optimizer") else o).state_dict(),
         "max_norm": np.array(0.5), "hyper.lr": np.array(0.05)})},
}


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("change", ["set_clip", "lr", "load"])
def test_a_change_through_the_gopt_optimizer_reaches_the_replay(device, change, kind, whole):
    """set_clip, ``lr =`` and load_state_dict on ``dev.optimizer`` (bypassing the wrapper)."""
    want, want_norms = _tape_run(CHANGES[change], kind=kind)
    got, got_norms = _device_run(device, CHANGES[change], kind=kind, whole=whole)
    assert bits_equal(got, want), f"{change}: {first_difference(want, got)}"
    assert got_norms == want_norms


def test_add_through_the_gopt_optimizer_is_refused_after_a_step(device):
    """Adding a parameter after the first step is refused on both doors; before it, the
    registration reaches the recorded step."""
    _, w, prog = _program(device)
    dev = prog.sgd(0.1)
    dev.add(w)
    prog.forward()
    prog.backward()
    dev.step()
    with pytest.raises(RuntimeError, match="already taken"):
        dev.optimizer.add(w)


def test_add_through_the_gopt_optimizer_reaches_the_replay(device):
    """A parameter registered through ``dev.optimizer.add`` after the segment was recorded
    (by a step of another optimizer sharing nothing: here, a recorded step and a load of t=0)."""
    tp = g.Tape("numpy")
    w = tp.param(np.array([3.0, 4.0]))
    u = tp.param(np.array([1.0, -2.0]))
    prog = capture(tp, g.sum(w * w * u), backend=device)
    dev = prog.sgd(0.1)
    dev.add(w)
    start = dev.state_dict()
    prog.forward()
    prog.backward()
    dev.step()  # records the segment over [w]
    dev.load_state_dict(start)  # back to t=0 (and w's start value)
    dev.optimizer.add(u)  # gopt's own door: the segment must follow
    prog.forward()
    prog.backward()
    dev.step()
    ref_tp = g.Tape("numpy")
    rw = ref_tp.param(np.array([3.0, 4.0]))
    ru = ref_tp.param(np.array([1.0, -2.0]))
    ref = gopt.SGD(ref_tp, 0.1)
    ref.add([rw, ru])
    ref_tp.backward(g.sum(rw * rw * ru))
    ref.step()
    for a, b in ((prog.value(w), rw.numpy()), (prog.value(u), ru.numpy())):
        assert bits_equal(a, np.asarray(b)), first_difference(np.asarray(b), a)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_device_optimizer_loads_its_own_state_dict(device, kind):
    _, w, prog = _program(device)
    dev = prog.sgd(0.01) if kind == "sgd" else prog.adam(0.01)
    dev.add(w, alpha=0.1)
    dev.set_clip(2.0)
    prog.forward()
    prog.backward()
    dev.step()
    state = dev.state_dict()
    dev.load_state_dict(state)
    after = dev.state_dict()
    assert sorted(after) == sorted(state)
    for k in state:
        assert _same(after[k], state[k]), k


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_refused_device_load_changes_nothing(device, kind):
    """A state whose parameter entry cannot be taken is refused before anything applies:
    lr, t, clip, alpha, moments and the recorded segment all stay as they were."""
    _, w, prog = _program(device)
    dev = prog.sgd(0.01) if kind == "sgd" else prog.adam(0.01)
    dev.add(w)
    prog.forward()
    prog.backward()
    dev.step()
    before = dev.state_dict()
    bad = {**before, "hyper.lr": np.array(0.5), "max_norm": np.array(1.0),
           "t": np.array(7, np.int64), "alpha": np.array([0.2]),
           "param.0": np.array([1.0, np.nan, 3.0])}
    with pytest.raises(ValueError, match="param.0"):
        dev.load_state_dict(bad)
    assert dev.lr == 0.01 and dev.t == 1 and dev.max_norm is None
    now = dev.state_dict()
    for k in before:
        assert _same(now[k], before[k]), k
    prog.forward()
    prog.backward()
    dev.step()  # and the step still runs the old configuration
    _, w2, prog2 = _program(device)
    ref = prog2.sgd(0.01) if kind == "sgd" else prog2.adam(0.01)
    ref.add(w2)
    for _ in range(2):
        prog2.forward()
        prog2.backward()
        ref.step()
    assert bits_equal(prog.value(w), prog2.value(w2))
