"""mark / reset_to: the next episode is bitwise identical and reuses the same buffers."""

from __future__ import annotations

import gtape as g
import numpy as np
from gtape_testutil import address, bits_equal, grads, host, values


def _episode(tp: g.Tape, w1, b1, w2, x: np.ndarray, t: np.ndarray) -> g.Var:
    h = g.relu(x @ w1 + b1)
    return g.mse(g.softmax(h @ w2, axis=-1), t)


def _snapshot(tp: g.Tape) -> tuple[list, list]:
    return ([host(tp, v) for v in values(tp)],
            [None if gr is None else host(tp, gr) for gr in grads(tp)])


def test_episode_after_reset_is_bitwise_identical_and_reuses_buffers(bname):
    rng = np.random.default_rng(3)
    x, t = rng.normal(size=(6, 4)), rng.uniform(size=(6, 3))
    with g.Tape(bname) as tp:
        w1 = tp.param(rng.normal(size=(4, 5)))
        b1 = tp.param(rng.normal(size=5))
        w2 = tp.param(rng.normal(size=(5, 3)))
        mark = tp.mark()
        grad_bufs = [address(tp.grad_at(p.index)) for p in tp.params()]
        loss = _episode(tp, w1, b1, w2, x, t)
        tp.backward(loss)
        vals1, grads1 = _snapshot(tp)
        op_bufs = {i: address(tp.value_at(i)) for i, n in enumerate(tp.nodes())}
        grad_homes = [address(a) for a in grads(tp) if a is not None]
        tp.reset_to(mark)
        assert len(tp) == 3
        assert all(host(tp, tp.grad(p)).tolist() == np.zeros(tp.node(p).shape).tolist()
                   for p in tp.params())
        for _ in range(2):
            loss = _episode(tp, w1, b1, w2, x, t)
            tp.backward(loss)
            vals2, grads2 = _snapshot(tp)
            assert len(vals2) == len(vals1)
            assert all(bits_equal(a, b) for a, b in zip(vals1, vals2))
            assert all((a is None and b is None) or bits_equal(a, b)
                       for a, b in zip(grads1, grads2))
            # every node (consts too) wrote into the very same buffer, every gradient too
            assert all(address(tp.value_at(i)) == buf for i, buf in op_bufs.items())
            assert all(address(tp.grad_at(p.index)) == buf
                       for p, buf in zip(tp.params(), grad_bufs))
            assert [address(a) for a in grads(tp) if a is not None] == grad_homes
            tp.reset_to(mark)


def test_minibatch_training_loop(bname):
    """The README pattern: params survive, episodes don't; SGD via set_value."""
    rng = np.random.default_rng(4)
    xs, true_w = rng.normal(size=(40, 3)), np.array([[1.0], [-2.0], [0.5]])
    ys = xs @ true_w
    with g.Tape(bname) as tp:
        w = tp.param(np.zeros((3, 1)))
        mark = tp.mark()
        be = tp.backend
        losses = []
        for _epoch in range(30):
            for k in range(0, 40, 10):
                loss = g.mse(tp.const(xs[k:k + 10]) @ w, ys[k:k + 10])
                tp.backward(loss)
                losses.append(float(host(tp, tp.value(loss))))
                step = be.muls(tp.grad(w), -0.1)
                tp.set_value(w, be.add(tp.value(w), step))
                tp.reset_to(mark)
        assert losses[-1] < 1e-6 * losses[0]
        assert np.allclose(host(tp, tp.value(w)), true_w, atol=1e-4)
