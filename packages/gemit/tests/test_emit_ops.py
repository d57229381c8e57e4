"""Every op with a kernel, emitted as C, is bitwise equal to the tape on random examples.

One row per op (forward on the gradient path, so its backward is emitted too; the backward-only
ops sit on a const branch). Each row: emit once, compile once, compare 12 random examples.
"""

from __future__ import annotations

import zlib

import gtape as g
import numpy as np
import pytest
from gemit_testutil import _record, check_examples
from gtensor.ops import REGISTRY
from gtensor.ops.checks import POS
from gtensor.ops.optim import UPDATE_OPS


def _n(*shape: int):
    return lambda r: r.normal(size=shape)


def _d(*shape: int):  # a few discrete values, so that ties and equalities occur
    return lambda r: r.integers(-2, 3, size=shape).astype(np.float64)


def _ids(lo: int, hi: int, *shape: int):  # per-example int64 inputs (example_ids)
    return lambda r: r.integers(lo, hi, size=shape, dtype=np.int64)


def _int(w, ids):  # an int64 input as a Var (the episode's next typed leaf)
    return w.tape.const(ids, dtype="int64")


def _wraps(w, i, j):  # -w where i + j did not wrap below i, w * w where it did
    return g.sum(g.where(g.less(i + j, i), w * w, -w))


def _mask(*shape: int):  # a per-example bool input (example_ids, nonzero = true)
    return lambda r: r.random(shape) < 0.5


def _cmp(op):  # a comparison's bool result as where's condition
    return lambda w, x: g.sum(g.where(op(w, x), w * x, g.neg(w)) * x)


# baked typed leaves (neither params nor inputs): int64 / bool constant tables
MASK = np.array([[True, False, True, True], [False, False, True, False]])
IDS = np.array([[3, 0], [3, -1]], dtype=np.int64)


def _moves(w, i, m):  # int64 ids and a bool mask through the movement ops' typed kernels
    ids, mask = w.tape.const(i, dtype="int64"), w.tape.const(m, dtype="bool")
    flat = g.reshape(ids, (4,))
    ids6 = g.concat([g.slice(flat, 0, 0, 2), g.copy(flat)], 0)
    rows = g.take(w, ids6, 0)  # (6, 3)
    keep = g.broadcast_to(g.transpose(g.slice(mask, 1, 0, 1)), (6, 3))
    big = g.broadcast_to(g.reshape(ids6 > 3, (6, 1)), (6, 3))  # an int64 comparison
    return g.sum(g.where(keep, rows * rows, g.where(big, rows, g.neg(rows))))


def _sq1(x):  # positive, away from zero: x*x + 1
    return g.adds(x * x, 1.0)


# name: (param makers, input makers, build(*params, *inputs) -> scalar loss)
CASES = {
    "add_broadcast": ([_n(4)], [_n(3, 4)], lambda w, x: g.sum((x + w) * (x + w))),
    "adds": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.adds(w, 1.5) * x)),
    "muls": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.muls(w, -0.75) * x)),
    "matmul": ([_n(3, 4), _n(4)], [_n(2, 3)], lambda w, b, x: g.sum(g.tanh(x @ w + b))),
    "matmul_folded": ([_n(3, 4)], [_n(2, 2, 4)], lambda w, x: g.sum(g.tanh(g.linear(x, w)))),
    "bmm": ([_n(2, 3, 2)], [_n(2, 2, 3)], lambda w, x: g.sum(g.bmm(x, w) * g.bmm(x, w))),
    "copy": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.copy(w) * x)),
    "transpose": ([_n(2, 3)], [_n(3, 2)], lambda w, x: g.sum(g.transpose(w) * x)),
    "transpose_3d": ([_n(2, 3, 4)], [_n(4, 2, 3)],
                     lambda w, x: g.sum(g.transpose(w, (2, 0, 1)) * x)),
    "reshape": ([_n(2, 3)], [_n(3, 2)], lambda w, x: g.sum(g.reshape(w, (3, 2)) * x)),
    "slice": ([_n(2, 5)], [_n(2, 2)], lambda w, x: g.sum(g.slice(w, 1, 1, 3) * x)),
    "pad": ([_n(2, 3)], [_n(5, 3)], lambda w, x: g.sum(g.pad(w, 0, 1, 2) * x)),
    "concat": ([_n(2, 3)], [_n(1, 3), _n(3, 3)],
               lambda w, c, x: g.sum(g.concat([w, c], axis=0) * x)),
    "broadcast_to": ([_n(4)], [_n(3, 4)], lambda w, x: g.sum(g.broadcast_to(w, (3, 4)) * x)),
    "sum_axis": ([_n(3, 4)], [_n(3, 4), _n(3)],
                 lambda w, x, y: g.sum(g.sum(w * x, axis=1) * y)),
    "mean": ([_n(3, 4)], [_n(3, 4), _n(1, 4)],
             lambda w, x, y: g.sum(g.mean(w * x, axis=0, keepdims=True) * y)),
    "mean_all": ([_n(3, 4)], [_n(3, 4)], lambda w, x: g.mean(w * x)),
    "sum_to": ([_n(3, 4)], [_n(3, 4), _n(1, 4)],
               lambda w, x, y: g.sum(g.sum_to(w * x, (1, 4)) * y)),
    "softmax": ([_n(2, 5)], [_n(2, 5), _n(2, 5)],
                lambda w, x, y: g.sum(g.softmax(w * x, axis=-1) * y)),
    "softmax_axis0": ([_n(4, 3)], [_n(4, 3), _n(4, 3)],
                      lambda w, x, y: g.sum(g.softmax(w * x, axis=0) * y)),
    "mse": ([_n(2, 3)], [_n(2, 3), _n(2, 3)], lambda w, x, t: g.mse(w * x, t)),
    "relu_grad": ([_n(4)], [_n(4), _n(4)], lambda w, a, b: g.sum(w * g.relu_grad(a, b))),
    "bn_sum_squares": ([_n(1, 3, 1)], [_n(2, 3, 2)],
                       lambda w, x: g.sum(w * g.ops.apply("bn_sum_squares", (
                           x, g.mean(x, axis=(0, 2), keepdims=True))))),
    "sigmoid_grad": ([_n(4)], [_n(4), _n(4)],
                     lambda w, a, b: g.sum(w * g.sigmoid_grad(a, g.sigmoid(b)))),
    "tanh_grad": ([_n(4)], [_n(4), _n(4)],
                  lambda w, a, b: g.sum(w * g.tanh_grad(a, g.tanh(b)))),
    "softmax_grad": ([_n(2, 4)], [_n(2, 4), _n(2, 4)],
                     lambda w, a, b: g.sum(w * g.softmax_grad(a, g.softmax(b)))),
    "log_softmax": ([_n(2, 5)], [_n(2, 5), _n(2, 5)],
                    lambda w, x, y: g.sum(g.log_softmax(w * x, axis=-1) * y)),
    "logsumexp": ([_n(3, 4)], [_n(3, 4), _n(3)],
                  lambda w, x, y: g.sum(g.logsumexp(w * x, axis=1) * y)),
    # typed inputs and results: int64 ids / labels and bool masks
    "where": ([_n(3, 4)], [_n(3, 4), _mask(3, 4)],
              lambda w, x, m: g.sum(g.where(m, w * x, g.neg(w)) * x)),
    "where_baked_mask": ([_n(2, 4)], [_n(2, 4)],
                         lambda w, x: g.sum(g.where(MASK, w, x) * w)),
    "greater": ([_d(3, 4)], [_d(4)], _cmp(g.greater)),
    "greater_equal": ([_d(3, 4)], [_d(4)], _cmp(g.greater_equal)),
    "less": ([_d(3, 4)], [_d(4)], _cmp(g.less)),
    "less_equal": ([_d(3, 4)], [_d(4)], _cmp(g.less_equal)),
    "equal": ([_d(3, 4)], [_d(4)], _cmp(g.equal)),
    "not_equal": ([_d(3, 4)], [_d(4)], _cmp(g.not_equal)),
    "take": ([_n(5, 3)], [_n(6, 3), _ids(-5, 5, 6)],
             lambda w, x, i: g.sum(g.take(w, i, axis=0) * x)),
    "take_axis1_2d_ids": ([_n(3, 4)], [_n(3, 2, 2), _ids(0, 4, 2, 2)],
                          lambda w, x, i: g.sum(g.take(w, i, axis=1) * x)),
    "take_baked_ids": ([_n(3, 4)], [_n(3, 2, 2)],
                       lambda w, x: g.sum(g.take(w, IDS, axis=1) * x)),
    "embedding": ([_n(7, 3)], [_n(4, 3), _ids(0, 7, 4)],
                  lambda e, x, i: g.sum(g.tanh(g.embedding(e, i)) * x)),
    "take_grad": ([_n(6, 3)], [_n(6, 3), _n(5, 3), _ids(0, 5, 6)],
                  lambda w, x, y, i: g.sum(g.take_grad(w * x, i, 5, 0) * y)),
    "take_along_axis": ([_n(3, 5)], [_n(3, 5), _ids(0, 5, 3, 2)],
                        lambda w, x, i: g.sum(g.take_along_axis(w * x, i, -1) * w[:, :2])),
    "take_along_axis_ignore": ([_n(3, 5)], [_n(3, 5), _ids(-1, 5, 3, 1)],
                               lambda w, x, i: g.sum(g.take_along_axis(w * x, i, -1, -1))),
    "take_along_axis_grad": ([_n(3, 1)], [_n(3, 5), _ids(0, 5, 3, 1)],
                             lambda w, y, i: g.sum(g.take_along_axis_grad(w, i, 5, 1) * y)),
    # int64 arithmetic: shifted ids, and sums over the whole range (some wrap: i + j < i)
    "add_int": ([_n(7, 3)], [_n(4, 3), _ids(0, 3, 4), _ids(0, 4, 4)],
                lambda w, y, i, j: g.sum(g.take(w, _int(w, i) + j, axis=0) * y)),
    "add_int_wraps": ([_n(5)], [_ids(-2**63, 2**63 - 1, 5), _ids(-2**63, 2**63 - 1, 5)],
                      lambda w, i, j: _wraps(w, _int(w, i), j)),
    "argmax": ([_n(4, 2)], [_d(3, 4), _n(3, 2)],
               lambda w, x, y: g.sum(g.take(w, g.argmax(x, axis=-1), axis=0) * y)),
    "index_weight": ([_n(3)], [_d(3, 4)],
                     lambda w, x: g.sum(g.index_weight(g.argmax(x, axis=-1), 1) * w)),
    "cross_entropy": ([_n(4, 3)], [_n(1, 4), _ids(0, 3, 1)],
                      lambda w, x, y: g.cross_entropy(x @ w, y)),
    "cross_entropy_ignore": ([_n(4, 3)], [_n(2, 4), lambda r: r.choice([0, 1, 2, -100], 2)],
                             lambda w, x, y: g.cross_entropy(x @ w, y, ignore_index=-100)),
    # int64 ids and a bool mask moved by reshape / slice / concat / copy / transpose /
    # broadcast_to (the movement ops' typed kernels), per example
    "typed_moves": ([_n(7, 3)], [_ids(0, 7, 2, 2), _mask(1, 6)], lambda w, i, m: _moves(w, i, m)),
    # random ops: the Philox key (two int64 words, any bits) is a per-example input
    "dropout": ([_n(3, 4)], [_n(3, 4), _ids(-2**63, 2**63 - 1, 2)],
                lambda w, x, k: g.sum(g.dropout(w * x, 0.4, k) * x)),
    # the fused attention (its key a per-example input), forward and backward kernels
    "qkv_attention": ([_n(1, 4, 3, 2, 3)], [_n(1, 4, 3, 2, 3), _ids(-2**63, 2**63 - 1, 2)],
                      lambda w, x, k: g.sum(g.tanh(g.qkv_attention(w * x, 0.3, True, key=k)))),
    "rng_uniform": ([_n(5)], [_ids(-2**63, 2**63 - 1, 2)],
                    lambda w, k: g.sum(w * w * g.rng.uniform(k, (5,), w.tape))),
    "rng_normal": ([_n(2, 3)], [_ids(-2**63, 2**63 - 1, 2)],
                   lambda w, k: g.sum(w * g.rng.normal(k, (2, 3), w.tape))),
    "rng_fold": ([_n(3)], [_ids(-2**63, 2**63 - 1, 2)], lambda w, k: g.sum(
        w * g.rng.uniform(g.rng.fold(g.rng.key_input(w.tape, k), 2**64 - 3), (3,)))),
    "rng_bits": ([_n(4)], [_ids(-2**63, 2**63 - 1, 2)],
                 lambda w, k: g.sum(w * g.index_weight(g.rng.bits(k, (4,), w.tape), 0))),
    # conv2d (and, through the second layer, its input gradient) and the pools
    "conv2d": ([_n(3, 2, 3, 3), _n(3), _n(2, 3, 2, 2)], [_n(1, 2, 5, 5), _n(1, 2, 2, 4)],
               lambda w, b, v, x, y: g.sum(g.conv2d(g.tanh(g.conv2d(x, w, b, 2, 1)), v, None,
                                                    1, (0, 1)) * y)),
    "pools": ([_n(2, 2, 3, 3)], [_n(1, 2, 6, 6), _d(1, 2, 1, 1)],
              lambda w, x, y: g.sum(g.avg_pool2d(g.max_pool2d(g.conv2d(x, w, padding=1), 2), 2,
                                                 1) * y)),
    "max_pool2d_pick": ([_n(1, 2, 4, 4)], [_d(1, 2, 4, 4), _n(1, 2, 2, 2)],
                        lambda w, x, y: g.sum(g.max_pool2d_pick(w * w, x, 2) * y)),
    # issue 41: dilated grouped conv, conv_transpose2d, padded / ceil-mode pools, adaptive
    "conv2d_groups": ([_n(4, 1, 3, 3), _n(4, 1, 2, 2)], [_n(1, 2, 6, 6), _n(1, 2, 5, 5)],
                      lambda w, v, x, y: g.sum(g.conv_transpose2d(
                          g.tanh(g.conv2d(x, w, None, 1, 1, 2, 2)), v, None, 1, 0, 0, 2) * y)),
    "pools_padded": ([_n(2, 2, 3, 3)], [_n(1, 2, 6, 5), _n(1, 2, 2, 3)],
                     lambda w, x, y: g.sum(g.adaptive_avg_pool2d(g.avg_pool2d(g.max_pool2d(
                         g.conv2d(x, w, padding=1), 3, 2, 1, 1, True), 2, 1, 1, True, False),
                         (2, 3)) * y)),
}


def declared_rows(registry: dict) -> dict:
    """The rows of the ops of ``registry`` that declare their checks (``Op.checks.sample``),
    unless the declaration says why emitting does not apply (``Checks.emit``): the op on
    ``w * x`` per input (``w * x * w * x + 1`` for a POS input), loss ``sum(y * y)``."""
    rows = {}
    for name, op in sorted(registry.items()):
        c = op.checks
        if c is None or c.emit:
            continue
        shapes_, attrs = c.sample
        makers = [_n(*s) for s in shapes_]
        rows[name] = (makers, makers, _declared_build(op, attrs, c.domain))
    return rows


def _declared_build(op, attrs: dict, domain: tuple):
    def build(*vs):
        k = len(domain)
        args = [_sq1(w * x) if d == POS else w * x for w, x, d in zip(vs[:k], vs[k:], domain)]
        y = g.ops.apply(op, args, **attrs)
        return g.sum(y * y)

    return build


HAND_CASES = dict(CASES)
CASES.update(declared_rows(REGISTRY))
# the optimizer's fused updates run on the optimizer's side, never inside a loss
NOT_IN_LOSSES = set(UPDATE_OPS)  # the optimizer's fused updates: never inside a loss

def recorded_ops(case: str | tuple) -> set[str]:
    """The ops row ``case`` (a name of CASES, or a row) runs -- its forward and the tape's
    backward of it -- as the numpy backend executes them (what the emitter must emit: it reads
    the same episode)."""
    from gtensor.backends.numpy_backend import NumpyBackend

    pm, xm, build = CASES[case] if isinstance(case, str) else case
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    real = NumpyBackend._execute

    def spy(self, op, *args, **kwargs):
        seen.add(op.name)
        return real(self, op, *args, **kwargs)

    NumpyBackend._execute = spy
    try:
        with g.Tape("numpy") as tp:
            _, _, loss = _record(tp, build, [m(rng) for m in pm], [m(rng) for m in xm])
            tp.backward(loss)
    finally:
        NumpyBackend._execute = real
    return seen


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_op_bitwise(case: str, dtype: str) -> None:
    pm, xm, build = CASES[case]

    def make(r):
        return [m(r) for m in pm], [m(r) for m in xm]

    assert check_examples(build, make, dtype, n=12, seed=zlib.crc32(case.encode()),
                          where=f"{case}/{dtype}") == 12


def missing_rows(registry: dict) -> list[str]:
    """Ops of ``registry`` that no hand row and no declared row runs (the updates aside)."""
    rows = [*HAND_CASES.values(), *declared_rows(registry).values()]
    covered = set().union(*(recorded_ops(row) for row in rows))
    return sorted(set(registry) - covered - NOT_IN_LOSSES)


def test_every_registered_op_has_a_row() -> None:
    """A new op declares its checks or needs a row here (the emitter reads kernels)."""
    missing = missing_rows(REGISTRY)
    assert not missing, f"ops without an emit test row: {missing}"
    covered = set().union(*(recorded_ops(case) for case in CASES))
    assert not covered & NOT_IN_LOSSES, "an optimizer op inside a loss row"


def test_an_op_without_checks_or_row_is_reported() -> None:
    """The coverage test can fail: softplus registered without its ``checks`` is missing."""
    import dataclasses

    reg = dict(REGISTRY)
    reg["softplus"] = dataclasses.replace(reg["softplus"], checks=None)
    assert missing_rows(reg) == ["softplus"]


def test_special_values_pass_through() -> None:
    """inf, NaN and signed zeros in the inputs land on the tape's bits too."""
    vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e-310, 2.0])

    def make(r):
        return [r.normal(size=8)], [r.permutation(vals)]

    check_examples(lambda w, x: g.sum(g.relu(w * x) + g.tanh(x) * w), make, "float64", n=8)
