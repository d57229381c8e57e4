"""Bad input raises errors that name the call, the argument, what came and what is expected."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam


@pytest.fixture
def tp(bname):
    return g.Tape(bname)


def test_bad_tape():
    with pytest.raises(TypeError, match="Adam: params is an object; expected .*gtape.Tape"):
        Adam(object())
    closed = g.Tape()
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        SGD(closed, lr=0.1)


@pytest.mark.parametrize("lr", [-1e-3, float("nan"), float("inf")])
def test_bad_lr_values(tp, lr):
    with pytest.raises(ValueError, match="lr is .*expected a finite real number >= 0"):
        SGD(tp, lr=lr)


@pytest.mark.parametrize("lr", ["0.1", None, True, np.array([0.1])])
def test_bad_lr_types(tp, lr):
    with pytest.raises(TypeError, match="lr is"):
        Adam(tp, lr=lr)


@pytest.mark.parametrize("betas,match", [
    ((1.0, 0.999), r"betas\[0\]"), ((0.9, -0.1), r"betas\[1\]"), ((0.9,), "pair"), (0.9, "pair")])
def test_bad_betas(tp, betas, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Adam(tp, betas=betas)


def test_bad_eps(tp):
    with pytest.raises(ValueError, match="eps is -1.0"):
        Adam(tp, eps=-1.0)


def test_add_rejects_non_params_and_foreign_vars(tp, bname):
    w = tp.param(np.ones((2, 2)))
    c = tp.const(np.ones((2, 2)))
    opt = Adam(tp)
    with pytest.raises(ValueError, match="'const' node; expected a parameter"):
        opt.add(c)
    with pytest.raises(ValueError, match="'mul' node"):
        opt.add(w * w)
    with pytest.raises(TypeError, match="param is a plain numpy.ndarray"):
        opt.add(np.ones(2))
    other = g.Tape(bname)
    with pytest.raises(ValueError, match="belongs to another tape"):
        opt.add(other.param(np.ones(2)))
    with pytest.raises(ValueError, match="alpha is -0.1"):
        opt.add(w, alpha=-0.1)
    opt.add(w)
    with pytest.raises(ValueError, match="already registered"):
        opt.add(w)


def test_add_after_step_and_step_without_params(tp):
    opt = SGD(tp, lr=0.1)
    with pytest.raises(RuntimeError, match="no parameters registered"):
        opt.step()
    w = tp.param(np.ones(2))
    opt.add(w)
    tp.backward(g.sum(w * w))
    opt.step()
    with pytest.raises(RuntimeError, match="before the first step"):
        opt.add(tp.param(np.ones(2)))


def test_step_without_a_new_backward_is_refused(tp):
    """A second step on the same gradients (or a first one with none) is a clear error."""
    w = tp.param(np.ones(2))
    opt = SGD(tp, lr=0.1)
    opt.add(w)
    with pytest.raises(RuntimeError, match="no backward since the last step"):
        opt.step()
    assert opt.t == 0
    mark = tp.mark()
    tp.backward(g.sum(w * w))
    opt.step()
    tp.reset_to(mark)
    before = np.array(tp.backend.to_numpy(tp.value(w)))
    with pytest.raises(RuntimeError, match="gradients are stale"):
        opt.step()
    assert opt.t == 1 and np.array_equal(tp.backend.to_numpy(tp.value(w)), before)
    tp.backward(g.sum(w * w))
    opt.step()
    assert opt.t == 2


def test_stale_param(tp):
    mark = tp.mark()
    w = tp.param(np.ones(2))
    opt = SGD(tp, lr=0.1)
    opt.add(w)
    tp.reset_to(mark)
    with pytest.raises(g.StaleVarError, match="SGD.step: param of node 0 was dropped"):
        opt.step()


@pytest.mark.parametrize("m", [0.0, -1.0, float("inf")])
def test_bad_clip(tp, m):
    with pytest.raises(ValueError, match="max_norm is .*expected a finite real number > 0"):
        SGD(tp, lr=0.1).set_clip(m)


def test_clip_can_be_turned_off(tp):
    opt = SGD(tp, lr=0.1)
    opt.set_clip(1.0)
    opt.set_clip(None)
    assert opt.max_norm is None and "clip" not in repr(opt)


def test_opt_add_takes_a_list(bname):
    with g.Tape(bname) as tp:
        mlp = g.nn.MLP(tp, [2, 4, 1])
        opt = Adam(tp)
        added = opt.add(tp.params())
        assert [p.index for p in added] == [p.index for p in tp.params()]
        assert [p.index for p in opt.params] == [p.index for p in mlp.params]
        with pytest.raises(ValueError, match="already registered"):
            opt.add(mlp.layers[0].params)
        opt2 = Adam(tp)
        with pytest.raises(ValueError, match="names a parameter twice"):
            opt2.add([mlp.params[0], mlp.params[0]])
        assert opt2.params == []  # all-or-nothing


def test_a_step_after_a_create_graph_backward(bname):
    """tp.backward(loss, create_graph=True) fills the gradient buffers: an optimizer steps."""
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, -2.0]))
        opt = SGD(tp, lr=0.5)
        opt.add(tp.params())
        with tp.episode():
            g.sum(w * w * w).backward(create_graph=True)
            opt.step()
        assert w.numpy().tolist() == [1.0 - 1.5, -2.0 - 6.0]


def test_an_object_without_the_store_protocol_is_refused():
    """gopt takes a gtape.ParamStore: an object lacking one member is refused, naming it."""
    import gopt
    import gtape

    class Partial:  # a store without param_buffer / note_updated
        backend, dtype, backward_count = None, np.float64, 0

        def check_param(self, where, p): ...
        def value(self, p): ...
        def grad(self, p): ...
        def set_value(self, p, x): ...

    assert gtape.params.missing_members(Partial()) == ["param_buffer", "note_updated"]
    with g.Tape() as tp:
        w = tp.param(np.ones(2))
        with pytest.raises(TypeError, match="expected a gtape.Tape .*ParamStore"):
            gopt.SGD([w], store=Partial(), lr=0.1)
