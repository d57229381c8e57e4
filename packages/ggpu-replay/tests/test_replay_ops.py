"""Per op: the replayed forward values and backward gradients equal the numpy tape's bits,
after the program's inputs were refreshed with new data (so the replay really recomputes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gtape as g
import numpy as np
import pytest
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference


@dataclass(frozen=True)
class Row:
    """One op under replay: parameter shapes and a build from (params, data const)."""

    id: str
    params: tuple[tuple[int, ...], ...]
    data: tuple[int, ...]
    build: Callable[..., g.Var]
    positive: bool = False


ROWS = [
    Row("add", ((3, 4), (4,)), (3, 4), lambda p, d: p[0] + p[1] * d),
    Row("sub", ((3, 1), (1, 4)), (3, 4), lambda p, d: (p[0] - p[1]) * d),
    Row("mul_div", ((2, 3), (3,)), (2, 3), lambda p, d: p[0] * d / (p[1] * p[1] + 1.0)),
    Row("adds_muls_neg", ((2, 3),), (2, 3), lambda p, d: -(p[0] * 1.5 + 0.25) * d),
    Row("relu", ((3, 4),), (3, 4), lambda p, d: g.relu(p[0] + d)),
    Row("sigmoid_tanh", ((3, 4),), (3, 4), lambda p, d: g.sigmoid(p[0] * d) + g.tanh(p[0] - d)),
    Row("exp_log_sqrt", ((3, 4),), (3, 4),
        lambda p, d: g.exp(p[0] * 0.1) * g.log(d) + g.sqrt(p[0] * p[0] + d), positive=True),
    Row("erf", ((3, 4),), (3, 4), lambda p, d: g.erf(p[0] * d - 0.5)),
    Row("log1p", ((3, 4),), (3, 4), lambda p, d: g.log1p(p[0] * p[0] * d), positive=True),
    Row("expm1", ((3, 4),), (3, 4), lambda p, d: g.expm1(p[0] * d)),
    Row("sin_cos", ((3, 4),), (3, 4), lambda p, d: g.sin(p[0] * d * 4.0) * g.cos(p[0] - d)),
    Row("sum_mean", ((2, 3, 4),), (2, 3, 4),
        lambda p, d: g.sum(p[0] * d, axis=1) + g.mean(p[0] + d, axis=1)),
    Row("sum_to_broadcast", ((3, 1), (4,)), (2, 3, 4),
        lambda p, d: g.sum_to(d * p[0], (3, 4)) + g.broadcast_to(p[1], (3, 4))),
    Row("matmul", ((4, 3), (3, 2)), (5, 4), lambda p, d: (d @ p[0]) @ p[1]),
    Row("bmm", ((2, 3, 4),), (2, 4, 2), lambda p, d: g.bmm(p[0], d)),
    Row("movement", ((4, 6), (4, 3)), (7, 4),
        lambda p, d: g.transpose(g.reshape(g.concat([g.slice(p[0], 1, 1, 5), p[1]], 1), (7, 4)))
        @ d),
    Row("pad_copy", ((2, 3),), (2, 6), lambda p, d: g.copy(g.pad(p[0], 1, 2, 1)) * d),
    Row("softmax", ((3, 5),), (3, 5), lambda p, d: g.softmax(p[0] * d, axis=1)
        + g.softmax(p[0], axis=0)),
]


def _data(rng: np.random.Generator, shape: tuple, positive: bool) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape) if positive else rng.normal(size=shape)


def _tape(backend: str, dtype: str, row: Row, params: list, data: np.ndarray, weights):
    tp = g.Tape(backend, dtype)
    ps = [tp.param(a) for a in params]
    d = tp.const(data)
    loss = g.sum(row.build(ps, d) * tp.const(weights))
    return tp, ps, d, loss


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_op_replays_bitwise(bname, device, row, dtype):
    rng = np.random.default_rng(len(row.id))
    params = [rng.normal(size=s) for s in row.params]
    first, second = (_data(rng, row.data, row.positive) for _ in range(2))
    probe, _, _, out = _tape("numpy", dtype, row, params, first, 1.0)
    weights = rng.normal(size=probe.node(out).shape)
    probe.close()
    tp, ps, d, loss = _tape(bname, dtype, row, params, first, weights)
    prog = capture(tp, loss, backend=device)
    prog.set_input(d, second)  # the replay must see the new data
    prog.forward()
    prog.backward()
    ref, rps, _, rloss = _tape("numpy", dtype, row, params, second, weights)
    ref.backward(rloss)
    assert len(prog.nodes) == rloss.index + 1
    for i in range(len(prog.nodes)):
        want = ref.value_at(i)
        got = prog.value_at(i)
        assert bits_equal(want, got), f"{row.id} node {i} value: {first_difference(want, got)}"
        want_g = ref.grad_at(i)
        got_g = prog.grad_at(i)
        assert (want_g is None) == (got_g is None), f"{row.id} node {i}: gradient stored?"
        if want_g is not None:
            assert bits_equal(want_g, got_g), f"{row.id} node {i} grad: " \
                f"{first_difference(want_g, got_g)}"
    assert prog.loss() == float(np.asarray(ref.value(rloss)).reshape(()))
    tp.close()
    ref.close()
