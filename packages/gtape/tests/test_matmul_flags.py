"""matmul / bmm with ta / tb on a tape: forward, backward and double backward (HVP, gradient
penalty) bitwise those of the explicit transpose-then-matmul composition, both contracts."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host

FLAGS = [(False, False), (True, False), (False, True), (True, True)]


def _op_of(op: str, x):
    """op(x): the operand's last two axes swapped on the tape (an exact copy)."""
    return g.transpose(x) if op == "matmul" else g.transpose(x, (0, 2, 1))


def _run(bname: str, op: str, inner: str, xs, C, V, ta: bool, tb: bool, flagged: bool):
    """(value, first-order grads, HVP, gradient-penalty grads) of sum(tanh(op(a)@op(b)) * C)."""
    fn = getattr(g, op)
    out = []
    with g.Tape(bname, inner=inner) as tp:
        pa, pb = (tp.param(x) for x in xs)
        with tp.episode():
            if flagged:
                y = fn(pa, pb, ta=ta, tb=tb)
            else:
                y = fn(_op_of(op, pa) if ta else pa, _op_of(op, pb) if tb else pb)
            out.append([y.numpy()])
            loss = g.sum(g.tanh(y) * C)
            gs = g.grad(loss, [pa, pb], create_graph=True)
            out.append([gv.numpy() for gv in gs])
            dot = g.sum(gs[0] * V[0]) + g.sum(gs[1] * V[1])
            out.append([host(tp, a) for a in g.grad(dot, [pa, pb])])
            (loss + g.sum(gs[0] * gs[0]) + g.sum(gs[1] * gs[1])).backward()
            out.append([host(tp, pa.grad), host(tp, pb.grad)])
    return out


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("op, shapes", [("matmul", ((5, 7), (7, 3))),
                                        ("bmm", ((2, 4, 6), (2, 6, 3)))])
def test_flagged_double_backward_equals_transpose_composition(bname, inner, op, shapes):
    """Every flag pair: the flagged op's values and gradients (first and second order) are
    the composition's bits."""
    rng = np.random.default_rng(5)
    for ta, tb in FLAGS:
        a_shape = shapes[0][:-2] + shapes[0][:-3:-1] if ta else shapes[0]
        b_shape = shapes[1][:-2] + shapes[1][:-3:-1] if tb else shapes[1]
        xs = [rng.uniform(-1.5, 1.5, a_shape), rng.uniform(-1.5, 1.5, b_shape)]
        C = rng.normal(size=shapes[0][:-1] + shapes[1][-1:])
        V = [rng.normal(size=x.shape) for x in xs]
        got = _run(bname, op, inner, xs, C, V, ta, tb, True)
        want = _run(bname, op, inner, xs, C, V, ta, tb, False)
        for stage, (gs, ws) in enumerate(zip(got, want)):
            for k, (x, w) in enumerate(zip(gs, ws)):
                assert bits_equal(np.asarray(x), np.asarray(w)), \
                    f"{op} {inner} ta={ta} tb={tb}: stage {stage} output {k} differs"


def _explicit_vjp(op: str):
    """The matmul / bmm VJP as it was before the flags: transpose copies, then the product
    (the same rule the flagged one must reproduce bit for bit)."""
    def vjp(be, gr, ins, out, needs, inner="plain", ta=False, tb=False):
        assert not (ta or tb), "the AE's forward has no flagged product"
        a, b = ins
        fn, axes = (be.matmul, None) if op == "matmul" else (be.bmm, (0, 2, 1))
        return (fn(gr, be.transpose(b, axes), inner=inner) if needs[0] else None,
                fn(be.transpose(a, axes), gr, inner=inner) if needs[1] else None)
    return vjp


def _train_ae(bname: str, inner: str, dtype: str, steps: int = 3) -> list[np.ndarray]:
    """A small autoencoder (17 -> 33 -> 7 -> 17, relu) trained by SGD for a few steps."""
    rng = np.random.default_rng(9)
    sizes = (17, 33, 7, 17)
    ps = [rng.normal(scale=0.3, size=s) for i in range(3)
          for s in ((sizes[i], sizes[i + 1]), (sizes[i + 1],))]
    xb = rng.normal(size=(65, 17))
    for _ in range(steps):
        with g.Tape(bname, dtype, inner=inner) as tp:
            vs = [tp.param(p) for p in ps]
            h = tp.const(xb)
            for k in range(3):
                h = g.matmul(h, vs[2 * k]) + vs[2 * k + 1]
                h = g.relu(h) if k < 2 else h
            d = h - tp.const(xb)
            g.mean(d * d).backward()
            ps = [(np.asarray(p, dtype) - np.asarray(0.05, dtype) * host(tp, v.grad))
                  for p, v in zip(ps, vs)]
    return ps


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_training_run_unchanged_by_flagged_vjps(bname, inner, dtype):
    """An AE's parameters after a few SGD steps: the flagged VJPs give the explicit-transpose
    VJPs' bits."""
    from gtensor.ops import REGISTRY

    got = _train_ae(bname, inner, dtype)
    calls = []
    old = REGISTRY["matmul"].vjp
    explicit = _explicit_vjp("matmul")

    def counted(*args, **kwargs):
        calls.append(1)
        return explicit(*args, **kwargs)
    object.__setattr__(REGISTRY["matmul"], "vjp", counted)  # NOTE: Op is frozen
    try:
        want = _train_ae(bname, inner, dtype)
    finally:
        object.__setattr__(REGISTRY["matmul"], "vjp", old)
    assert len(calls) == 9  # 3 steps x 3 products: the old rule really ran
    for k, (x, w) in enumerate(zip(got, want)):
        assert x.dtype == np.dtype(dtype) and bits_equal(x, w), f"parameter {k} differs"
