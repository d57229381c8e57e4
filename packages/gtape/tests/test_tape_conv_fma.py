"""conv2d under the tape's fma contract: every conv node (forward; both gradient ops where a
higher-order gradient records them) carries ``inner="fma"``, the backward runs the fma ops, a
small CNN trains with bitwise equal gradients on every engine, its gradients (first and second
order) match central differences, and the contracts give different bits."""

from __future__ import annotations

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape_testutil import bits_equal, central_fd, host, rel_err

CONV_OPS = ("conv2d", "conv2d_grad_input", "conv2d_grad_weight")


def _params(dtype):
    rng = np.random.default_rng(21)
    return ([rng.normal(0, 0.4, (3, 2, 3, 3)).astype(dtype), rng.normal(0, 0.1, 3).astype(dtype),
             rng.normal(0, 0.4, (2, 3, 2, 2)).astype(dtype)],
            rng.normal(size=(4, 2, 7, 6)).astype(dtype),
            rng.normal(size=(4, 2, 4, 1)).astype(dtype))


def _loss(x, w1, b1, w2, target):
    h = g.tanh(g.conv2d(x, w1, b1, stride=1, padding=1))
    h = g.max_pool2d(h, 2)
    y = g.conv2d(h, w2, stride=(1, 2), padding=(1, 0))  # (4, 2, 4, 1)
    d = y - target
    return g.mean(d * d)


def _train(backend, dtype, inner, steps=6, lr=0.2):
    """SGD steps of the CNN: per step (loss, grads); the update on the host (numpy)."""
    params, x, target = _params(dtype)
    trace = []
    for _ in range(steps):
        with g.Tape(backend, dtype, inner=inner) as tp:
            ps = [tp.param(p) for p in params]
            loss = _loss(tp.const(x), ps[0], ps[1], ps[2], tp.const(target))
            tp.backward(loss)
            grads = [host(tp, tp.grad(p)) for p in ps]
            inners = {n.attrs.get("inner") for n in tp.nodes() if n.op.name in CONV_OPS}
            trace.append((host(tp, tp.value(loss)), grads, inners))
        params = [(p - np.asarray(lr, dtype) * gr).astype(dtype) for p, gr in zip(params, grads)]
    return trace


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_conv_nodes_follow_the_tape(bname, dtype):
    ref = gtensor.backend("numpy")
    params, x, _ = _params(dtype)
    with g.Tape(bname, dtype, inner="fma") as tp:
        w = tp.param(params[0])
        y = g.conv2d(tp.const(x), w, stride=2, padding=1)
        assert bits_equal(y.numpy(), ref.to_numpy(ref.conv2d(x, params[0], 2, 1, inner="fma")))
        assert [n.attrs["inner"] for n in tp.nodes() if n.op.name in CONV_OPS] == ["fma"]
        tp.backward(g.sum(y * y))
        # the backward's weight gradient is the fma contract's op (and not the plain one's)
        g2 = ref.muls(ref.asarray(host(tp, tp.value(y))), 2.0)
        want = ref.to_numpy(ref.conv2d_grad_weight(g2, x, 2, 1, (3, 3), inner="fma"))
        plain = ref.to_numpy(ref.conv2d_grad_weight(g2, x, 2, 1, (3, 3)))
        assert bits_equal(host(tp, tp.grad(w)), want) and not bits_equal(want, plain)
        n = len(tp)
        with pytest.raises(ValueError, match=r"conv2d: inner is 'plain' but the tape's "
                                             r"contract is 'fma'"):
            g.apply("conv2d", (y, w), inner="plain")
        assert len(tp) == n


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cnn_trains_bitwise_equal_on_every_engine(other, dtype):
    """Six SGD steps under fma: every loss and gradient bitwise numpy's; plain differs."""
    want, got = _train("numpy", dtype, "fma"), _train(other, dtype, "fma")
    for step, (a, b) in enumerate(zip(want, got)):
        assert bits_equal(a[0], b[0]), f"step {step} loss"
        for k, (ga, gb) in enumerate(zip(a[1], b[1])):
            assert bits_equal(ga, gb), f"step {step} grad {k}"
        assert a[2] == b[2] == {"fma"}
    assert want[-1][0] < 0.9 * want[0][0]  # it trained
    plain = _train("numpy", dtype, "plain", steps=1)
    assert plain[0][2] == {"plain"}
    assert not all(bits_equal(a, b) for a, b in zip(plain[0][1], want[0][1]))


def test_fma_gradients_match_central_differences(bname):
    params, x, target = _params("float64")
    with g.Tape(bname, inner="fma") as tp:
        ps = [tp.param(p) for p in params]
        tp.backward(_loss(tp.const(x), *ps, tp.const(target)))
        grads = [host(tp, tp.grad(p)) for p in ps]
    with g.Tape(bname, inner="fma") as ft:
        start = ft.mark()

        def f(vals):
            ft.reset_to(start)
            return float(host(ft, ft.value(_loss(ft.const(x), *map(ft.const, vals),
                                                 ft.const(target)))))

        for k in range(len(params)):
            err = rel_err(grads[k], central_fd(f, params, k))
            assert err < 1e-6, f"param {k}: analytic vs central differences differ by {err:.3e}"


def test_double_backward_keeps_the_contract(bname):
    """A gradient penalty through both conv gradient ops: every conv node of every order is
    fma, and the second-order gradient matches central differences of the first."""
    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(1, 2, 5, 4)), rng.normal(0, 0.5, (2, 2, 3, 3))

    def penalty(tp, xv, wv):
        y = g.tanh(g.conv2d(xv, wv, stride=(2, 1), padding=1))
        gx, gw = g.grad(g.sum(y * y), [xv, wv], create_graph=True)
        return g.sum(gx * gx) + g.sum(gw * gw)

    with g.Tape(bname, inner="fma") as tp:
        xv, wv = tp.param(x), tp.param(w)
        tp.backward(penalty(tp, xv, wv))
        got = [host(tp, tp.grad(v)) for v in (xv, wv)]
        inners = {(n.op.name, n.attrs["inner"]) for n in tp.nodes() if n.op.name in CONV_OPS}
        assert inners == {(op, "fma") for op in CONV_OPS}

    def f(vals):
        with g.Tape(bname, inner="fma") as ft:
            return float(host(ft, ft.value(penalty(ft, ft.param(vals[0]), ft.param(vals[1])))))

    for k in range(2):
        err = rel_err(got[k], central_fd(f, [x, w], k))
        assert err < 1e-5, f"input {k}: second order vs central differences: {err:.3e}"
