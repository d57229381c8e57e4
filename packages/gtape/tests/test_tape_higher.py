"""Double backward: Hessian-vector products and gradient penalties through every
differentiable op against torch float64 (rel 1e-12), bitwise numpy == this backend, and
first-order gradients of a recorded pass bitwise those of a plain one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape_testutil import applies, bits_equal, host, report
from gtensor.ops.checks import POS

torch = pytest.importorskip("torch")
T = torch


@dataclass(frozen=True)
class Row:
    """One op under test: the gtape and torch spellings, input shapes, domain, ops covered."""

    id: str
    ours: Callable
    theirs: Callable
    shapes: tuple
    ops: tuple
    positive: bool = False


def _torch_attention(qkv):
    """Causal attention of a packed qkv (B, T, 3, H, D) in torch's math spelling (its fused CPU
    kernels have no double backward): (B, T, H, D)."""
    q, k, v = (qkv[:, :, c].transpose(1, 2) for c in range(3))
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) * (1.0 / q.shape[-1] ** 0.5)
    s = s.masked_fill(~T.ones(t, t, dtype=T.bool).tril(), float("-inf"))
    return (T.softmax(s, -1) @ v).transpose(1, 2)


_IDS = np.array([2, 0, 2, 1, 2])
_ALONG = np.array([[0, 0], [3, 1], [2, 3]])
# dropout's mask for key 31, p = 0.4, from numpy's own Philox (the torch side multiplies by it)
_DROP_KEEP = np.random.Generator(np.random.Philox(key=31)).random(12).reshape(3, 4) >= 0.4


def _sm_grad(gg, y, axis):
    return y * (gg - (gg * y).sum(axis, keepdim=True))


ROWS = [
    Row("adds", lambda x: g.adds(x, 0.75), lambda x: x + 0.75, ((2, 3),), ("adds",)),
    Row("muls", lambda x: g.muls(x, -1.5), lambda x: x * -1.5, ((2, 3),), ("muls",)),
    Row("sum_axis", lambda x: g.sum(x * x, axis=1, keepdims=True),
        lambda x: (x * x).sum(1, keepdim=True), ((3, 4),), ("sum",)),
    Row("mean", lambda x: g.mean(x * x, axis=0), lambda x: (x * x).mean(0), ((3, 4),), ("mean",)),
    Row("sum_to", lambda x: g.sum_to(x * x, (1, 4)), lambda x: (x * x).sum(0, keepdim=True),
        ((3, 4),), ("sum_to",)),
    Row("broadcast_to", lambda x: g.broadcast_to(x, (3, 4)) * g.broadcast_to(x, (3, 4)),
        lambda x: x.expand(3, 4) * x.expand(3, 4), ((4,),), ("broadcast_to",)),
    Row("matmul", g.matmul, T.matmul, ((3, 4), (4, 2)), ("matmul", "transpose")),
    Row("matmul_folded", g.matmul, T.matmul, ((2, 3, 4), (4, 2)), ("matmul",)),
    Row("linear_3d", lambda x, w: g.linear(x, w), lambda x, w: x @ w.T, ((2, 3, 4), (5, 4)),
        ("matmul",)),
    Row("bmm", g.bmm, T.bmm, ((2, 3, 4), (2, 4, 2)), ("bmm", "transpose")),
    Row("transpose", lambda x: g.transpose(x, (2, 0, 1)) * g.transpose(x, (2, 0, 1)),
        lambda x: x.permute(2, 0, 1) ** 2, ((2, 3, 4),), ("transpose",)),
    Row("reshape", lambda x: g.reshape(x, (2, -1)) * g.reshape(x, (2, -1)),
        lambda x: x.reshape(2, -1) ** 2, ((3, 4),), ("reshape",)),
    Row("copy", lambda x: g.copy(x) * x, lambda x: x * x, ((3, 4),), ("copy",)),
    Row("slice", lambda x: g.slice(x, 1, 1, 4) * g.slice(x, 1, 0, 3),
        lambda x: x[:, 1:4] * x[:, 0:3], ((4, 5),), ("slice", "pad")),
    Row("pad", lambda x: g.pad(x, 0, 1, 2) * g.pad(x, 0, 2, 1),
        lambda x: T.nn.functional.pad(x, (0, 0, 1, 2)) * T.nn.functional.pad(x, (0, 0, 2, 1)),
        ((2, 3),), ("pad", "slice")),
    Row("concat", lambda a, b: g.concat([a * b, b, a], axis=1),
        lambda a, b: T.cat([a * b, b, a], 1), ((2, 3), (2, 3)), ("concat",)),
    Row("softmax", lambda x: g.softmax(x, axis=0), lambda x: T.softmax(x, 0), ((3, 4),),
        ("softmax", "softmax_grad")),
    # the helper ops themselves, as first-class differentiable ops (third order for their users)
    Row("relu_grad", lambda a, x: g.relu_grad(a * a, x), lambda a, x: (a * a) * (x > 0),
        ((3, 4), (3, 4)), ("relu_grad",)),
    Row("sigmoid_grad", g.sigmoid_grad, lambda a, y: a * (y * (1 - y)), ((3, 4), (3, 4)),
        ("sigmoid_grad",)),
    Row("tanh_grad", g.tanh_grad, lambda a, y: a * (1 - y * y), ((3, 4), (3, 4)),
        ("tanh_grad",)),
    Row("softmax_grad", lambda a, y: g.softmax_grad(a, y, axis=-1),
        lambda a, y: _sm_grad(a, y, -1), ((3, 4), (3, 4)), ("softmax_grad",)),
    Row("where", lambda a, b: g.where(a > b, a * b, b * b),
        lambda a, b: T.where(a > b, a * b, b * b), ((3, 4), (4,)), ("where",)),
    Row("take", lambda x: g.take(x, _IDS, 0) * g.take(x, _IDS, 0),
        lambda x: x[T.from_numpy(_IDS)] ** 2, ((3, 4),), ("take", "take_grad")),
    Row("take_grad", lambda a: g.take_grad(a * a, _IDS, 3, 0),
        lambda a: T.zeros(3, 4, dtype=a.dtype).index_add(0, T.from_numpy(_IDS), a * a),
        ((5, 4),), ("take_grad", "take")),
    Row("take_along_axis", lambda x: g.take_along_axis(x, _ALONG, 1) ** 2,
        lambda x: T.take_along_dim(x, T.from_numpy(_ALONG), 1) ** 2, ((3, 4),),
        ("take_along_axis", "take_along_axis_grad")),
    Row("take_along_axis_grad", lambda a: g.take_along_axis_grad(a * a, _ALONG, 4, 1),
        lambda a: T.zeros(3, 4, dtype=a.dtype).scatter_add(1, T.from_numpy(_ALONG), a * a),
        ((3, 2),), ("take_along_axis_grad", "take_along_axis")),
    Row("dropout", lambda x: g.dropout(x * x, 0.4, g.rng.key(31)),
        lambda x: x * x * T.from_numpy(_DROP_KEEP).to(x.dtype) * (1.0 / (1.0 - 0.4)), ((3, 4),),
        ("dropout",)),
    # the fused attention: a higher order records the composite's backward (the same bits)
    Row("qkv_attention", lambda x: g.qkv_attention(x * x, is_causal=True),
        lambda x: _torch_attention(x * x), ((2, 4, 3, 2, 3),), ("qkv_attention",)),
    Row("log_softmax", lambda x: g.log_softmax(x, axis=1), lambda x: T.log_softmax(x, 1),
        ((3, 4),), ("log_softmax", "log_softmax_grad")),
    Row("log_softmax_grad", lambda a, y: g.log_softmax_grad(a, y, axis=-1),
        lambda a, y: a - T.exp(y) * a.sum(-1, keepdim=True), ((3, 4), (3, 4)),
        ("log_softmax_grad",)),
    Row("logsumexp", lambda x: g.logsumexp(x, 1), lambda x: T.logsumexp(x, 1), ((3, 4),),
        ("logsumexp",)),
]
F = T.nn.functional


def _t_grad_input(a, w, stride, padding, size):
    """conv2d's input gradient in torch, differentiable: autograd of conv2d (linear in x)."""
    x0 = T.zeros((a.shape[0], w.shape[1]) + size, dtype=a.dtype, requires_grad=True)
    return T.autograd.grad(F.conv2d(x0, w, stride=stride, padding=padding), x0, a,
                           create_graph=True)[0]


def _t_grad_weight(a, x, stride, padding, kernel):
    """conv2d's weight gradient in torch, differentiable: autograd of conv2d (linear in w)."""
    w0 = T.zeros((a.shape[1], x.shape[1]) + kernel, dtype=a.dtype, requires_grad=True)
    return T.autograd.grad(F.conv2d(x, w0, stride=stride, padding=padding), w0, a,
                           create_graph=True)[0]


def _t_pick(v, x, kernel, stride):
    _, idx = F.max_pool2d(x, kernel, stride, return_indices=True)
    return v.flatten(2).gather(2, idx.flatten(2)).reshape(idx.shape)


ROWS += [
    Row("conv2d", lambda x, w, b: g.conv2d(x, w, b, stride=2, padding=1),
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        ((2, 2, 5, 5), (3, 2, 3, 3), (3,)), ("conv2d", "conv2d_grad_input",
                                             "conv2d_grad_weight")),
    Row("conv2d_grad_input", lambda a, w: g.conv2d_grad_input(a * a, w, 2, 1, (5, 5)),
        lambda a, w: _t_grad_input(a * a, w, 2, 1, (5, 5)), ((1, 3, 3, 3), (3, 2, 3, 3)),
        ("conv2d_grad_input", "conv2d", "conv2d_grad_weight")),
    Row("conv2d_grad_weight", lambda a, x: g.conv2d_grad_weight(a * a, x, 1, 0, (2, 2)),
        lambda a, x: _t_grad_weight(a * a, x, 1, 0, (2, 2)), ((1, 2, 3, 4), (1, 2, 4, 5)),
        ("conv2d_grad_weight", "conv2d", "conv2d_grad_input")),
    Row("max_pool2d", lambda x: g.max_pool2d(x, 3, 2), lambda x: F.max_pool2d(x, 3, 2),
        ((1, 2, 5, 5),), ("max_pool2d", "max_pool2d_grad")),
    Row("max_pool2d_pick", lambda v, x: g.max_pool2d_pick(v * v, x, 2, 1),
        lambda v, x: _t_pick(v * v, x, 2, 1), ((1, 2, 4, 4), (1, 2, 4, 4)),
        ("max_pool2d_pick", "max_pool2d_grad")),
    Row("avg_pool2d", lambda x: g.avg_pool2d(x * x, 3, 2), lambda x: F.avg_pool2d(x * x, 3, 2),
        ((1, 2, 5, 5),), ("avg_pool2d", "avg_pool2d_grad")),
]


def _t_grad_input_g(a, w, stride, padding, size, dilation, groups):
    """conv2d_grad_input with dilation and groups: torch's conv_transpose2d (differentiable)."""
    x0 = T.zeros((a.shape[0], w.shape[1] * groups) + size, dtype=a.dtype, requires_grad=True)
    return T.autograd.grad(F.conv2d(x0, w, None, stride, padding, dilation, groups), x0, a,
                           create_graph=True)[0]


# issue 41: dilation and groups, conv_transpose2d, padded / dilated / ceil-mode pools, adaptive
ROWS += [
    Row("conv2d_dilation_groups", lambda x, w, b: g.conv2d(x, w, b, 2, 1, (2, 1), 2),
        lambda x, w, b: F.conv2d(x, w, b, 2, 1, (2, 1), 2),
        ((1, 4, 6, 5), (4, 2, 3, 2), (4,)), ("conv2d", "conv2d_grad_input",
                                             "conv2d_grad_weight")),
    Row("conv_transpose2d", lambda x, w: g.conv_transpose2d(x, w, None, 2, 1, 1, 2, 2),
        lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1, 2, 2),
        ((1, 4, 3, 3), (4, 1, 2, 3)), ("conv2d_grad_input", "conv2d", "conv2d_grad_weight")),
    Row("conv2d_grad_input_groups", lambda a, w: g.conv2d_grad_input(a * a, w, 1, 1, (4, 4), 2,
                                                                      2),
        lambda a, w: _t_grad_input_g(a * a, w, 1, 1, (4, 4), 2, 2),
        ((1, 2, 2, 4), (2, 1, 3, 2)), ("conv2d_grad_input", "conv2d", "conv2d_grad_weight")),
    Row("max_pool2d_pad_dil_ceil", lambda x: g.max_pool2d(x, 3, 2, 1, (1, 2), True),
        lambda x: F.max_pool2d(x, 3, 2, 1, (1, 2), True), ((1, 2, 6, 7),),
        ("max_pool2d", "max_pool2d_grad")),
    Row("avg_pool2d_pad_ceil", lambda x: g.avg_pool2d(x * x, 3, 2, 1, True, False),
        lambda x: F.avg_pool2d(x * x, 3, 2, 1, True, False), ((1, 2, 6, 5),),
        ("avg_pool2d", "avg_pool2d_grad")),
    Row("adaptive_avg_pool2d", lambda x: g.adaptive_avg_pool2d(x * x, (2, 3)),
        lambda x: F.adaptive_avg_pool2d(x * x, (2, 3)), ((1, 2, 5, 5),),
        ("adaptive_avg_pool2d", "adaptive_avg_pool2d_grad")),
]


def declared_rows(registry: dict) -> list[Row]:
    """The rows of the ops of ``registry`` that declare a torch twin (``Op.checks.torch``)
    unless the declaration says why double backward does not apply (``Checks.higher``)."""
    rows = []
    for name, op in sorted(registry.items()):
        c = op.checks
        if c is None or c.higher:
            continue
        shapes_, attrs = c.sample
        rows.append(Row(name, applies(op, attrs), _twin(c.torch, attrs), tuple(shapes_),
                        (name,), any(d == POS for d in c.domain)))
    return rows



def _twin(twin: Callable, attrs: dict) -> Callable:
    return lambda *ts: twin(T, *ts, **attrs)


HAND_ROWS = list(ROWS)
ROWS += declared_rows(gtensor.REGISTRY)
# no rule: no input is trained (the optimizer's updates) or the result is int64 / bool
NOT_COVERED = {n for n, op in gtensor.REGISTRY.items() if not op.differentiable}


def missing_rows(registry: dict) -> list[str]:
    """Differentiable ops of ``registry`` that no hand row covers and no declaration gives."""
    covered = {op for r in HAND_ROWS + declared_rows(registry) for op in r.ops}
    return sorted(n for n, op in registry.items() if op.differentiable and n not in covered)


def _inputs(row: Row) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, row.id)))
    xs = [rng.uniform(0.3, 1.5, s) * rng.choice([-1.0, 1.0], s) for s in row.shapes]
    return [np.abs(x) + 0.2 for x in xs] if row.positive else xs


def _weights(row: Row, xs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(7)
    with g.Tape() as probe:
        shape = row.ours(*[probe.param(x) for x in xs]).shape
    return rng.normal(size=shape), [rng.normal(size=x.shape) for x in xs]


def _ours(bname: str, row: Row, xs, C, V):
    """(first-order grads, HVP, gradient-penalty grads) for loss = sum(tanh(f(x)) * C)."""
    out = []
    with g.Tape(bname) as tp:
        ps = [tp.param(x) for x in xs]
        with tp.episode():
            loss = g.sum(g.tanh(row.ours(*ps)) * C)
            gs = g.grad(loss, ps, create_graph=True)
            out.append([gv.numpy() for gv in gs])
            dot = g.sum(gs[0] * V[0])
            for gv, v in zip(gs[1:], V[1:]):
                dot = dot + g.sum(gv * v)
            out.append([host(tp, a) for a in g.grad(dot, ps)])
            penalty = g.sum(gs[0] * gs[0])
            for gv in gs[1:]:
                penalty = penalty + g.sum(gv * gv)
            (loss + penalty).backward()
            out.append([host(tp, p.grad) for p in ps])
    return out


def _torch(row: Row, xs, C, V):
    ts = [T.tensor(x, requires_grad=True) for x in xs]
    loss = (T.tanh(row.theirs(*ts)) * T.tensor(C)).sum()
    gs = T.autograd.grad(loss, ts, create_graph=True, materialize_grads=True)
    dot = sum((gv * T.tensor(v)).sum() for gv, v in zip(gs, V))
    hv = T.autograd.grad(dot, ts, retain_graph=True, materialize_grads=True)
    penalty = sum((gv * gv).sum() for gv in gs)
    gp = T.autograd.grad(loss + penalty, ts, materialize_grads=True)
    return [[t.detach().numpy() for t in ts_] for ts_ in (gs, hv, gp)]


def test_every_differentiable_op_has_a_row():
    missing = missing_rows(gtensor.REGISTRY)
    assert not missing, f"backward rules without a double-backward row: {missing}"
    covered = {op for r in ROWS for op in r.ops}
    assert not covered & NOT_COVERED, "a row for an op without a backward rule"


def test_an_op_without_checks_or_row_is_reported():
    """The coverage test can fail: softplus registered without its ``checks`` is missing."""
    import dataclasses

    reg = dict(gtensor.REGISTRY)
    reg["softplus"] = dataclasses.replace(reg["softplus"], checks=None)
    assert missing_rows(reg) == ["softplus"]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_hvp_and_gradient_penalty_match_torch(bname, row):
    xs = _inputs(row)
    C, V = _weights(row, xs)
    got = _ours(bname, row, xs, C, V)
    want = _torch(row, xs, C, V)
    worst = 0.0
    for what, gs, ws in zip(("grad", "hvp", "penalty"), got, want):
        for k, (a, w) in enumerate(zip(gs, ws)):
            scale = max(np.max(np.abs(w)), 1e-300)
            err = float(np.max(np.abs(a - w)) / scale)
            worst = max(worst, err)
            assert err <= 1e-12, f"{row.id} {what} d/dx{k}: rel {err:.3e}\n{a}\n{w}"
    report("double backward vs torch relative error", f"{row.id}[{bname}]", worst)
    if bname != "numpy":  # numpy == this backend, bit for bit
        ref = _ours("numpy", row, xs, C, V)
        for gs, rs in zip(got, ref):
            for a, r in zip(gs, rs):
                assert bits_equal(a, r), f"{row.id}: {bname} differs from numpy"


def _graph(tp, w, x):
    h = g.tanh(x @ w)
    s = g.softmax(h, axis=-1) * g.sigmoid(h) + g.relu(h) * g.maximum(h, 0.1)
    return g.mean(g.exp(-s) + g.sqrt(s * s + 1.0)) + g.sum(g.log(s * s + 1.0)) / 3.0


def test_first_order_gradients_are_bitwise_those_of_a_plain_backward(bname):
    rng = np.random.default_rng(3)
    W, X = rng.normal(size=(3, 4)), rng.normal(size=(5, 3))
    with g.Tape(bname) as plain, g.Tape(bname) as rec:
        wp, wr = plain.param(W), rec.param(W)
        loss_p = _graph(plain, wp, plain.const(X))
        loss_r = _graph(rec, wr, rec.const(X))
        plain.backward(loss_p)
        n = len(rec)
        out = rec.backward(loss_r, create_graph=True)
        assert len(rec) > n and len(out) == 1 and isinstance(wr.grad, g.Var)
        assert bits_equal(out[0].numpy(), host(plain, plain.grad(wp)))
        assert bits_equal(host(rec, rec.grad(wr)), host(plain, plain.grad(wp)))
        for i in range(n):  # every intermediate's gradient too
            a, b = plain.grad_at(i), rec.grad_at(i)
            assert (a is None) == (b is None), i
            if a is not None:
                assert bits_equal(host(rec, b), host(plain, a)), i
        (gv,) = g.grad(loss_r, [wr], create_graph=True)
        assert bits_equal(gv.numpy(), host(plain, plain.grad(wp)))
        rec.backward(g.sum(out[0] * out[0]))  # a first-order pass: w.grad is an array again
        assert not isinstance(wr.grad, g.Var)


def test_third_order_through_the_helper_rules(bname):
    x0 = np.array([-1.3, -0.2, 0.4, 1.1])
    with g.Tape(bname) as tp:
        x = tp.param(x0)
        (d1,) = g.grad(g.sum(g.tanh(x) + g.sigmoid(x) * g.relu(x)), [x], create_graph=True)
        (d2,) = g.grad(g.sum(d1), [x], create_graph=True)
        (d3,) = g.grad(g.sum(d2), [x])
    t = T.tensor(x0, requires_grad=True)
    (e1,) = T.autograd.grad((T.tanh(t) + T.sigmoid(t) * T.relu(t)).sum(), [t], create_graph=True)
    (e2,) = T.autograd.grad(e1.sum(), [t], create_graph=True)
    (e3,) = T.autograd.grad(e2.sum(), [t])
    assert np.max(np.abs(host(tp, d3) - e3.numpy())) <= 1e-12 * np.max(np.abs(e3.numpy()))


def test_backward_create_graph_returns_every_param_and_fills_the_buffers(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, -2.0]))
        unused = tp.param(np.ones(3))
        count = tp.backward_count  # what an optimizer checks before a step
        with tp.episode():
            gw, gu = g.sum(w * w * w).backward(create_graph=True)
            assert gw.numpy().tolist() == [3.0, 12.0] and gu.numpy().tolist() == [0.0] * 3
            assert w.grad is gw and unused.grad is gu
            assert tp.backward_count == count + 1
            assert host(tp, tp.grad(w)).tolist() == [3.0, 12.0]
            assert host(tp, tp.grad(unused)).tolist() == [0.0] * 3


def test_refusals_name_the_argument(bname):
    with g.Tape(bname) as tp, g.Tape(bname) as other:
        w = tp.param(np.ones(2))
        loss = g.sum(w * w)
        with pytest.raises(TypeError, match="grad: loss is .*expected a scalar Var"):
            g.grad(3.0, [w])
        with pytest.raises(ValueError, match="grad: inputs is empty"):
            g.grad(loss, [])
        with pytest.raises(TypeError, match=r"grad: inputs\[1\] is .*expected a Var"):
            g.grad(loss, [w, np.ones(2)])
        with pytest.raises(ValueError, match=r"grad: inputs\[0\] .* another tape"):
            g.grad(loss, [other.param(np.ones(2))], create_graph=True)
        with pytest.raises(TypeError, match="create_graph is 'yes'"):
            g.grad(loss, w, create_graph="yes")
        with pytest.raises(TypeError, match="create_graph is 1"):
            tp.backward(loss, create_graph=1)
        with pytest.raises(ValueError, match="loss has shape"):
            g.grad(w * w, [w], create_graph=True)
        n = len(tp)
        frozen = g.sum(g.apply("adam_p", (w, w, w, tp.const(np.array(0.1))), eps=1e-8))
        with pytest.raises(NotImplementedError, match="adam_p .* has no backward rule"):
            g.grad(frozen, [w], create_graph=True)
        assert len(tp) == n + 3  # adam_p, its const and the sum: nothing of a backward
        assert g.grad(loss, w, create_graph=True)[0].numpy().tolist() == [2.0, 2.0]


def test_first_order_grad_returns_copies_a_later_backward_leaves_alone(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, -2.0]))
        (a,) = g.grad(g.sum(w * w), [w])
        tp.backward(g.sum(w * 3.0))
        assert np.array(tp.backend.to_numpy(a)).tolist() == [2.0, -4.0]
        assert host(tp, w.grad).tolist() == [3.0, 3.0]
