"""Central finite differences through every differentiable op (table-driven; fan-out included).

An op that declares its checks (``Op.checks``) gets its row from the declaration
(``declared_rows``); any other op needs a row here (``test_every_op_has_a_row`` enforces it).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape_testutil import applies, central_fd, host, rel_err, report
from gtensor.ops.checks import ANY, AWAY0, POS


@dataclass(frozen=True)
class Row:
    """One op (or composite) under test: its inputs' shapes and domains (the ops it covers
    are what its build records: ``recorded_ops``)."""

    id: str
    build: Callable[..., g.Var]
    shapes: tuple[tuple[int, ...], ...]
    domains: tuple[str, ...] | str = ANY

    def domain(self, k: int) -> str:
        return self.domains if isinstance(self.domains, str) else self.domains[k]


ROWS = [
    Row("add_bcast_both", g.add, ((2, 1, 3), (4, 1))),
    Row("sub_bcast", g.sub, ((3, 1), (1, 4))),
    Row("mul_bcast", g.mul, ((3, 4), (3, 1))),
    Row("adds", lambda x: g.adds(x, 0.75), ((2, 3),)),
    Row("muls", lambda x: g.muls(x, -1.5), ((2, 3),)),
    Row("sum_all", g.sum, ((3, 4),)),
    Row("sum_axis1_keep", lambda x: g.sum(x, axis=1, keepdims=True), ((3, 4),)),
    Row("sum_axis0", lambda x: g.sum(x, axis=0), ((2, 3, 2),)),
    Row("mean_all", g.mean, ((3, 4),)),
    Row("mean_axis_last", lambda x: g.mean(x, axis=-1), ((2, 3, 2),)),
    Row("sum_to", lambda x: g.sum_to(x, (1, 4)), ((3, 4),)),
    Row("sum_to_lead", lambda x: g.sum_to(x, (3, 1)), ((2, 3, 4),)),
    Row("broadcast_to", lambda x: g.broadcast_to(x, (3, 4)), ((4,),)),
    Row("matmul", g.matmul, ((3, 4), (4, 2))),
    Row("matmul_folded", g.matmul, ((2, 3, 4), (4, 2))),
    Row("linear_3d", lambda x, w: g.linear(x, w), ((2, 3, 4), (5, 4))),
    Row("bmm", g.bmm, ((2, 3, 4), (2, 4, 2))),
    Row("transpose_2d", g.transpose, ((3, 4),)),
    Row("transpose_perm", lambda x: g.transpose(x, (2, 0, 1)), ((2, 3, 4),)),
    Row("reshape", lambda x: g.reshape(x, (2, -1)), ((3, 4),)),
    Row("copy", g.copy, ((3, 4),)),
    Row("slice", lambda x: g.slice(x, 1, 1, 4), ((4, 5),)),
    Row("pad", lambda x: g.pad(x, 0, 1, 2), ((2, 3),)),
    Row("concat3", lambda a, b, c: g.concat([a, b, c], axis=1), ((2, 3), (2, 1), (2, 2))),
    Row("softmax_last", g.softmax, ((3, 4),)),
    Row("softmax_axis0", lambda x: g.softmax(x, axis=0), ((3, 4),)),
    # the backward helpers: differentiable too (double backward); masks are piecewise constant
    Row("relu_grad", g.relu_grad, ((3, 4), (3, 4)), (ANY, AWAY0)),
    Row("sigmoid_grad", g.sigmoid_grad, ((3, 4), (4,))),
    Row("tanh_grad", g.tanh_grad, ((3, 4), (3, 1))),
    Row("softmax_grad", lambda a, y: g.softmax_grad(a, y, axis=0), ((3, 4), (3, 4))),
    Row("mse", g.mse, ((3, 2), (3, 2))),
    Row("fanout_square_tanh", lambda x: g.mul(x, x) + g.tanh(x) * x, ((2, 3),)),
    Row("fanout_gram", lambda a: a @ g.transpose(a), ((3, 2),)),
    Row("fanout_three_consumers", lambda x: g.concat([g.exp(x), x, g.sum(x, 0, True)], 0),
        ((2, 3),)),
    Row("operators", lambda a, b: (2.0 * a - b) / (b * b + 1.0) - 1.0 / (a * a + 2.0) + (-a),
        ((2, 3), (2, 3))),
    Row("scalar_div", lambda x: x / 3.0 + 3.0 / x - (1.0 - x), ((2, 3),), AWAY0),
    Row("where", lambda a, b: g.where(a > b, a * a, b), ((3, 4), (4,))),
    Row("take_repeats", lambda x: g.take(x, np.array([2, 0, 2, -1]), 0), ((3, 4),)),
    Row("take_axis1_2d_ids", lambda x: g.take(x, np.array([[1, 1], [0, 3]]), 1), ((3, 4),)),
    Row("take_along_axis", lambda x: g.take_along_axis(x, np.array([[1, 1], [0, 3], [2, 2]]), 1),
        ((3, 4),)),
    Row("log_softmax", g.log_softmax, ((3, 4),)),
    Row("log_softmax_axis0", lambda x: g.log_softmax(x, 0), ((3, 4),)),
    Row("logsumexp", lambda x: g.logsumexp(x, 1), ((3, 4),)),
    Row("take_grad", lambda a: g.take_grad(a, np.array([2, 0, 2, 1, 2]), 3, 0), ((5, 4),)),
    Row("take_along_axis_grad",
        lambda a: g.take_along_axis_grad(a, np.array([[0, 0], [3, 1], [2, 3]]), 4, 1),
        ((3, 2),)),
    Row("log_softmax_grad", lambda a, y: g.log_softmax_grad(a, y, 1), ((3, 4), (3, 4))),
    Row("cross_entropy_ignore", lambda z: g.cross_entropy(z, [1, -100, 3], ignore_index=-100),
        ((3, 4),)),
    Row("dropout", lambda x: g.dropout(x, 0.4, g.rng.key(99)), ((4, 5),)),
    Row("qkv_attention", lambda x: g.qkv_attention(x, 0.3, True, key=g.rng.key(99)),
        ((2, 4, 3, 2, 3),)),
    Row("qkv_attention_full", lambda x: g.qkv_attention(x, scale=-0.6), ((1, 3, 3, 2, 2),)),
    Row("bce_with_logits", lambda z: g.bce_with_logits(z, np.array([[1.0, 0.0, 0.3]])),
        ((1, 3),), AWAY0),
    Row("layer_norm", g.layer_norm, ((3, 5), (5,), (5,))),
    Row("layer_norm_3d_plain", g.layer_norm, ((2, 2, 4),)),
    Row("rms_norm", g.rms_norm, ((3, 5), (5,))),
]
# conv2d (bias, strides, paddings, odd sizes), its gradients and the pools (distinct random
# values: no ties, so the max-pool choice is stable under the differences' steps)
ROWS += [
    Row("conv2d_bias", lambda x, w, b: g.conv2d(x, w, b, stride=1, padding=1),
        ((2, 2, 5, 4), (3, 2, 3, 3), (3,))),
    Row("conv2d_stride_pad", lambda x, w: g.conv2d(x, w, stride=(2, 1), padding=(0, 2)),
        ((1, 2, 5, 5), (2, 2, 2, 3))),
    Row("conv2d_grad_input", lambda a, w: g.conv2d_grad_input(a, w, 2, 1, (5, 5)),
        ((1, 3, 3, 3), (3, 2, 3, 3))),
    Row("conv2d_grad_weight", lambda a, x: g.conv2d_grad_weight(a, x, 2, 1, (3, 3)),
        ((1, 3, 3, 3), (1, 2, 5, 5))),
    Row("max_pool2d_overlap", lambda x: g.max_pool2d(x, 3, 2), ((1, 2, 5, 5),)),
    Row("max_pool2d", lambda x: g.max_pool2d(x, 2), ((2, 1, 4, 6),)),
    Row("max_pool2d_grad", lambda a, x: g.max_pool2d_grad(a, x, 3, 2),
        ((1, 2, 2, 2), (1, 2, 5, 5))),
    Row("max_pool2d_pick", lambda v, x: g.max_pool2d_pick(v, x, (2, 3), 1),
        ((1, 2, 4, 5), (1, 2, 4, 5))),
    Row("avg_pool2d", lambda x: g.avg_pool2d(x, 3, (1, 2)), ((1, 2, 5, 6),)),
    Row("avg_pool2d_grad", lambda a: g.avg_pool2d_grad(a, 3, 2, (6, 5)), ((1, 2, 2, 2),)),
]
# issue 41: dilated and grouped conv (depthwise), conv_transpose2d, padded / dilated / ceil-mode
# pools, adaptive pooling, nearest upsampling, layer_norm over 2 axes, group_norm, batch_norm
ROWS += [
    Row("conv2d_dilation_groups", lambda x, w, b: g.conv2d(x, w, b, 2, 1, (2, 1), 2),
        ((2, 4, 6, 5), (4, 2, 3, 2), (4,))),
    Row("conv2d_depthwise", lambda x, w: g.conv2d(x, w, padding=1, groups=3),
        ((1, 3, 4, 4), (3, 1, 3, 3))),
    Row("conv2d_grad_input_groups", lambda a, w: g.conv2d_grad_input(a, w, 2, 1, (6, 5), 2, 2),
        ((1, 4, 2, 3), (4, 1, 3, 2))),
    Row("conv2d_grad_weight_groups", lambda a, x: g.conv2d_grad_weight(a, x, 1, 1, (2, 2), 2,
                                                                        2), ((1, 4, 5, 5),
                                                                             (1, 2, 5, 5))),
    Row("conv_transpose2d", lambda x, w, b: g.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1),
        ((1, 4, 3, 3), (4, 1, 3, 3), (2,))),
    Row("max_pool2d_pad_dil_ceil", lambda x: g.max_pool2d(x, 3, 2, 1, 2, True), ((1, 2, 7, 6),)),
    Row("max_pool2d_grad_pad", lambda a, x: g.max_pool2d_grad(a, x, 3, 2, 1),
        ((1, 2, 3, 3), (1, 2, 5, 5))),
    Row("max_pool2d_pick_pad", lambda v, x: g.max_pool2d_pick(v, x, 2, 2, 1, 1, True),
        ((1, 1, 5, 4), (1, 1, 5, 4))),
    Row("avg_pool2d_pad_ceil", lambda x: g.avg_pool2d(x, 3, 2, 1, True, False), ((1, 2, 6, 5),)),
    Row("avg_pool2d_grad_pad", lambda a: g.avg_pool2d_grad(a, 2, 2, (4, 5), 1, True, True),
        ((1, 2, 3, 3),)),
    Row("adaptive_avg_pool2d", lambda x: g.adaptive_avg_pool2d(x, (3, 2)), ((1, 2, 7, 5),)),
    Row("adaptive_avg_pool2d_grad", lambda a: g.adaptive_avg_pool2d_grad(a, (5, 4)),
        ((1, 2, 3, 3),)),
    Row("interpolate_nearest", lambda x: g.interpolate(x, scale_factor=(2, 3)),
        ((1, 2, 2, 3),)),
    Row("layer_norm_2_axes", lambda x, w, b: g.layer_norm(x, (3, 4), w, b),
        ((2, 3, 4), (3, 4), (3, 4))),
    Row("group_norm", lambda x, w, b: g.group_norm(x, 2, w, b), ((2, 4, 3, 2), (4,), (4,))),
    Row("batch_norm_train", lambda x, w, b: g.batch_norm(x, None, None, w, b, True),
        ((3, 2, 2, 3), (2,), (2,))),
]


def declared_rows(registry: dict) -> list[Row]:
    """The rows of the ops of ``registry`` that declare their checks (``Op.checks.sample``),
    unless the declaration says why central differences do not apply (``Checks.fd``)."""
    rows = []
    for name, op in sorted(registry.items()):
        if op.checks is None or op.checks.fd:
            continue
        shapes_, attrs = op.checks.sample
        rows.append(Row(name, applies(op, attrs), tuple(shapes_), op.checks.domain))
    return rows



ROWS += declared_rows(gtensor.REGISTRY)
NONDIFF = {name for name, op in gtensor.REGISTRY.items() if not op.differentiable}


def draw(rng: np.random.Generator, shape: tuple, domain: str) -> np.ndarray:
    """Inputs in a row's domain (away from kinks and poles)."""
    if domain == POS:
        return rng.uniform(0.5, 2.0, shape)
    if domain == AWAY0:
        return rng.uniform(0.2, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    return rng.normal(0.0, 1.0, shape)


def recorded_ops(row: Row) -> set[str]:
    """The ops ``row.build`` records on a tape (its nodes, leaves excluded)."""
    rng = np.random.default_rng(0)
    with g.Tape("numpy") as tp:
        ps = [tp.param(draw(rng, s, row.domain(k))) for k, s in enumerate(row.shapes)]
        n = len(tp)
        row.build(*ps)
        return {node.name for node in tp.nodes()[n:]}


def recorded_ops(row: Row) -> set[str]:
    """The ops ``row.build`` records on a tape (its nodes, leaves excluded)."""
    rng = np.random.default_rng(0)
    with g.Tape("numpy") as tp:
        ps = [tp.param(draw(rng, s, row.domain(k))) for k, s in enumerate(row.shapes)]
        n = len(tp)
        row.build(*ps)
        return {node.name for node in tp.nodes()[n:]}


def missing_rows(registry: dict, hand_rows: list[Row]) -> list[str]:
    """The differentiable ops of ``registry`` no row records (hand rows + declared rows)."""
    rows = hand_rows + declared_rows(registry)
    covered = set().union(*(recorded_ops(row) for row in rows))
    return sorted(n for n, op in registry.items() if op.differentiable and n not in covered)


HAND_ROWS = [r for r in ROWS
             if r.id not in gtensor.REGISTRY or gtensor.REGISTRY[r.id].checks is None]


def test_every_op_has_a_row():
    """Adding a gtensor op means declaring its checks, or adding a row here."""
    assert not missing_rows(gtensor.REGISTRY, HAND_ROWS), "ops without a finite-difference row"
    assert all(not gtensor.REGISTRY[n].differentiable for n in NONDIFF)


def test_an_op_without_checks_or_row_is_reported():
    """The coverage test can fail: an op like softplus registered without its ``checks``
    (and no hand row) is missing; with its declaration it is covered."""
    import dataclasses

    reg = dict(gtensor.REGISTRY)
    bare = dataclasses.replace(reg["softplus"], name="softplus", checks=None)
    reg["softplus"] = bare
    assert missing_rows(reg, HAND_ROWS) == ["softplus"]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_finite_differences(bname, row):
    rng = np.random.default_rng(zlib.crc32(row.id.encode()))
    xs = [draw(rng, s, row.domain(k)) for k, s in enumerate(row.shapes)]
    with g.Tape(bname) as tp:
        ps = [tp.param(x) for x in xs]
        out = row.build(*ps)
        weights = rng.normal(0.0, 1.0, out.shape)
        tp.backward(g.sum(out * weights))
        grads = [host(tp, tp.grad(p)) for p in ps]

    with g.Tape(bname) as ft:
        start = ft.mark()

        def f(vals: list[np.ndarray]) -> float:
            ft.reset_to(start)
            return float(host(ft, ft.value(g.sum(row.build(*map(ft.const, vals)) * weights))))

        worst = 0.0
        for k in range(len(xs)):
            fd = central_fd(f, xs, k)
            worst = max(worst, rel_err(grads[k], fd))
    report("finite-difference relative error", f"{row.id}[{bname}]", worst)
    print(f"{row.id}: worst relative error {worst:.2e}")
    assert worst < 1e-6, f"{row.id}: analytic vs central differences differ by {worst:.3e}"
