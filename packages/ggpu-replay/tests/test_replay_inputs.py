"""A captured program's inputs: listed by name (``tp.const(x, name=...)``, cross_entropy's
"labels", else "const<i>"), refreshable by name, and a step that would mix fresh and stale
inputs refused, naming the stale one."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from ggpu_replay import CaptureError, StaleInputError, capture


def _classifier(device: str):
    rng = np.random.default_rng(0)
    tp = g.Tape()
    W = tp.param(rng.normal(0, 0.3, (4, 3)))
    x = tp.const(rng.normal(size=(8, 4)), name="x")
    scale = tp.const(np.full((1, 3), 0.5))  # unnamed
    loss = g.cross_entropy((x @ W) * scale, rng.integers(0, 3, 8))
    prog = capture(tp, loss, backend=device)
    dopt = prog.sgd(lr=0.1)
    dopt.add(W)
    return tp, prog, dopt, x, scale, rng


def _labels(y: np.ndarray) -> np.ndarray:
    """Fresh int class labels for cross_entropy's "labels" input."""
    return np.asarray(y, np.int64)


def test_inputs_are_listed_by_name(device):
    tp, prog, _, x, scale, _ = _classifier(device)
    assert list(prog.inputs) == ["x", f"const{scale.index}", "labels"]
    assert prog.inputs["x"].index == x.index and prog.inputs[f"const{scale.index}"] is not None
    assert tp.name_of(x) == "x" and tp.name_of(scale) is None
    with pytest.raises(CaptureError, match=r"set_input: the program has no input 'y'; its inputs "
                                       r"are \['x', 'const\d+', 'labels'\]"):
        prog.set_input("y", np.zeros((8, 4)))
    with pytest.raises(TypeError, match="const: name is 3"):
        tp.const(np.zeros(2), name=3)


def test_set_input_by_name_equals_by_var(device):
    _, a, da, xa, _, rng = _classifier(device)
    _, b, db, xb, _, _ = _classifier(device)
    X, Y = rng.normal(size=(8, 4)), _labels(rng.integers(0, 3, 8))
    a.set_input(xa, X)
    a.set_input(a.inputs["labels"], Y)
    b.set_input("x", X)
    b.set_input("labels", Y)
    a.step(da)
    b.step(db)
    assert a.loss() == b.loss()


def test_stale_labels_refused_before_anything_runs(device):
    _, prog, dopt, x, _, rng = _classifier(device)
    for _ in range(2):  # both refreshed each step: fine
        prog.set_input("x", rng.normal(size=(8, 4)))
        prog.set_input("labels", _labels(rng.integers(0, 3, 8)))
        prog.step(dopt)
    loss, t = prog.loss(), dopt.t
    prog.set_input(x, rng.normal(size=(8, 4)))  # x only: the labels would be stale
    with pytest.raises(StaleInputError, match=r"step: input\(s\) \['labels'\] were refreshed by "
                                              r"set_input for the previous step but not for "
                                              r"this one, while \['x'\] were"):
        prog.step(dopt)
    assert prog.loss() == loss and dopt.t == t  # nothing ran
    with pytest.raises(StaleInputError, match="forward: input"):
        prog.forward()
    prog.set_input("labels", _labels(rng.integers(0, 3, 8)))
    prog.step(dopt)  # now both are fresh
    assert dopt.t == t + 1


def test_no_refresh_at_all_and_held_inputs_are_fine(device):
    _, prog, dopt, x, scale, rng = _classifier(device)
    prog.step(dopt)
    prog.step(dopt)  # full-batch: nothing refreshed, nothing stale
    prog.set_input(scale, np.full((1, 3), 0.25))
    prog.set_input(x, rng.normal(size=(8, 4)))
    prog.set_input("labels", _labels(rng.integers(0, 3, 8)))
    prog.step(dopt)
    prog.hold_input(scale)  # written once, meant to stay
    prog.hold_input("labels")
    prog.set_input(x, rng.normal(size=(8, 4)))
    prog.step(dopt)
    with pytest.raises(Exception, match="hold_input: node"):
        prog.hold_input(prog.tape.params()[0])


def test_int_labels_are_a_refreshable_input(device):
    """cross_entropy's int64 labels: set_input by name, checked, replayed bitwise."""
    rng = np.random.default_rng(0)
    tp = g.Tape("numpy")
    w = tp.param(rng.normal(size=(3, 4)))
    x = tp.const(rng.normal(size=(5, 3)), name="x")
    loss = g.cross_entropy(x @ w, np.array([0, 1, 2, 3, 1]))
    tp.backward(loss)
    prog = capture(tp, loss, backend=device)
    assert list(prog.inputs) == ["x", "labels"]
    X2, L2 = rng.normal(size=(5, 3)), np.array([3, 3, 0, 1, 2])
    prog.set_input("x", X2)
    prog.set_input("labels", L2)
    prog.forward()
    prog.backward()
    fresh = g.Tape("numpy")
    fw = fresh.param(w.numpy())
    ref = g.cross_entropy(fresh.const(X2) @ fw, L2)
    fresh.backward(ref)
    assert prog.loss() == ref.item()
    assert np.array_equal(prog.grad(w), fresh.grad(fw))
    with pytest.raises(ValueError, match=r"labels.*cross_entropy: labels must lie in \[0, 4\); "
                       r"got \[0, 4\]"):
        prog.set_input("labels", np.array([0, 1, 2, 3, 4]))
    with pytest.raises(TypeError, match="holds int64 ids; got data of dtype float64"):
        prog.set_input("labels", np.array([0.0, 1, 2, 3, 1]))
