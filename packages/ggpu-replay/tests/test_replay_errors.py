"""capture, set_input, sync_params and the device optimizer fail closed, with clear messages."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from ggpu_replay import CaptureError, capture
from gtensor import Op


def _episode(backend: str = "numpy"):
    tp = g.Tape(backend)
    w = tp.param(np.ones((3, 2)))
    x = tp.const(np.ones((4, 3)))
    return tp, w, x, g.mse(x @ w, np.zeros((4, 2)))


def test_non_scalar_loss_is_refused(device):
    tp, w, x, _ = _episode()
    with pytest.raises(CaptureError,
                       match=r"capture: loss \(node \d+\) has shape \(4, 2\); expected a scalar"):
        capture(tp, x @ w, backend=device)


def test_var_of_another_tape_is_refused(device):
    tp, *_ = _episode()
    _, _, _, other_loss = _episode()
    with pytest.raises(CaptureError, match="belongs to another tape"):
        capture(tp, other_loss, backend=device)
    with pytest.raises(TypeError, match="expected a scalar Var"):
        capture(tp, 3.0, backend=device)


def test_closed_tape_is_refused(device):
    tp, _, _, loss = _episode()
    tp.close()
    with pytest.raises(CaptureError, match="the tape is closed"):
        capture(tp, loss, backend=device)


def test_op_without_kernel_is_refused(device):
    nokernel = Op("nokernel", ("x",), (), lambda s, a: (s[0], a), lambda x: x * 2.0,
                  lambda sfx: [], lambda rt, ins, out: None, lambda be, g_, i, o, n: (g_,),
                  "x * 2 without a kernel")
    tp, w, x, _ = _episode()
    loss = g.sum(g.apply(nokernel, (x @ w,)))
    with pytest.raises(CaptureError, match=r"node \d+ \(nokernel\) has no f64 kernel"):
        capture(tp, loss, backend=device)


def test_gradient_through_an_op_without_rule_is_refused(device):
    tp, w, x, _ = _episode()
    h = x @ w
    loss = g.sum(g.apply("adam_p", (h, h, h, tp.const(np.array(0.1))), eps=1e-8))
    with pytest.raises(NotImplementedError, match=r"adam_p \(node \d+\) has no backward rule"):
        capture(tp, loss, backend=device)


def test_numpy_backend_is_not_a_device():
    tp, _, _, loss = _episode()
    with pytest.raises(CaptureError, match="runs no kernels"):
        capture(tp, loss, backend="numpy")


def test_set_input_refusals_leave_the_input_unchanged(device):
    tp, w, x, loss = _episode()
    prog = capture(tp, loss, backend=device)
    before = prog.value(x)
    with pytest.raises(CaptureError, match=r"node 0 \(param\) is not an input of the program"):
        prog.set_input(w, np.ones((3, 2)))
    with pytest.raises(CaptureError, match=r"node 2 \(matmul\) is not an input"):
        prog.set_input(prog.tape.var_at(2), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"has shape \(4, 3\) \(fixed at capture\); got data of "
                                         r"shape \(5, 3\)"):
        prog.set_input(x, np.ones((5, 3)))
    for bad in (np.ones((4, 3), dtype=np.int64), np.ones((4, 3), dtype=complex),
                np.ones((4, 3), dtype=bool)):
        with pytest.raises(TypeError, match="expected float32 or float64"):
            prog.set_input(x, bad)
    other, _, ox, _ = _episode()
    with pytest.raises(CaptureError, match="belongs to another tape"):
        prog.set_input(ox, np.ones((4, 3)))
    with pytest.raises(TypeError, match="expected a Var"):
        prog.set_input(3, np.ones((4, 3)))
    with pytest.raises(CaptureError, match="set_input: the program has no input 'x'; its "
                                           r"inputs are \['const1', 'const3'\]"):
        prog.set_input("x", np.ones((4, 3)))
    assert np.array_equal(prog.value(x), before)


def test_stale_var_is_refused(device):
    tp, w, x, loss = _episode()
    mark = tp.mark()
    prog = capture(tp, loss, backend=device)
    tp.reset_to(mark)
    y = tp.const(np.ones((4, 3)))  # reuses an index of the captured episode
    with pytest.raises(CaptureError, match="not a node of the captured episode"):
        prog.set_input(y, np.ones((4, 3)))
    prog.set_input(x, np.full((4, 3), 2.0))  # the captured Var still names its node


def test_sync_params_refuses_another_tape(device):
    tp, w, x, loss = _episode()
    prog = capture(tp, loss, backend=device)
    other, *_ = _episode()
    with pytest.raises(CaptureError, match="not the tape this program was captured from"):
        prog.sync_params(other)


def test_optimizer_registration_errors(device):
    tp, w, x, loss = _episode()
    prog = capture(tp, loss, backend=device)
    dopt = prog.adam()
    with pytest.raises(ValueError, match="is a 'const' node; expected a parameter"):
        dopt.add(x)
    with pytest.raises(RuntimeError, match="no parameters registered"):
        prog.step(dopt)
    other = capture(tp, loss, backend=device)
    with pytest.raises(TypeError, match="made by this program"):
        other.step(dopt)
    with pytest.raises(ValueError, match="lr"):
        prog.adam(lr=-1.0)
