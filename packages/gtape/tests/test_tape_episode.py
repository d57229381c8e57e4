"""torch habits on the tape: ``with tp.episode()``, ``loss.backward()``, ``w.grad``, and the
error a mark taken before the params gives."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape.episode import EpisodeError
from gtape_testutil import host

X = np.linspace(-1.0, 1.0, 12).reshape(4, 3)


def _loss(w, x):
    return g.sum(g.tanh(x @ w))


def test_episode_marks_on_entry_and_resets_on_exit(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.full((3, 2), 0.5))
        for _ in range(3):
            with tp.episode() as mark:
                assert mark.length == 1
                loss = _loss(w, tp.const(X))
                loss.backward()
                grad = host(tp, w.grad)
            assert len(tp) == 1 and not loss.alive
        ref = g.Tape(bname)
        wr = ref.param(np.full((3, 2), 0.5))
        ref.backward(_loss(wr, ref.const(X)))
        assert grad.tobytes() == host(ref, ref.grad(wr)).tobytes()


def test_episode_resets_when_the_body_raises(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((3, 2)))
        with pytest.raises(ValueError, match="inner dimensions"):
            with tp.episode():
                tp.const(X) @ w
                tp.const(X) @ tp.const(X)
        assert len(tp) == 1 and w.alive


def test_nested_episodes_reset_to_their_own_marks(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        with tp.episode():
            a = w * w
            with tp.episode():
                b = a * w
            assert a.alive and not b.alive and len(tp) == 2
        assert len(tp) == 1


def test_a_param_registered_inside_an_episode_is_an_error(bname):
    with g.Tape(bname) as tp:
        tp.param(np.ones(2))
        with pytest.raises(EpisodeError, match=r"param node\(s\) \[2\] were registered inside"):
            with tp.episode():
                tp.const(np.ones(2))
                tp.param(np.ones(2))
        assert len(tp) == 1  # reset all the same
        ep = tp.episode()
        with ep:
            pass
        with pytest.raises(RuntimeError, match="already open"):
            ep.__enter__()


def test_var_backward_is_tape_backward_bitwise(bname):
    runs = []
    for use_var in (True, False):
        with g.Tape(bname) as tp:
            w = tp.param(np.linspace(-1, 1, 6).reshape(3, 2))
            loss = _loss(w, tp.const(X))
            assert (loss.backward() if use_var else tp.backward(loss)) is None
            runs.append(host(tp, tp.grad(w)).tobytes())
    assert runs[0] == runs[1]


def test_var_grad_is_none_before_backward_and_after_reset(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((3, 2)))
        assert w.grad is None
        mark = tp.mark()
        loss = _loss(w, tp.const(X))
        assert w.grad is None and loss.grad is None
        loss.backward()
        assert host(tp, w.grad).tobytes() == host(tp, tp.grad(w)).tobytes()
        assert host(tp, loss.grad).tolist() == 1.0
        late = tp.param(np.ones(2))  # registered after the loss: no gradient of it yet
        assert late.grad is None
        tp.reset_to(mark)
        assert w.grad is None
        with pytest.raises(g.StaleVarError, match="dropped by reset_to"):
            loss.grad  # noqa: B018


def test_a_mark_before_the_params_names_the_mistake_and_the_fix(bname):
    with g.Tape(bname) as tp:
        mark = tp.mark()  # the mistake: before the params
        w = tp.param(np.ones((3, 2)))
        tp.backward(_loss(w, tp.const(X)))
        tp.reset_to(mark)
        x = tp.const(X)
        with pytest.raises(g.StaleVarError) as err:
            x @ w
        msg = str(err.value)
        assert msg.startswith("matmul: b: the Var is parameter node 0, which reset_to dropped")
        assert "mark was taken before the params" in msg and "tp.episode()" in msg
        with pytest.raises(g.StaleVarError, match="grad: the Var is parameter node 0"):
            tp.grad(w)
        # an intermediate dropped by reset_to keeps the general message
        y = x * 2.0
        tp.reset_to(tp.mark())
        tp.reset_to(mark)
        with pytest.raises(g.StaleVarError, match="dropped by reset_to .its node and buffers"):
            y + 1.0
