"""What cannot be emitted is refused, naming the node, op or argument."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gemit import emit_c, emit_cuda
from gtensor.ops.registry import Op


@pytest.fixture
def ep():
    tp = g.Tape()
    w, x = tp.param(np.ones(3)), tp.const(np.arange(3.0))
    yield tp, w, x, g.sum(w * x)
    tp.close()


@pytest.mark.parametrize("emit", [emit_c, emit_cuda])
def test_non_scalar_loss(ep, emit) -> None:
    tp, w, x, _ = ep
    with pytest.raises(ValueError, match=r"shape \(3,\); expected a scalar"):
        emit(tp, w * x, params=[w], inputs=[x])


def test_loss_of_another_tape(ep) -> None:
    tp, w, x, _ = ep
    with g.Tape() as other:
        foreign = g.sum(other.param(np.ones(2)))
        with pytest.raises(ValueError, match="another tape"):
            emit_c(tp, foreign, params=[w], inputs=[x])


def test_param_or_input_of_another_tape(ep) -> None:
    tp, w, x, loss = ep
    with g.Tape() as other:
        v = other.param(np.ones(3))
        with pytest.raises(ValueError, match=r"params\[1\].*another tape"):
            emit_c(tp, loss, params=[w, v], inputs=[x])
        with pytest.raises(ValueError, match=r"inputs\[0\].*another tape"):
            emit_c(tp, loss, params=[w], inputs=[v])


def test_closed_tape() -> None:
    tp = g.Tape()
    w = tp.param(np.ones(2))
    loss = g.sum(w)
    tp.close()
    with pytest.raises(ValueError, match="closed"):
        emit_c(tp, loss, params=[w], inputs=[])


def test_layout_errors(ep) -> None:
    tp, w, x, loss = ep
    with pytest.raises(ValueError, match=r"inputs\[0\] is node \d+ \(mul\); expected a leaf"):
        emit_c(tp, loss, params=[w], inputs=[w * x])
    with pytest.raises(ValueError, match="a const"):
        emit_c(tp, loss, params=[x], inputs=[])
    with pytest.raises(ValueError, match="listed twice"):
        emit_c(tp, loss, params=[w], inputs=[w])
    with pytest.raises(TypeError, match="expected a list of Vars"):
        emit_c(tp, loss, params=w, inputs=[x])
    with pytest.raises(ValueError, match="not a C identifier"):
        emit_c(tp, loss, params=[w], inputs=[x], name="2grad")


def test_op_without_kernel_is_not_implemented() -> None:
    """An op the numpy tape can run but that has no kernel: NotImplementedError naming it."""
    twice = Op("twice_host_only", ("x",), (), lambda shapes, attrs: (shapes[0], attrs),
               lambda x: x + x, lambda sfx: [], lambda rt, ins, out: None,
               lambda be, gr, ins, out, needs: (be.add(gr, gr),), "2x, numpy only")
    with g.Tape() as tp:
        w = tp.param(np.ones(2))
        loss = g.sum(g.apply(twice, [w]))
        with pytest.raises(NotImplementedError, match="node 1 is op 'twice_host_only'"):
            emit_c(tp, loss, params=[w], inputs=[])
