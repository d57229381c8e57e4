"""Every op with a kernel, emitted as C, is bitwise equal to the tape on random examples.

One row per op (forward on the gradient path, so its backward is emitted too; the backward-only
ops sit on a const branch). Each row: emit once, compile once, compare 12 random examples.
"""

from __future__ import annotations

import zlib

import gtape as g
import numpy as np
import pytest
from gemit_testutil import check_examples
from gtensor.ops import REGISTRY


def _n(*shape: int):
    return lambda r: r.normal(size=shape)


def _sq1(x):  # positive, away from zero: x*x + 1
    return g.adds(x * x, 1.0)


# name: (param makers, input makers, build(*params, *inputs) -> scalar loss)
CASES = {
    "add": ([_n(3, 4)], [_n(3, 4)], lambda w, x: g.sum((w + x) * x)),
    "add_broadcast": ([_n(4)], [_n(3, 4)], lambda w, x: g.sum((x + w) * (x + w))),
    "sub": ([_n(3)], [_n(3)], lambda w, x: g.sum((w - x) * (x - w * w))),
    "mul": ([_n(2, 3)], [_n(2, 3)], lambda w, x: g.sum(w * x * w)),
    "div": ([_n(3)], [_n(3)], lambda w, x: g.sum(x / _sq1(w)) + g.sum(w / _sq1(x))),
    "adds": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.adds(w, 1.5) * x)),
    "muls": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.muls(w, -0.75) * x)),
    "neg": ([_n(3)], [_n(3)], lambda w, x: g.sum(g.neg(w) * x)),
    "relu": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.relu(w * x) * x)),
    "sigmoid": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.sigmoid(w * x) * x)),
    "tanh": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.tanh(w * x) * x)),
    "exp": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.exp(g.muls(w * x, 0.5)))),
    "log": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.log(_sq1(w * x)))),
    "sqrt": ([_n(5)], [_n(5)], lambda w, x: g.sum(g.sqrt(_sq1(w - x)))),
    "matmul": ([_n(3, 4), _n(4)], [_n(2, 3)], lambda w, b, x: g.sum(g.tanh(x @ w + b))),
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
    "sigmoid_grad": ([_n(4)], [_n(4), _n(4)],
                     lambda w, a, b: g.sum(w * g.sigmoid_grad(a, g.sigmoid(b)))),
    "tanh_grad": ([_n(4)], [_n(4), _n(4)],
                  lambda w, a, b: g.sum(w * g.tanh_grad(a, g.tanh(b)))),
    "softmax_grad": ([_n(2, 4)], [_n(2, 4), _n(2, 4)],
                     lambda w, a, b: g.sum(w * g.softmax_grad(a, g.softmax(b)))),
    "maximum": ([_n(3, 4)], [_n(4)], lambda w, x: g.sum(g.maximum(w, x) * w)),
    "minimum": ([_n(3, 4)], [_n(4)], lambda w, x: g.sum(g.minimum(w, x) * w)),
    "log_softmax": ([_n(2, 5)], [_n(2, 5), _n(2, 5)],
                    lambda w, x, y: g.sum(g.log_softmax(w * x, axis=-1) * y)),
    "logsumexp": ([_n(3, 4)], [_n(3, 4), _n(3)],
                  lambda w, x, y: g.sum(g.logsumexp(w * x, axis=1) * y)),
}
# the optimizer's fused updates run on the optimizer's side, never inside a loss
NOT_IN_LOSSES = {"adam_m", "adam_v", "adam_p", "sgd_p"}
# ops with int64 / bool inputs or results: the emitted program holds float buffers only, so
# gemit refuses them with NotImplementedError (test_typed_ops_are_refused) until it gains typed
# inputs (issue 23's follow-up)
TYPED = {name for name, op in REGISTRY.items() if op.typed}



def recorded_ops(case: str) -> set[str]:
    """The ops row ``case`` runs -- its forward and the tape's backward of it -- as the numpy
    backend executes them (what the emitter must emit: it reads the same episode)."""
    from gtensor.backends.numpy_backend import NumpyBackend

    pm, xm, build = CASES[case]
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    real = NumpyBackend._execute

    def spy(self, op, *args, **kwargs):
        seen.add(op.name)
        return real(self, op, *args, **kwargs)

    NumpyBackend._execute = spy
    try:
        with g.Tape("numpy") as tp:
            ps = [tp.param(m(rng)) for m in pm]
            xs = [tp.const(m(rng)) for m in xm]
            tp.backward(build(*ps, *xs))
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


def test_every_registered_op_has_a_row() -> None:
    """A new op needs a row here (it will most likely just work: the emitter reads kernels)."""
    covered = set().union(*(recorded_ops(case) for case in CASES))
    missing = sorted(set(REGISTRY) - covered - NOT_IN_LOSSES - TYPED)
    assert not missing, f"ops without an emit test row: {missing}"
    assert not covered & NOT_IN_LOSSES, "an optimizer op inside a loss row"


def test_typed_ops_are_refused() -> None:
    """A loss reading int64 labels is refused by name, never emitted wrong."""
    import numpy as np
    from gemit import emit_c

    tp = g.Tape("numpy")
    w = tp.param(np.ones((3, 4)))
    x = tp.const(np.ones((2, 3)))
    loss = g.cross_entropy(x @ w, [1, 3])
    with pytest.raises(NotImplementedError, match="reads int64 data"):
        emit_c(tp, loss, [w], [x])


def test_special_values_pass_through() -> None:
    """inf, NaN and signed zeros in the inputs land on the tape's bits too."""
    vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e-310, 2.0])

    def make(r):
        return [r.normal(size=8)], [r.permutation(vals)]

    check_examples(lambda w, x: g.sum(g.relu(w * x) + g.tanh(x) * w), make, "float64", n=8)
