"""g.qkv_attention: the packed attention as one fused op, bitwise the composite it is defined by.

The definition is ``scaled_dot_product_attention`` of the heads split from qkv (the composite
of ``gtape.attention``: scores, scale, causal mask, softmax, dropout, value product); the
fused forward and backward kernels must give its bits -- the result and qkv's gradient -- on
every backend, in both dtypes and both inner-product contracts, with dropout and without,
causal and not, at shapes off every block size; and its values must be torch's (float64).
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor.testing import bits_equal, first_difference

# (B, T, H, D): odd T (dropout's words off Philox's 4-word blocks), T past a 32-word window,
# one token, D = 1, several heads and batches
SHAPES = [(2, 5, 3, 4), (1, 33, 2, 3), (1, 1, 1, 1), (2, 8, 1, 1), (1, 6, 4, 5)]


def _data(shape, dtype, seed, special=False):
    b, t, h, d = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, t, 3, h, d)) * np.exp2(rng.integers(-2, 3, (b, t, 3, h, d)))
    if special:  # an infinite score (a NaN row), a zero, a signed zero, a huge value
        flat = x.reshape(-1)
        flat[:4] = [np.inf, 0.0, -0.0, 1e300]
    gy = rng.standard_normal((b, t, h, d))
    with np.errstate(over="ignore"):
        return x.astype(dtype), gy.astype(dtype)


def _run(bname, fused, x, gy, *, causal, p, inner="plain", scale=None):
    """(result (B, T, H, D), qkv's gradient) of the loss sum(result * gy)."""
    b, t, _, h, d = x.shape
    with g.Tape(bname, str(x.dtype), inner=inner) as tp:
        w = tp.param(x.reshape(b, t, 3 * h * d))  # c_attn's output, as a model has it
        key = g.rng.key(1234) if p else None
        if fused:
            y = g.qkv_attention(w.reshape(b, t, 3, h, d), p, causal, scale, key)
        else:
            q, k, v = (z.reshape(b, t, h, d).transpose(1, 2) for z in w.split(h * d, dim=-1))
            y = g.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal,
                                               scale=scale, key=key).transpose(1, 2)
        tp.backward(g.sum(y * tp.const(gy)))
        return tp.backend.to_numpy(tp.value(y)), tp.backend.to_numpy(tp.grad(w)).reshape(x.shape)


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fused_equals_the_composite_bitwise(bname, shape, dtype, inner):
    x, gy = _data(shape, dtype, sum(shape))
    for causal in (True, False):
        for p in (0.0, 0.3):
            want = _run(bname, False, x, gy, causal=causal, p=p, inner=inner)
            got = _run(bname, True, x, gy, causal=causal, p=p, inner=inner)
            for name, w, a in zip(("result", "gradient"), want, got):
                assert bits_equal(w, a), (name, causal, p, first_difference(w, a))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_special_values_and_a_negative_scale_as_the_composite(bname, dtype):
    """inf, +-0 and a huge value among the inputs (NaN rows, overflowing scores), and a
    negative scale (the masked gradients' +0.0 times it is -0.0): the composite's bits."""
    x, gy = _data((2, 5, 2, 3), dtype, 7, special=True)
    for causal, p, scale in ((True, 0.25, -0.75), (False, 0.0, 2.0), (True, 0.0, None)):
        want = _run(bname, False, x, gy, causal=causal, p=p, scale=scale)
        got = _run(bname, True, x, gy, causal=causal, p=p, scale=scale)
        for w, a in zip(want, got):
            assert bits_equal(w, a), (causal, p, scale, first_difference(w, a))


def test_values_are_torchs_float64():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, gy = _data((2, 7, 3, 4), "float64", 3)
    for causal in (True, False):
        y, gx = _run("numpy", True, x, gy, causal=causal, p=0.0)
        t = torch.tensor(x, requires_grad=True)
        q, k, v = (t[:, :, c].transpose(1, 2) for c in range(3))
        ty = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
        (ty * torch.tensor(gy)).sum().backward()
        np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(gx, t.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_double_backward_records_the_composite():
    """create_graph: the first-order gradient is the fused one's bits (the composite's), and
    it differentiates again (the composite's rules) to the composite's second order."""
    x, _ = _data((1, 4, 2, 2), "float64", 5)

    def grads(fused):
        with g.Tape() as tp:
            w = tp.param(x)
            if fused:
                y = g.qkv_attention(w, is_causal=True)
            else:
                q, k, v = (w[:, :, c].transpose(1, 2) for c in range(3))
                y = g.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
            (gw,) = g.grad(g.sum(g.tanh(y)), [w], create_graph=True)
            (hw,) = g.grad(g.sum(gw * gw), [w])
            return gw.numpy(), np.asarray(hw)

    (g1, h1), (g2, h2) = grads(True), grads(False)
    assert bits_equal(g1, g2)
    np.testing.assert_allclose(h1, h2, rtol=1e-13, atol=1e-15)


def test_the_key_is_the_dropout_layers_and_advances():
    """A key Var and a Key give the same mask; two keys give two masks."""
    x, _ = _data((1, 6, 2, 3), "float64", 9)
    with g.Tape() as tp:
        w = tp.const(x)
        k = g.rng.key(5)
        a = g.qkv_attention(w, 0.5, True, key=k).numpy()
        b = g.qkv_attention(w, 0.5, True, key=g.rng.key_input(tp, k)).numpy()
        c = g.qkv_attention(w, 0.5, True, key=g.rng.key(6)).numpy()
    assert bits_equal(a, b) and not bits_equal(a, c)


@pytest.mark.parametrize("call, error, match", [
    (lambda tp, w: g.qkv_attention(tp.param(np.ones((1, 4, 18)))), ValueError,
     r"qkv_attention: qkv has shape \(1, 4, 18\); expected \(B, T, 3, H, D\)"),
    (lambda tp, w: g.qkv_attention(tp.param(np.ones((1, 4, 2, 3, 3)))), ValueError,
     r"expected \(B, T, 3, H, D\)"),
    (lambda tp, w: g.qkv_attention(w, 0.2), ValueError, r"qkv_attention: dropout_p is 0.2 but "
     r"key is None"),
    (lambda tp, w: g.qkv_attention(w, 1.0, key=g.rng.key(1)), ValueError,
     r"qkv_attention: dropout_p is 1.0; expected a probability in \[0, 1\)"),
    (lambda tp, w: g.qkv_attention(w, scale=float("nan")), ValueError,
     r"qkv_attention: scale is nan; expected a finite number"),
    (lambda tp, w: g.qkv_attention(w, 0.1, key=3), TypeError, r"qkv_attention: key must be"),
    (lambda tp, w: g.qkv_attention(w.numpy()), TypeError, r"qkv_attention: qkv is .*; "
     r"expected a Var"),
    (lambda tp, w: g.qkv_attention(w, 0.1, key=g.rng.key_input(g.Tape(), g.rng.key(1))),
     ValueError, r"qkv_attention: key is a Var of another tape"),
])
def test_bad_input_is_refused_and_the_tape_unchanged(call, error, match):
    with g.Tape() as tp:
        w = tp.param(np.ones((1, 4, 3, 2, 3)))
        with pytest.raises(error, match=match):
            call(tp, w)
        assert [n.name for n in tp.nodes()] in (["param"], ["param", "param"])
