"""Silent traps made loud: stale forwards, losses no parameter reaches, episodes piling up,
and scalars negated in their own (unsigned) dtype."""

from __future__ import annotations

import warnings

import gtape as g
import numpy as np
import pytest
from gtape_testutil import host


def test_backward_after_the_forward_params_changed_is_refused(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, 2.0]))
        loss = g.sum(w * w)
        tp.set_value(w, [3.0, 4.0])
        with pytest.raises(RuntimeError, match=r"parameter node 0 was overwritten .* after "
                                               r"node 1 \(mul\) used it"):
            tp.backward(loss)
        assert tp.grad_at(1) is None  # nothing was computed
        mark = tp.mark()
        loss = g.sum(w * w)  # recorded after the update: fine
        tp.backward(loss)
        assert host(tp, tp.grad(w)).tolist() == [6.0, 8.0]
        tp.reset_to(mark)


def test_updates_before_the_episode_are_fine(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, 2.0]))
        mark = tp.mark()
        for k in range(3):
            tp.backward(g.sum(w * w))
            tp.set_value(w, [1.0 + k, 2.0])
            tp.reset_to(mark)
        assert tp.backward_count == 3


def test_a_loss_no_parameter_reaches_is_refused(bname):
    with g.Tape(bname) as tp:
        tp.param(np.ones(2))
        c = tp.const(np.ones(2))
        loss = g.sum(c * c)
        with pytest.raises(ValueError, match=r"no parameter reaches the loss \(node \d+, sum\)"):
            tp.backward(loss)
        assert tp.backward_count == 0


def test_tape_growth_without_reset_warns_once(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        with pytest.warns(g.TapeGrowthWarning, match=r"without reset_to.*tp.reset_to\(mark\)"):
            for _ in range(g.tape.GROWTH_WARNING_AFTER):
                tp.backward(g.sum(w * w))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tp.backward(g.sum(w * w))  # once per tape


def test_mark_reset_loop_does_not_warn(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        mark = tp.mark()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(3 * g.tape.GROWTH_WARNING_AFTER):
                tp.backward(g.sum(w * w))
                tp.reset_to(mark)
            loss = g.sum(w * w)
            for _ in range(3 * g.tape.GROWTH_WARNING_AFTER):  # one episode, many backwards
                tp.backward(loss)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_scalars_are_converted_before_arithmetic(bname, dtype):
    with g.Tape(bname, dtype) as tp:
        w = tp.param(np.array([10.0, 20.0]))
        assert host(tp, tp.value(w - np.uint8(5))).tolist() == [5.0, 15.0]
        assert host(tp, tp.value(w - np.int8(-128))).tolist() == [138.0, 148.0]
        assert host(tp, tp.value(np.uint16(3) - w)).tolist() == [-7.0, -17.0]
        assert host(tp, tp.value(w * np.uint8(2))).tolist() == [20.0, 40.0]
        big = host(tp, tp.value(g.add(w, 2**64)))
        assert big.tolist() == [float(np.asarray(2.0**64, dtype)) + 0.0] * 2
