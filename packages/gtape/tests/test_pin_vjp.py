"""Every backward rule pinned bitwise to a scalar-loop evaluation of its documented formula.

Each row records one op on a tape with its inputs as parameters and the loss
``sum(y * G)``: the gradient reaching ``y`` is then exactly ``G`` (``1 * G``), so the
parameters' gradients are exactly the op's VJP applied to ``G``. The expected gradients are
computed element by element with numpy scalars (``np.float64``/``np.float32``: one IEEE
rounding per operation) from the formulas of docs/semantics.md and the ops' docstrings.
Finite differences, the torch oracle and numpy/sim parity cannot see a 1-ulp change in a rule
(a reassociated product, say); this table can. Rows run on normal values and on special
values (+-0, +-inf, NaN, subnormals, the largest normal), in float64 and float32.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape_testutil import applies
from gtensor import conv_loops as cl
from gtensor.ops.checks import POS
from gtensor.testing import bits_equal, first_difference

DTYPES = ["float64", "float32"]
F64_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
                1.7976931348623157e308, -1.0, 1.0, 0.5, 3e-39]


def data(shape: tuple, dtype: str, seed: int, kind: str, positive: bool = False) -> np.ndarray:
    """Seeded values: normal draws over several magnitudes, or about a third special values."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-3, 4, shape))
    if positive:
        x = np.abs(x) + 0.25
    if kind == "special":
        pick = rng.random(shape) < 0.35
        x = np.where(pick, rng.choice(F64_SPECIALS, shape), x)
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(dtype)


def _T(dtype: np.dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def ew(fn: Callable, *arrays: np.ndarray) -> np.ndarray:
    """``fn`` applied element by element to numpy scalars of the arrays' dtype."""
    a0 = np.asarray(arrays[0])
    T = _T(a0.dtype)
    out = np.empty(a0.shape, a0.dtype)
    with np.errstate(all="ignore"):
        for idx in np.ndindex(a0.shape):
            out[idx] = fn(*(T(np.asarray(a)[idx]) for a in arrays))
    return out


def loop_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Serial inner products, first product first, each op rounded (the matmul definition)."""
    T = _T(a.dtype)
    batch = a.shape[:-2]
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]), a.dtype)
    with np.errstate(all="ignore"):
        for idx in itertools.product(*[range(d) for d in batch]):
            for i in range(a.shape[-2]):
                for j in range(b.shape[-1]):
                    acc = T(0.0)
                    for k in range(a.shape[-1]):
                        p = T(a[idx + (i, k)]) * T(b[idx + (k, j)])
                        acc = p if k == 0 else acc + p
                    out[idx + (i, j)] = acc
    return out


def loop_sum_to(x: np.ndarray, shape: tuple) -> np.ndarray:
    """Per output slot, the serial sum (row-major, first element first) of what broadcasts to it."""
    T = _T(x.dtype)
    lead = x.ndim - len(shape)
    full = (1,) * lead + tuple(shape)
    out = np.zeros(full, x.dtype)
    first = np.ones(full, bool)
    with np.errstate(all="ignore"):
        for idx in np.ndindex(x.shape):  # row-major order
            o = tuple(0 if full[d] == 1 else i for d, i in enumerate(idx))
            out[o] = T(x[idx]) if first[o] else T(out[o]) + T(x[idx])
            first[o] = False
    return out.reshape(shape)


def _softmax_grad(gg: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    T = _T(y.dtype)
    gm, ym = np.moveaxis(gg, axis, -1), np.moveaxis(y, axis, -1)
    out = np.empty_like(ym)
    with np.errstate(all="ignore"):
        for idx in np.ndindex(ym.shape[:-1]):
            gr, yr = [T(v) for v in gm[idx]], [T(v) for v in ym[idx]]
            d = gr[0] * yr[0]
            for gi, yi in zip(gr[1:], yr[1:]):
                d = d + gi * yi
            out[idx] = [yi * (gi - d) for gi, yi in zip(gr, yr)]
    return np.moveaxis(out, -1, axis)


def _softmax_grad_dy(gg: np.ndarray, a: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """softmax_grad's d/dy: g * (a - d) - a * s, d = serial sum(a * y), s = serial sum(g * y)."""
    T = _T(y.dtype)
    gm, am, ym = (np.moveaxis(v, axis, -1) for v in (gg, a, y))
    out = np.empty_like(ym)
    with np.errstate(all="ignore"):
        for idx in np.ndindex(ym.shape[:-1]):
            gr, ar, yr = ([T(v) for v in m[idx]] for m in (gm, am, ym))
            d, s = ar[0] * yr[0], gr[0] * yr[0]
            for gi, ai, yi in zip(gr[1:], ar[1:], yr[1:]):
                d, s = d + ai * yi, s + gi * yi
            out[idx] = [gi * (ai - d) - ai * s for gi, ai in zip(gr, ar)]
    return np.moveaxis(out, -1, axis)


@dataclass(frozen=True)
class Row:
    """One backward rule: the recorded op, its input shapes and the expected gradients.

    ``want(ins, y, G, dtype)`` returns one gradient per input, from the documented formula.
    """

    name: str
    fn: Callable
    shapes: tuple
    want: Callable
    positive: tuple = ()  # inputs drawn positive (domain of log/sqrt for the normal rows)


def _mean_scale(n: int, dtype: str):
    return _T(dtype)(1.0 / n)  # muls rounds the Python scalar 1/n once to the dtype


S = (3, 4)
ROWS = [
    Row("adds", lambda x: g.adds(x, 0.3), (S,), lambda i, y, G, dt: [G]),
    Row("muls", lambda x: g.muls(x, 0.3), (S,),
        lambda i, y, G, dt: [ew(lambda q: q * _T(dt)(0.3), G)]),
    Row("sum", g.sum, (S,), lambda i, y, G, dt: [np.broadcast_to(G, S)]),
    Row("sum_axis0", lambda x: g.sum(x, 0), (S,), lambda i, y, G, dt: [np.broadcast_to(G, S)]),
    Row("sum_keepdims", lambda x: g.sum(x, 1, keepdims=True), (S,),
        lambda i, y, G, dt: [np.broadcast_to(G, S)]),
    Row("mean", g.mean, (S,), lambda i, y, G, dt: [
        np.broadcast_to(ew(lambda q: q * _mean_scale(12, dt), G), S)]),
    Row("mean_axis1", lambda x: g.mean(x, 1), (S,), lambda i, y, G, dt: [
        np.broadcast_to(ew(lambda q: q * _mean_scale(4, dt), G)[:, None], S)]),
    Row("sum_to", lambda x: g.sum_to(x, (1, 4)), (S,),
        lambda i, y, G, dt: [np.broadcast_to(G, S)]),
    Row("matmul", g.matmul, ((3, 5), (5, 2)), lambda i, y, G, dt: [
        loop_matmul(G, i[1].T.copy()), loop_matmul(i[0].T.copy(), G)]),
    # (..., m, k) @ (k, n) and linear's (..., k) @ w^T: the leading axes fold into rows; the
    # weight's gradient one chain over every folded row
    Row("matmul_folded", g.matmul, ((2, 3, 5), (5, 2)), lambda i, y, G, dt: [
        loop_matmul(G.reshape(6, 2), i[1].T.copy()).reshape(2, 3, 5),
        loop_matmul(i[0].reshape(6, 5).T.copy(), G.reshape(6, 2))]),
    Row("linear_3d", lambda x, w: g.linear(x, w), ((2, 3, 5), (4, 5)), lambda i, y, G, dt: [
        loop_matmul(G.reshape(6, 4), i[1]).reshape(2, 3, 5),
        loop_matmul(G.reshape(6, 4).T.copy(), i[0].reshape(6, 5))]),
    Row("bmm", g.bmm, ((2, 3, 4), (2, 4, 2)), lambda i, y, G, dt: [
        loop_matmul(G, i[1].transpose(0, 2, 1).copy()),
        loop_matmul(i[0].transpose(0, 2, 1).copy(), G)]),
    Row("transpose", lambda x: g.transpose(x, (2, 0, 1)), ((2, 3, 4),),
        lambda i, y, G, dt: [G.transpose(1, 2, 0)]),
    Row("reshape", lambda x: g.reshape(x, (4, 3)), (S,), lambda i, y, G, dt: [G.reshape(S)]),
    Row("copy", g.copy, (S,), lambda i, y, G, dt: [G]),
    Row("slice", lambda x: g.slice(x, 1, 1, 3), (S,), lambda i, y, G, dt: [
        np.concatenate([np.zeros((3, 1), dt), G, np.zeros((3, 1), dt)], axis=1)]),
    Row("pad", lambda x: g.pad(x, 1, 2, 1), (S,), lambda i, y, G, dt: [G[:, 2:6]]),
    Row("slice_head", lambda x: g.slice(x, 1, 0, 1), (S,), lambda i, y, G, dt: [
        np.concatenate([G, np.zeros((3, 3), dt)], axis=1)]),
    Row("concat", lambda a, b: g.concat([a, b], axis=1), ((3, 2), (3, 5)),
        lambda i, y, G, dt: [G[:, :2], G[:, 2:]]),
    Row("broadcast_to", lambda x: g.broadcast_to(x, (2, 3, 4)), ((3, 1),),
        lambda i, y, G, dt: [loop_sum_to(G, (3, 1))]),
    Row("softmax", lambda x: g.softmax(x, 1), (S,), lambda i, y, G, dt: [_softmax_grad(G, y, 1)]),
    Row("softmax_axis0", lambda x: g.softmax(x, 0), (S,),
        lambda i, y, G, dt: [_softmax_grad(G, y, 0)]),
    # the backward helpers' own rules (double backward): masks give +0.0
    Row("relu_grad", g.relu_grad, (S, S), lambda i, y, G, dt: [
        ew(lambda q, x: q if x > 0 else _T(dt)(0.0), G, i[1]), np.zeros(S, dt)]),
    Row("sigmoid_grad", g.sigmoid_grad, (S, S), lambda i, y, G, dt: [
        ew(lambda q, o: q * (o * (_T(dt)(1.0) - o)), G, i[1]),
        ew(lambda q, a, o: (q * a) * ((o * _T(dt)(-2.0)) + _T(dt)(1.0)), G, i[0], i[1])]),
    Row("tanh_grad", g.tanh_grad, (S, S), lambda i, y, G, dt: [
        ew(lambda q, o: q * (_T(dt)(1.0) - o * o), G, i[1]),
        ew(lambda q, a, o: (q * a) * (o * _T(dt)(-2.0)), G, i[0], i[1])]),
    Row("softmax_grad", lambda a, y: g.softmax_grad(a, y, 1), (S, S), lambda i, y, G, dt: [
        _softmax_grad(G, i[1], 1), _softmax_grad_dy(G, i[0], i[1], 1)]),
]
_TAKE_IDS = np.array([2, 0, 2, 1, 2])
_ALONG_IDS = np.array([[0, 0], [3, 1], [2, 3]])


def _our(name: str, x: np.ndarray) -> np.ndarray:
    """gtensor's elementwise op ``name`` on x (its numpy reference)."""
    from gtensor.dtypes import float_type
    from gtensor.ops import elementwise as E
    return getattr(E, name.upper())[float_type(x)].numpy(x)


def _our_exp(x: np.ndarray) -> np.ndarray:
    from gtensor.dtypes import float_type
    from gtensor.ops.elementwise import EXP
    return EXP[float_type(x)].numpy(x)


def _scatter_rows(G: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """take's backward by loops: each destination row the serial sum of its rows of G, in the
    order of their positions in ids (first contribution first; +0.0 where none)."""
    T = _T(G.dtype)
    out = np.zeros((n,) + G.shape[1:], G.dtype)
    with np.errstate(all="ignore"):
        for i in range(n):
            for col in np.ndindex(G.shape[1:]):
                acc = None
                for j, d in enumerate(ids):
                    if d == i:
                        v = T(G[(j, *col)])
                        acc = v if acc is None else acc + v
                out[(i, *col)] = T(0.0) if acc is None else acc
    return out


def _scatter_along(G: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    T = _T(G.dtype)
    out = np.zeros((G.shape[0], n), G.dtype)
    with np.errstate(all="ignore"):
        for r in range(G.shape[0]):
            for i in range(n):
                acc = None
                for k in range(G.shape[1]):
                    if ids[r, k] == i:
                        v = T(G[r, k])
                        acc = v if acc is None else acc + v
                out[r, i] = T(0.0) if acc is None else acc
    return out


def _log_softmax_grad(G: np.ndarray, y: np.ndarray) -> np.ndarray:
    """g - exp(y) * d per row (axis 1), d the serial sum of g, one rounding per operation."""
    T = _T(G.dtype)
    e = _our_exp(y)
    out = np.empty_like(G)
    with np.errstate(all="ignore"):
        for r in range(G.shape[0]):
            d = T(G[r, 0])
            for k in range(1, G.shape[1]):
                d = d + T(G[r, k])
            for k in range(G.shape[1]):
                out[r, k] = T(G[r, k]) - T(e[r, k]) * d
    return out


def _log_softmax_grad_vjp(G: np.ndarray, a: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """log_softmax_grad's rule by loops: e = exp(y); d/da = G - serial sum(G * e);
    d/dy = -((G * e) * serial sum(a)), per row of axis 1."""
    T = _T(G.dtype)
    e = _our_exp(y)
    da, dy = np.empty_like(G), np.empty_like(G)
    with np.errstate(all="ignore"):
        for r in range(G.shape[0]):
            ge = [T(G[r, k]) * T(e[r, k]) for k in range(G.shape[1])]
            s, d = ge[0], T(a[r, 0])
            for k in range(1, G.shape[1]):
                s, d = s + ge[k], d + T(a[r, k])
            for k in range(G.shape[1]):
                da[r, k] = T(G[r, k]) - s
                dy[r, k] = -(ge[k] * d)
    return [da, dy]


ROWS += [
    Row("where", lambda a, b: g.where(a > b, a, b), (S, S), lambda i, y, G, dt: [
        ew(lambda q, a, b: q if a > b else type(q)(0.0), G, i[0], i[1]),
        ew(lambda q, a, b: type(q)(0.0) if a > b else q, G, i[0], i[1])]),
    Row("take", lambda x: g.take(x, _TAKE_IDS, 0), (S,),
        lambda i, y, G, dt: [_scatter_rows(G, _TAKE_IDS, 3)]),
    Row("take_along_axis", lambda x: g.take_along_axis(x, _ALONG_IDS, 1), (S,),
        lambda i, y, G, dt: [_scatter_along(G, _ALONG_IDS, 4)]),
    Row("log_softmax", lambda x: g.log_softmax(x, 1), (S,),
        lambda i, y, G, dt: [_log_softmax_grad(G, y)]),
    Row("take_grad", lambda a: g.take_grad(a, _TAKE_IDS, 3, 0), ((5, 4),),
        lambda i, y, G, dt: [G[_TAKE_IDS]]),  # the adjoint of the scatter-add: the gather
    Row("take_along_axis_grad", lambda a: g.take_along_axis_grad(a, _ALONG_IDS, 4, 1), ((3, 2),),
        lambda i, y, G, dt: [np.take_along_axis(G, _ALONG_IDS, 1)]),
    Row("log_softmax_grad", lambda a, y: g.log_softmax_grad(a, y, 1), (S, S),
        lambda i, y, G, dt: _log_softmax_grad_vjp(G, i[0], i[1])),
    Row("logsumexp", lambda x: g.logsumexp(x, 1), (S,), lambda i, y, G, dt: [
        ew(lambda q, e: q * e, np.broadcast_to(G[:, None], S),
           _our_exp(ew(lambda a, m: a - m, i[0], np.broadcast_to(y[:, None], S))))]),
]
_DROP_KEY = 2**77 + 12345  # dropout's pinned row: the mask from numpy's own Philox


def _dropout_vjp(G: np.ndarray, p: float, dt: str) -> np.ndarray:
    """G * float(1/(1-p)) where numpy's Generator(Philox(key)).random() >= p, else +0.0."""
    u = np.random.Generator(np.random.Philox(key=_DROP_KEY)).random(G.size).reshape(G.shape)
    s = _T(dt)(1.0 / (1.0 - p))
    return ew(lambda q, keep: q * s if keep else type(q)(0.0), G, u >= p)


def _max(m, s):
    """The NaN-propagating max."""
    return m if np.isnan(m) else s if np.isnan(s) or s > m else m


def _qkv_attention_vjp(x: np.ndarray, G: np.ndarray, p: float, dt: str) -> np.ndarray:
    """qkv_attention's gradient (causal, dropout p from numpy's Philox) by scalar loops, per
    (b, h): s = (q . k) * scale (serial chains, first product first), -inf above the diagonal;
    y = exp(s - max) / serial sum; w = y / (1 - p) where kept; dy = (g . v) / (1 - p) where
    kept; dv = serial over i of w * g; d = serial sum dy * y; ds = y * (dy - d) (+0.0 where
    masked) * scale; dq, dk the serial chains of ds with k, q; each plus +0.0."""
    T = _T(dt)
    b_, t_, _, h_, d_ = x.shape
    sc, dsc, zero = T(1.0 / np.sqrt(d_)), T(1.0 / (1.0 - p)), T(0.0)
    keep = (np.random.Generator(np.random.Philox(key=_DROP_KEY)).random(b_ * h_ * t_ * t_)
            >= p).reshape(b_, h_, t_, t_)
    out = np.empty(x.shape, x.dtype)
    rt, rd = range(t_), range(d_)

    def chain(pairs):
        acc = None
        for a, c in pairs:
            acc = a * c if acc is None else acc + a * c
        return zero if acc is None else acc

    with np.errstate(all="ignore"):
        for b, h in itertools.product(range(b_), range(h_)):
            q, k, v = ([[T(x[b, i, c, h, e]) for e in rd] for i in rt] for c in range(3))
            gg = [[T(G[b, i, h, e]) for e in rd] for i in rt]
            y, dy, ds = ([[zero] * t_ for _ in rt] for _ in range(3))
            for i in rt:
                s = [chain(zip(q[i], k[j])) * sc if j <= i else T(-np.inf) for j in rt]
                m = s[0]
                for j in rt[1:]:
                    m = _max(m, s[j])
                e = [T(_our_exp(np.array(sj - m, dtype=dt))) for sj in s]
                tot = e[0]
                for j in rt[1:]:
                    tot = tot + e[j]
                y[i] = [ej / tot for ej in e]
                dy[i] = [chain(zip(gg[i], v[j])) * dsc if keep[b, h, i, j] else zero for j in rt]
                d = dy[i][0] * y[i][0]
                for j in rt[1:]:
                    d = d + dy[i][j] * y[i][j]
                ds[i] = [(y[i][j] * (dy[i][j] - d) if j <= i else zero) * sc for j in rt]
            w = [[y[i][j] * dsc if keep[b, h, i, j] else zero for j in rt] for i in rt]
            for j in rt:
                for e_ in rd:
                    out[b, j, 0, h, e_] = chain((ds[j][u], k[u][e_]) for u in rt) + zero
                    out[b, j, 1, h, e_] = chain((ds[u][j], q[u][e_]) for u in rt) + zero
                    out[b, j, 2, h, e_] = chain((w[u][j], gg[u][e_]) for u in rt) + zero
    return out


ROWS += [
    Row("dropout", lambda x: g.dropout(x, 0.375, g.rng.key(_DROP_KEY)), (S,),
        lambda i, y, G, dt: [_dropout_vjp(G, 0.375, dt)]),
    Row("qkv_attention", lambda x: g.qkv_attention(x, 0.375, True, key=g.rng.key(_DROP_KEY)),
        ((1, 3, 3, 2, 2),), lambda i, y, G, dt: [_qkv_attention_vjp(i[0], G, 0.375, dt)]),
]

# conv2d and the pools (gtensor.conv_loops: the definitions as scalar loops); a conv's
# input/weight gradients are each other's adjoints, so the double-backward rows pin those too
X5, W3, G3 = (2, 2, 5, 5), (3, 2, 3, 3), (2, 3, 3, 3)
P5, P2 = (1, 2, 5, 5), (1, 2, 2, 2)
ROWS += [
    Row("conv2d", lambda x, w: g.conv2d(x, w, stride=2, padding=1), (X5, W3),
        lambda i, y, G, dt: [cl.loop_conv2d_grad_input(G, i[1], 2, 1, (5, 5)),
                             cl.loop_conv2d_grad_weight(G, i[0], 2, 1, (3, 3))]),
    Row("conv2d_bias", lambda x, w, b: g.conv2d(x, w, b, stride=(1, 2), padding=(1, 0)),
        ((1, 2, 4, 5), (2, 2, 3, 3), (2,)),
        lambda i, y, G, dt: [cl.loop_conv2d_grad_input(G, i[1], (1, 2), (1, 0), (4, 5)),
                             cl.loop_conv2d_grad_weight(G, i[0], (1, 2), (1, 0), (3, 3)),
                             loop_sum_to(G, (2, 1, 1)).reshape(2)]),
    Row("conv2d_grad_input", lambda a, w: g.conv2d_grad_input(a, w, 2, 1, (5, 5)), (G3, W3),
        lambda i, y, G, dt: [cl.loop_conv2d(G, i[1], 2, 1),
                             cl.loop_conv2d_grad_weight(i[0], G, 2, 1, (3, 3))]),
    Row("conv2d_grad_weight", lambda a, x: g.conv2d_grad_weight(a, x, 2, 1, (3, 3)), (G3, X5),
        lambda i, y, G, dt: [cl.loop_conv2d(i[1], G, 2, 1),
                             cl.loop_conv2d_grad_input(i[0], G, 2, 1, (5, 5))]),
    Row("max_pool2d", lambda x: g.max_pool2d(x, 3, 2), (P5,),
        lambda i, y, G, dt: [cl.loop_max_pool2d_grad(G, i[0], 3, 2)]),
    Row("max_pool2d_grad", lambda a, x: g.max_pool2d_grad(a, x, 3, 2), (P2, P5),
        lambda i, y, G, dt: [cl.loop_max_pool2d_pick(G, i[1], 3, 2), np.zeros(P5, dt)]),
    Row("max_pool2d_pick", lambda v, x: g.max_pool2d_pick(v, x, 3, 2), (P5, P5),
        lambda i, y, G, dt: [cl.loop_max_pool2d_grad(G, i[1], 3, 2), np.zeros(P5, dt)]),
    Row("avg_pool2d", lambda x: g.avg_pool2d(x, 3, 2), (P5,),
        lambda i, y, G, dt: [cl.loop_avg_pool2d_grad(G, 3, 2, (5, 5))]),
    Row("avg_pool2d_grad", lambda a: g.avg_pool2d_grad(a, 3, 2, (5, 5)), (P2,),
        lambda i, y, G, dt: [cl.loop_avg_pool2d(G, 3, 2)]),
]
# issue 41: dilation and groups (the rules pass them on), padded / dilated / ceil-mode pools
# (the same windows both ways), adaptive pooling
XG, WG, GG = (1, 4, 6, 5), (4, 2, 3, 2), (1, 4, 2, 3)  # stride 2, padding 1, dilation 2, groups 2
CG = {"dilation": 2, "groups": 2}
MP = {"padding": 1, "dilation": (1, 2), "ceil_mode": True}  # kernel 3, stride 2 over (6, 7)
AP = {"padding": 1, "ceil_mode": True, "count_include_pad": False}  # kernel 3, stride 2 (6, 5)
ROWS += [
    Row("conv2d_dilation_groups", lambda x, w: g.conv2d(x, w, None, 2, 1, 2, 2), (XG, WG),
        lambda i, y, G, dt: [cl.loop_conv2d_grad_input(G, i[1], 2, 1, (6, 5), **CG),
                             cl.loop_conv2d_grad_weight(G, i[0], 2, 1, (3, 2), **CG)]),
    Row("conv2d_grad_input_groups", lambda a, w: g.conv2d_grad_input(a, w, 2, 1, (6, 5), 2, 2),
        (GG, WG), lambda i, y, G, dt: [cl.loop_conv2d(G, i[1], 2, 1, **CG),
                                       cl.loop_conv2d_grad_weight(i[0], G, 2, 1, (3, 2), **CG)]),
    Row("conv2d_grad_weight_groups", lambda a, x: g.conv2d_grad_weight(a, x, 2, 1, (3, 2), 2, 2),
        (GG, XG), lambda i, y, G, dt: [cl.loop_conv2d(i[1], G, 2, 1, **CG),
                                       cl.loop_conv2d_grad_input(i[0], G, 2, 1, (6, 5), **CG)]),
    Row("max_pool2d_padded", lambda x: g.max_pool2d(x, 3, 2, **MP), ((1, 2, 6, 7),),
        lambda i, y, G, dt: [cl.loop_max_pool2d_grad(G, i[0], 3, 2, **MP)]),
    Row("max_pool2d_pick_padded", lambda v, x: g.max_pool2d_pick(v, x, 3, 2, **MP),
        ((1, 2, 6, 7), (1, 2, 6, 7)),
        lambda i, y, G, dt: [cl.loop_max_pool2d_grad(G, i[1], 3, 2, **MP), np.zeros(
            (1, 2, 6, 7), dt)]),
    Row("avg_pool2d_padded", lambda x: g.avg_pool2d(x, 3, 2, **AP), ((1, 2, 6, 5),),
        lambda i, y, G, dt: [cl.loop_avg_pool2d_grad(G, 3, 2, (6, 5), **AP)]),
    Row("avg_pool2d_grad_padded", lambda a: g.avg_pool2d_grad(a, 3, 2, (6, 5), **AP),
        ((1, 2, 4, 3),), lambda i, y, G, dt: [cl.loop_avg_pool2d(G, 3, 2, **AP)]),
    Row("adaptive_avg_pool2d", lambda x: g.adaptive_avg_pool2d(x, (3, 2)), ((1, 2, 7, 5),),
        lambda i, y, G, dt: [cl.loop_adaptive_avg_pool2d_grad(G, (7, 5))]),
    Row("adaptive_avg_pool2d_grad", lambda a: g.adaptive_avg_pool2d_grad(a, (7, 5)),
        ((1, 2, 3, 2),), lambda i, y, G, dt: [cl.loop_adaptive_avg_pool2d(G, (3, 2))]),
]


def declared_rows(registry: dict) -> list[Row]:
    """The rows of the ops of ``registry`` that declare a pin (``Op.checks.pin``): the
    declared formula, on the declared pin shapes; POS inputs drawn positive."""
    rows = []
    for name, op in sorted(registry.items()):
        c = op.checks
        if c is None or c.pin is None:
            continue
        attrs = c.sample[1]
        rows.append(Row(name, applies(op, attrs), tuple(c.pin_inputs), _declared_want(c.pin),
                        tuple(k for k, d in enumerate(c.domain) if d == POS)))
    return rows



def _declared_want(pin: Callable) -> Callable:
    return lambda i, y, G, dt: pin(i, y, G)


def covered(rows: list[Row]) -> set[str]:
    """The op names the rows pin (a row's name up to a variant suffix)."""
    return {r.name.split("_axis0")[0].split("_axis1")[0].split("_keepdims")[0].split("_head")[0]
            for r in rows}


HAND_ROWS = list(ROWS)
ROWS += declared_rows(gtensor.REGISTRY)
COVERED = covered(ROWS)


def missing_rows(registry: dict) -> list[str]:
    """Differentiable ops of ``registry`` pinned by no hand row and declaring no pin."""
    have = covered(HAND_ROWS + declared_rows(registry))
    return sorted(n for n, op in registry.items() if op.vjp is not None and n not in have)


def tape_grads(bname: str, dtype: str, row: Row, ins: list[np.ndarray], G: np.ndarray):
    """Record ``row.fn`` on a tape with loss sum(y * G); (y, parameter gradients) as numpy."""
    with g.Tape(bname, dtype) as tp:
        ps = [tp.param(x) for x in ins]
        y = row.fn(*ps)
        tp.backward(g.sum(g.mul(y, tp.const(G))))
        be = tp.backend
        return be.to_numpy(tp.value(y)), [be.to_numpy(tp.grad(p)) for p in ps]


def test_every_differentiable_op_has_a_row():
    missing = missing_rows(gtensor.REGISTRY)
    assert not missing, f"backward rules without a pin row: {missing}"


def test_an_op_without_checks_or_row_is_reported():
    """The coverage test can fail: softplus registered without its ``checks`` is missing."""
    import dataclasses

    reg = dict(gtensor.REGISTRY)
    reg["softplus"] = dataclasses.replace(reg["softplus"], checks=None)
    assert missing_rows(reg) == ["softplus"]


@pytest.mark.parametrize("kind", ["normal", "special"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_vjp_bitwise_against_formula(bname, row, dtype, kind):
    seed = sum(map(ord, row.name)) + (7 if kind == "special" else 0)
    ins = [data(s, dtype, seed + k, kind, positive=k in row.positive and kind == "normal")
           for k, s in enumerate(row.shapes)]
    with g.Tape("numpy", dtype) as probe:
        out_shape = row.fn(*[probe.param(x) for x in ins]).shape
    G = data(out_shape, dtype, seed + 100, "special" if kind == "special" else "normal")
    y, grads = tape_grads(bname, dtype, row, ins, G)
    want = row.want(ins, y, G, dtype)
    assert len(want) == len(grads)
    for k, (w, got) in enumerate(zip(want, grads)):
        w = np.ascontiguousarray(w, dtype=dtype)
        assert bits_equal(w, got), (f"{row.name} d/d input {k} ({dtype}, {kind}): "
                                    f"{first_difference(w, got)}\ninputs={ins}\nG={G}")


@pytest.mark.parametrize("row", [r for r in ROWS if len(r.shapes) > 1], ids=lambda r: r.name)
def test_vjp_with_one_input_frozen(bname, row):
    """Only input k is a parameter (the others consts): the rule still gives d/d input k."""
    dtype = "float64"
    seed = sum(map(ord, row.name))
    ins = [data(s, dtype, seed + k, "normal", positive=k in row.positive)
           for k, s in enumerate(row.shapes)]
    with g.Tape("numpy", dtype) as probe:
        out_shape = row.fn(*[probe.param(x) for x in ins]).shape
    G = data(out_shape, dtype, seed + 100, "normal")
    for k in range(len(ins)):
        with g.Tape(bname, dtype) as tp:
            vs = [tp.param(x) if j == k else tp.const(x) for j, x in enumerate(ins)]
            y = row.fn(*vs)
            tp.backward(g.sum(g.mul(y, tp.const(G))))
            got = tp.backend.to_numpy(tp.grad(vs[k]))
            yv = tp.backend.to_numpy(tp.value(y))
        w = np.ascontiguousarray(row.want(ins, yv, G, dtype)[k], dtype=dtype)
        assert bits_equal(w, got), f"{row.name} d/d input {k} alone: {first_difference(w, got)}"


def test_matmul_vjp_zero_signs(bname):
    """Every product of each dot is -0.0: the serial sum keeps -0.0 (an accumulator starting at
    +0.0 would give +0.0)."""
    a = np.array([[-0.0, 0.0, -0.0]])  # (1, 3)
    b = np.array([[1.0], [-2.0], [3.0]])  # (3, 1)
    G = np.array([[2.0]])
    row = ROWS[[r.name for r in ROWS].index("matmul")]
    y, (ga, gb) = tape_grads(bname, "float64", row, [a, b], G)
    want_ga = np.array([[2.0, -4.0, 6.0]])
    want_gb = np.array([[-0.0], [0.0], [-0.0]])
    assert bits_equal(ga, want_ga), first_difference(ga, want_ga)
    assert bits_equal(gb, want_gb), first_difference(gb, want_gb)
    # dA = G @ B^T with k = 1; now a dot with several products, all -0.0:
    G2 = np.array([[-0.0, 0.0]])  # (1, 2)
    b2 = np.array([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]])  # (3, 2): products -0, -0
    a2 = np.ones((1, 3))
    with g.Tape(bname) as tp:
        pa, pb = tp.param(a2), tp.param(b2)
        tp.backward(g.sum(g.mul(g.matmul(pa, pb), tp.const(G2))))
        ga2 = tp.backend.to_numpy(tp.grad(pa))
    # ga2[0, k] = -0*b[k,0] + 0*b[k,1]: k=1 gives -0*3 + 0*-4 = -0 + -0 = -0
    want = np.array([[-0.0 * 1.0 + 0.0 * 2.0, -0.0 * 3.0 + 0.0 * -4.0, -0.0 * 5.0 + 0.0 * 6.0]])
    assert bits_equal(ga2, want), first_difference(ga2, want)
    assert np.signbit(ga2[0, 1]), ga2


def test_mean_over_an_empty_axis(bname):
    """mean over a length-0 axis is NaN (0/0); its backward runs and gives an empty gradient."""
    with g.Tape(bname) as tp:
        x = tp.param(np.zeros((0, 3)))
        y = g.mean(x, 0)
        tp.backward(g.sum(g.mul(y, tp.const(np.ones(3)))))
        assert np.isnan(tp.backend.to_numpy(tp.value(y))).all()
        assert tp.backend.to_numpy(tp.grad(x)).shape == (0, 3)
