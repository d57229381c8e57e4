"""torch's surface on the tape (issue 35): N-D linear, torch.matmul's rules, bmm, activations,
masked_fill, scaled_dot_product_attention, MultiheadAttention -- values, gradients and double
backward against torch float64 fed the same bits, central differences, and the backend under
test bitwise the numpy tape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host, rel_err, report

torch = pytest.importorskip("torch")
F = torch.nn.functional

_BOOL = np.array([[True, False, True, True], [False, True, True, True],
                  [True, True, False, True]])  # (L=3, S=4): every row keeps some key
_FLOAT = np.linspace(-1.0, 0.5, 12).reshape(3, 4)


@dataclass(frozen=True)
class Case:
    """A function under test: its gtape and torch spellings and its float inputs' shapes."""

    id: str
    ours: Callable
    theirs: Callable
    shapes: tuple
    linear: bool = False  # linear in its inputs: the gradient depends on no input (no HVP)


CASES = [
    Case("linear_3d", lambda x, w, b: g.linear(x, w, b), F.linear, ((2, 3, 4), (5, 4), (5,))),
    Case("linear_1d", lambda x, w: g.linear(x, w), F.linear, ((4,), (5, 4))),
    Case("Linear_4d", lambda x, w, b: g.linear(x, w, b), F.linear, ((2, 1, 3, 4), (2, 4), (2,))),
    Case("matmul_1d_1d", g.matmul, torch.matmul, ((4,), (4,))),
    Case("matmul_2d_1d", g.matmul, torch.matmul, ((3, 4), (4,))),
    Case("matmul_1d_3d", g.matmul, torch.matmul, ((4,), (2, 4, 5))),
    Case("matmul_3d_2d", g.matmul, torch.matmul, ((2, 3, 4), (4, 5))),
    Case("matmul_2d_3d", g.matmul, torch.matmul, ((3, 4), (2, 4, 5))),
    Case("matmul_bcast", g.matmul, torch.matmul, ((2, 1, 3, 4), (3, 4, 2))),
    Case("matmul_4d", lambda a, b: a @ b.transpose(-2, -1),
         lambda a, b: a @ b.transpose(-2, -1), ((2, 3, 4, 5), (2, 3, 6, 5))),
    Case("bmm", g.bmm, torch.bmm, ((2, 3, 4), (2, 4, 5))),
    Case("gelu_tanh", lambda x: g.gelu(x, approximate="tanh"),
         lambda x: F.gelu(x, approximate="tanh"), ((3, 5),)),
    Case("gelu", g.gelu, F.gelu, ((3, 5),)),
    Case("silu", g.silu, F.silu, ((3, 5),)),
    Case("softplus", g.softplus, F.softplus, ((3, 5),)),
    Case("softplus_beta", lambda x: g.softplus(x * 10.0, beta=2.0, threshold=5.0),
         lambda x: F.softplus(x * 10.0, beta=2.0, threshold=5.0), ((3, 5),)),
    Case("masked_fill", lambda x: x.masked_fill(_BOOL, -2.5),
         lambda x: x.masked_fill(torch.from_numpy(_BOOL), -2.5), ((3, 4),), linear=True),
    Case("sdpa", g.scaled_dot_product_attention, F.scaled_dot_product_attention,
         ((2, 2, 3, 4), (2, 2, 4, 4), (2, 2, 4, 5))),
    Case("sdpa_causal", lambda q, k, v: g.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         ((2, 3, 4), (2, 3, 4), (2, 3, 2))),
    Case("sdpa_bool_mask_scale",
         lambda q, k, v: g.scaled_dot_product_attention(q, k, v, attn_mask=_BOOL, scale=0.3),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.from_numpy(_BOOL),
                                                        scale=0.3),
         ((2, 3, 4), (2, 4, 4), (2, 4, 3))),
    Case("sdpa_float_mask",
         lambda q, k, v: g.scaled_dot_product_attention(q, k, v, attn_mask=_FLOAT),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.from_numpy(_FLOAT)),
         ((3, 4), (4, 4), (4, 2))),
    Case("sdpa_gqa",
         lambda q, k, v: g.scaled_dot_product_attention(q, k, v, enable_gqa=True),
         lambda q, k, v: torch.softmax(  # torch's math form (its CPU kernel: no 2nd order)
             q @ k.repeat_interleave(2, dim=-3).transpose(-2, -1) / np.sqrt(2.0), dim=-1)
         @ v.repeat_interleave(2, dim=-3),
         ((1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2))),
]


def _inputs(case: Case, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5, 1.5, s) for s in case.shapes]


def _ours(bname: str, case: Case, xs: list[np.ndarray], dtype: str = "float64"):
    """(value, grads of sum(value * C)) on a tape of ``bname``; C a fixed cotangent."""
    with g.Tape(bname, dtype) as tp:
        ps = [tp.param(x) for x in xs]
        y = case.ours(*ps)
        c = np.random.default_rng(9).uniform(-1, 1, y.shape)
        tp.backward(g.sum(y * c))
        return host(tp, tp.value(y)), [host(tp, tp.grad(p)) for p in ps], c


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_against_torch_float64(bname, case):
    xs = _inputs(case)
    y, gs, c = _ours(bname, case, xs)
    ts = [torch.from_numpy(x.copy()).requires_grad_(True) for x in xs]
    ty = case.theirs(*ts)
    (ty * torch.from_numpy(c)).sum().backward()
    verr = rel_err(y, ty.detach().numpy())
    gerr = max(rel_err(gr, t.grad.numpy()) for gr, t in zip(gs, ts))
    report("torch surface value relative error", f"{case.id}[{bname}]", verr)
    report("torch surface grad relative error", f"{case.id}[{bname}]", gerr)
    assert y.shape == tuple(ty.shape)
    assert verr <= 1e-14, f"{case.id}: value differs from torch by {verr:.2e}"
    assert gerr <= 1e-13, f"{case.id}: a gradient differs from torch by {gerr:.2e}"


@pytest.mark.parametrize("case", [c for c in CASES if not c.linear],
                         ids=[c.id for c in CASES if not c.linear])
def test_double_backward_against_torch(bname, case):
    xs = _inputs(case, 1)
    with g.Tape(bname) as tp:
        ps = [tp.param(x) for x in xs]
        y = case.ours(*ps)
        c = np.random.default_rng(3).uniform(-1, 1, y.shape)
        gs = g.grad(g.sum(y * c), ps, create_graph=True)
        vs = [np.random.default_rng(4 + k).uniform(-1, 1, p.shape) for k, p in enumerate(ps)]
        penalty = g.sum(g.concat([g.reshape(gr * v, (-1,)) for gr, v in zip(gs, vs)]))
        hv = [host(tp, a) for a in g.grad(penalty, ps)]
    ts = [torch.from_numpy(x.copy()).requires_grad_(True) for x in xs]
    tg = torch.autograd.grad((case.theirs(*ts) * torch.from_numpy(c)).sum(), ts,
                             create_graph=True)
    tpen = sum((a * torch.from_numpy(v)).sum() for a, v in zip(tg, vs))
    thv = torch.autograd.grad(tpen, ts, allow_unused=True)
    for k, (ours, theirs) in enumerate(zip(hv, thv)):
        want = np.zeros_like(ours) if theirs is None else theirs.numpy()
        err = rel_err(ours, want) if np.any(want) else float(np.max(np.abs(ours)))
        report("torch surface double backward error", f"{case.id}[{bname}]", err)
        assert err <= 1e-12, f"{case.id}: input {k}'s second-order term differs by {err:.2e}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_backend_bitwise_the_numpy_tape(other, case, dtype):
    xs = _inputs(case, 2)
    want_y, want_g, _ = _ours("numpy", case, xs, dtype)
    y, gs, _ = _ours(other, case, xs, dtype)
    assert bits_equal(y, want_y), case.id
    for k, (a, b) in enumerate(zip(gs, want_g)):
        assert bits_equal(a, b), f"{case.id}: gradient of input {k}"


@pytest.mark.parametrize("case", [c for c in CASES if c.id in (
    "linear_3d", "matmul_bcast", "gelu_tanh", "silu", "masked_fill", "sdpa_causal")],
    ids=lambda c: c.id)
def test_central_differences(case):
    xs = _inputs(case, 5)
    _, gs, c = _ours("numpy", case, xs)
    h = 1e-6
    for k, x in enumerate(xs):
        d = np.random.default_rng(11 + k).uniform(-1, 1, x.shape)

        def f(t, k=k, d=d):
            moved = [a + t * d if j == k else a for j, a in enumerate(xs)]
            with g.Tape() as tp:
                return float(np.sum(case.ours(*[tp.const(a) for a in moved]).numpy() * c))

        fd = (f(h) - f(-h)) / (2 * h)
        exact = float(np.sum(gs[k] * d))
        err = abs(fd - exact) / max(abs(exact), 1e-8)
        report("torch surface FD relative error", f"{case.id}:{k}", err)
        assert err < 1e-6, f"{case.id}: input {k}: FD {fd} vs backward {exact}"


# ---------------------------------------------------------------- orders written down
def test_linear_weight_gradient_is_one_inner_product_over_every_leading_position():
    rng = np.random.default_rng(0)
    x, w, c = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)), \
        rng.standard_normal((2, 3, 5))
    with g.Tape() as tp:
        W = tp.param(w)
        tp.backward(g.sum(g.linear(tp.const(x), W) * c))
        got = tp.grad(W)
    rows, cs = x.reshape(6, 4), c.reshape(6, 5)
    want = np.zeros((5, 4))
    for o in range(5):
        for i in range(4):
            acc = cs[0, o] * rows[0, i]
            for p in range(1, 6):  # the positions (b, t) in row-major order
                acc = acc + cs[p, o] * rows[p, i]
            want[o, i] = acc
    assert bits_equal(got, want)


def test_sdpa_is_its_written_composite_bitwise():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3)))
    mask = rng.uniform(size=(3, 5)) > 0.3
    mask[:, 0] = True
    with g.Tape() as tp:
        Q, K, V = tp.const(q), tp.const(k), tp.const(v)
        got = g.scaled_dot_product_attention(Q, K, V, attn_mask=mask).numpy()
        s = g.muls(g.matmul(Q, K, tb=True), 1.0 / np.sqrt(4.0))
        s = g.where(mask, s, np.array(-np.inf))
        want = g.matmul(g.softmax(s, -1), V).numpy()
    assert bits_equal(got, want)


def test_gelu_tanh_is_its_written_order_bitwise():
    x = np.linspace(-4, 4, 33)
    with g.Tape() as tp:
        got = g.gelu(tp.const(x), approximate="tanh").numpy()
        X = tp.const(x)
        inner = g.muls(g.add(X, g.muls(X * X * X, 0.044715)),
                       1.41421356237309504880 * 1.12837916709551257390 * 0.5)
        want = (g.muls(X, 0.5) * g.adds(g.tanh(inner), 1.0)).numpy()
    assert bits_equal(got, want)


def test_gelu_and_softplus_are_their_written_orders_bitwise():
    x = np.concatenate([np.linspace(-30, 30, 41), [-745.0, 800.0, 20.0, 20.000001]])
    with g.Tape() as tp:
        X = tp.const(x)
        got = g.gelu(X).numpy()
        want = (g.muls(X, 0.5) * g.adds(g.erf(g.muls(X, 0.70710678118654752440)), 1.0)).numpy()
        assert bits_equal(got, want)
        over = X > 20.0
        want = g.where(over, X, g.log1p(g.exp(g.where(over, 0.0, X)))).numpy()
        assert bits_equal(g.softplus(X).numpy(), want)
        assert np.isfinite(g.softplus(X).numpy()).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gelu_gradients_are_the_composites_bitwise(dtype):
    """gelu's two ops (gelu_gate, gelu_mul) give the value and the gradient of the composite
    muls -> gelu_gate -> mul bit for bit (x read by gelu alone: its two contributions are then
    summed in one add either way, a + b == b + a); the second order to rounding (the op's
    rules group the terms' sums in other nodes than the composite's)."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(40) * 3.0, [0.0, -0.0, 1e-300, -8.5, 30.0]])
    w = rng.standard_normal(x.shape)

    def grads(f):
        tp = g.Tape(dtype=dtype)
        X = tp.param(x)
        y = g.sum(f(X) * tp.const(w))
        (gx,) = g.grad(y, [X], create_graph=True)
        (ggx,) = g.grad(g.sum(gx * gx), [X])
        return [np.asarray(v.numpy() if isinstance(v, g.Var) else tp.backend.to_numpy(v))
                for v in (y, gx, ggx)]

    def composite(X):
        return g.muls(X, 0.5) * g.apply("gelu_gate", (X,))

    got, want = grads(g.gelu), grads(composite)
    assert bits_equal(got[0], want[0]) and bits_equal(got[1], want[1])
    eps = np.finfo(dtype).eps
    assert np.allclose(got[2], want[2], rtol=8 * eps, atol=8 * eps * np.abs(want[2]).max())


def test_fully_masked_rows_are_nan_as_torch():
    mask = np.array([[False, False], [True, False]])
    with g.Tape() as tp:
        q = tp.const(np.ones((2, 3)))
        out = g.scaled_dot_product_attention(q, tp.const(np.ones((2, 3))),
                                             tp.const(np.ones((2, 3))), attn_mask=mask).numpy()
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()


def test_sdpa_dropout_is_g_dropout_of_the_weights():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((3, 4))
    key = g.rng.key(5)
    with g.Tape() as tp:
        Q = tp.const(q)
        got = g.scaled_dot_product_attention(Q, Q, Q, dropout_p=0.25, key=key).numpy()
        w = g.softmax(g.muls(g.matmul(Q, Q, tb=True), 0.5), -1)
        want = g.matmul(g.dropout(w, 0.25, key), Q).numpy()
    assert bits_equal(got, want)


# ---------------------------------------------------------------- MultiheadAttention
MHA_CASES = [
    dict(batch_first=True),
    dict(batch_first=False, key_padding_mask=np.array([[False, False, True, False]] * 2)),
    dict(batch_first=True, attn_mask=_BOOL),
    dict(batch_first=True, attn_mask=_FLOAT, average_attn_weights=False),
    dict(batch_first=True, is_causal=True, self_attention=True),
    dict(batch_first=True, kdim=3, vdim=5),
]


@pytest.mark.parametrize("spec", MHA_CASES, ids=[str(i) for i in range(len(MHA_CASES))])
def test_multihead_attention_against_torch(bname, spec):
    spec = dict(spec)
    kdim, vdim = spec.pop("kdim", None), spec.pop("vdim", None)
    bf, self_attn = spec.pop("batch_first"), spec.pop("self_attention", False)
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(6, 2, kdim=kdim, vdim=vdim, batch_first=bf).double()
    with torch.no_grad():
        for p in tm.parameters():  # nonzero biases: every parameter matters
            p.add_(torch.linspace(-0.1, 0.2, p.numel(), dtype=torch.float64).reshape(p.shape))
    rng = np.random.default_rng(3)
    L, S, B = 3, 4, 2
    if self_attn:
        S = L
    shape = (lambda t, d: (B, t, d)) if bf else (lambda t, d: (t, B, d))
    q = rng.standard_normal(shape(L, 6))
    k = q if self_attn else rng.standard_normal(shape(S, kdim or 6))
    v = q if self_attn else rng.standard_normal(shape(S, vdim or 6))
    torch_kw = {n: (torch.from_numpy(a) if isinstance(a, np.ndarray) else a)
                for n, a in spec.items()}
    if spec.get("is_causal"):
        torch_kw["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(
            L, dtype=torch.float64)
    with g.Tape(bname) as tp:
        mha = g.nn.from_torch(tm, tp)
        names = [n for n, _ in mha.named_parameters()]
        Q = tp.param(q)
        K, V = (Q, Q) if self_attn else (tp.param(k), tp.param(v))
        out, w = mha(Q, K, V, **spec)
        c = rng.standard_normal(out.shape)
        tp.backward(g.sum(out * c) + g.sum(w * w))
        ours = [host(tp, tp.value(out)), host(tp, tp.value(w)),
                *[host(tp, tp.grad(p)) for p in mha.parameters()], host(tp, tp.grad(Q))]
    tq = torch.from_numpy(q.copy()).requires_grad_(True)
    tk, tv = (tq, tq) if self_attn else (torch.from_numpy(k), torch.from_numpy(v))
    tout, tw = tm(tq, tk, tv, **torch_kw)
    ((tout * torch.from_numpy(c)).sum() + (tw * tw).sum()).backward()
    theirs = [tout.detach().numpy(), tw.detach().numpy(),
              *[p.grad.numpy() for p in tm.parameters()], tq.grad.numpy()]
    assert names == [n for n, _ in tm.named_parameters()]
    for k_, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, k_
        err = rel_err(a, b)
        report("MultiheadAttention vs torch relative error", f"{k_}[{bname}]", err)
        assert err <= 1e-13, f"output {k_} differs from torch by {err:.2e}"


def test_multihead_attention_init_is_torchs_layout_and_distribution():
    with g.Tape() as tp:
        mha = g.nn.MultiheadAttention(tp, 8, 4, bias=True)
        tm = torch.nn.MultiheadAttention(8, 4, batch_first=True)
        assert [(n, p.shape) for n, p in mha.named_parameters()] == [
            (n, tuple(p.shape)) for n, p in tm.named_parameters()]
        w = mha.in_proj_weight.numpy()
        bound = np.sqrt(3.0) * np.sqrt(2.0 / (8 + 24))
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
        assert not mha.in_proj_bias.numpy().any() and not mha.out_proj.bias.numpy().any()


# ---------------------------------------------------------------- bad input
def test_bad_input_is_refused_by_name_and_changes_nothing():
    with g.Tape() as tp:
        x = tp.param(np.ones((2, 3, 4)))
        x4, x3 = g.reshape(x, (4, 3, 2)), g.reshape(x, (2, 4, 3))
        n = len(tp)
        cases = [
            (lambda: x.masked_fill(np.ones((2, 3, 4)), 0.0), TypeError, "mask has dtype float64"),
            (lambda: x.masked_fill(np.ones((3, 3), bool), 0.0), ValueError,
             r"mask has shape \(3, 3\), which does not broadcast to \(2, 3, 4\)"),
            (lambda: g.scaled_dot_product_attention(x, x, x, attn_mask=np.ones((3, 3), bool),
                                                    is_causal=True), ValueError,
             "is_causal=True with an explicit attn_mask"),
            (lambda: g.scaled_dot_product_attention(x, x, x, dropout_p=0.1), ValueError,
             "dropout_p is 0.1 but key is None"),
            (lambda: g.scaled_dot_product_attention(x, x, x, attn_mask=np.ones((3, 3), int)),
             TypeError, "attn_mask has dtype int64"),
            (lambda: g.scaled_dot_product_attention(x, x, x, attn_mask=np.ones((4, 3), bool)),
             ValueError, r"attn_mask has shape \(4, 3\)"),
            (lambda: g.scaled_dot_product_attention(x, x, x3), ValueError,
             "the same sequence length"),
            (lambda: g.nn.MultiheadAttention(tp, 6, 4), ValueError,
             "embed_dim 6 is not divisible by num_heads 4"),
            (lambda: g.linear(x, np.ones((5, 3))), ValueError, r"expected \(\.\.\., 3\)"),
            (lambda: g.matmul(x, np.ones((5, 2))), ValueError, "inner dimensions differ"),
            (lambda: g.matmul(np.ones((2, 4, 3)), x4), ValueError, "batch dims"),
            (lambda: g.gelu(x, approximate="fast"), ValueError, "approximate is 'fast'"),
            (lambda: g.sum(x, axis=0, dim=1), TypeError, "both axis= and dim= were given"),
            (lambda: x.transpose(0, 3), IndexError, "dim 3 is out of range"),
            (lambda: x.split([1, 1], dim=1), ValueError, r"sections \[1, 1\] do not sum"),
        ]
        for fn, kind, words in cases:
            with pytest.raises(kind, match=words):
                fn()
            assert len(tp) == n, words  # nothing recorded by a refused call
    with g.Tape() as tp:  # a refused MultiheadAttention draws no key and registers nothing
        with pytest.raises(ValueError):
            g.nn.MultiheadAttention(tp, 6, 4)
        assert len(tp) == 0 and tp.keys_drawn == 0
