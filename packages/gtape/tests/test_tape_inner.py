"""The tape's inner-product contract (``Tape(..., inner=...)``): every matmul / bmm of the
tape, forward and backward (first and higher order), runs under it; the two contracts give
different bits where they must."""

from __future__ import annotations

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape_testutil import bits_equal


def _data(dtype):
    rng = np.random.default_rng(3)
    return (rng.standard_normal((5, 7)).astype(dtype), rng.standard_normal((7, 3)).astype(dtype),
            rng.standard_normal((2, 4, 5)).astype(dtype))


def _step(backend, dtype, inner):
    x, w, z = _data(dtype)
    with g.Tape(backend, dtype, inner=inner) as tp:
        xv, wv, zv = tp.param(x), tp.param(w), tp.param(z)
        h = g.tanh(g.matmul(xv, wv))
        y = g.bmm(zv, g.reshape(g.concat([xv, xv]), (2, 5, 7)))
        loss = g.add(g.sum(g.mul(h, h)), g.sum(y))
        tp.backward(loss)
        ops = [(n.op.name, n.attrs.get("inner")) for n in tp.nodes()
               if n.op.name in ("matmul", "bmm")]
        be = tp.backend
        return ([be.to_numpy(tp.grad(v)) for v in (xv, wv, zv)],
                be.to_numpy(tp.value(loss)), ops)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_forward_and_backward_follow_the_tape(bname, dtype):
    ref = gtensor.backend("numpy")
    x, w, _ = _data(dtype)
    with g.Tape(bname, dtype, inner="fma") as tp:
        assert tp.inner == "fma" and "inner=fma" in repr(tp)
        xv, wv = tp.param(x), tp.param(w)
        y = g.matmul(xv, wv)
        assert bits_equal(y.numpy(), ref.to_numpy(ref.matmul(x, w, inner="fma")))
        tp.backward(g.sum(y))
        gx = tp.backend.to_numpy(tp.grad(xv))
        ones = np.ones((5, 3), dtype)
        assert bits_equal(gx, ref.to_numpy(ref.matmul(ones, ref.transpose(w), inner="fma")))
    grads, loss, ops = _step(bname, dtype, "fma")
    assert ops == [("matmul", "fma"), ("bmm", "fma")]
    assert g.Tape(bname, dtype).inner == "plain"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_engines_agree_and_contracts_differ(other, dtype):
    for inner in ("plain", "fma"):
        want, got = _step("numpy", dtype, inner), _step(other, dtype, inner)
        assert all(bits_equal(a, b) for a, b in zip(want[0], got[0])), inner
        assert bits_equal(want[1], got[1])
    plain, fused = _step("numpy", dtype, "plain"), _step("numpy", dtype, "fma")
    assert not all(bits_equal(a, b) for a, b in zip(plain[0], fused[0]))


def test_higher_order_gradients_keep_the_contract():
    x, w, _ = _data("float64")
    with g.Tape("numpy", inner="fma") as tp:
        wv = tp.param(w)
        (gw,) = g.grad(g.sum(g.tanh(g.matmul(tp.const(x), wv))), [wv], create_graph=True)
        inners = {n.attrs["inner"] for n in tp.nodes() if n.op.name == "matmul"}
        assert inners == {"fma"} and gw.shape == w.shape


def test_refusals():
    with pytest.raises(ValueError, match=r"Tape: inner is 'fused'; expected one of"):
        g.Tape("numpy", inner="fused")
    with g.Tape("numpy", inner="fma") as tp:
        x = tp.param(np.ones((2, 2)))
        n = len(tp)
        with pytest.raises(ValueError, match=r"matmul: inner is 'plain' but the tape's "
                                             r"contract is 'fma'"):
            g.apply("matmul", (x, x), inner="plain")
        assert len(tp) == n
