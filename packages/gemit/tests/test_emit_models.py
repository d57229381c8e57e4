"""Per-example losses of real models: emitted once, bitwise equal to the tape on 40 examples."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gemit_testutil import check_examples

D = 6


def _linear(w, b, x, y):
    return g.mse(x @ w + b, y)  # (1, D) @ (D, 1) + (1,) vs (1, 1)


def _logistic(w, b, x, y):
    p = g.sigmoid(x @ w + b)
    return g.neg(g.sum(y * g.log(p) + g.adds(g.neg(y), 1.0) * g.log(g.adds(g.neg(p), 1.0))))


def _mlp(w1, b1, w2, b2, x, y):
    h = g.tanh(x @ w1 + b1)
    z = g.relu(h) @ w2 + b2
    return g.neg(g.sum(y * g.log(g.softmax(z, axis=-1))))  # cross-entropy against one-hot y


def _classifier(e, w, x, ids, label):
    """An embedding bag and a where-gated linear layer under cross-entropy: int64 token ids
    and label are per-example inputs (example_ids)."""
    h = g.sum(g.embedding(e, ids), axis=0, keepdims=True) + x  # (1, 4)
    z = h @ w
    return g.cross_entropy(g.where(g.greater(z, -1.0), z, g.muls(z, 0.5)), label)


def _classifier_data(r):
    return ([r.normal(size=(9, 4)), r.normal(size=(4, 3))],
            [r.normal(size=(1, 4)), r.integers(0, 9, size=3), r.integers(0, 3, size=1)])


def _linear_data(r):
    return ([r.normal(size=(D, 1)), r.normal(size=(1,))],
            [r.normal(size=(1, D)), r.normal(size=(1, 1))])


def _logistic_data(r):
    return ([r.normal(size=(D, 1)) * 0.5, r.normal(size=(1,))],
            [r.normal(size=(1, D)), np.array([[float(r.integers(2))]])])


def _mlp_data(r):
    return ([r.normal(size=(4, 8)) * 0.5, r.normal(size=(8,)) * 0.1,
             r.normal(size=(8, 3)) * 0.5, r.normal(size=(3,)) * 0.1],
            [r.normal(size=(1, 4)), np.eye(3)[[r.integers(3)]]])


MODELS = {"linear": (_linear, _linear_data), "logistic": (_logistic, _logistic_data),
          "mlp": (_mlp, _mlp_data), "classifier": (_classifier, _classifier_data)}


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_bitwise(model: str, dtype: str, inner: str) -> None:
    """The emitted C follows the contract it was emitted under (the fma one calls fma())."""
    build, make = MODELS[model]
    assert check_examples(build, make, dtype, n=40, seed=7, where=f"{model}/{dtype}/{inner}",
                          inner=inner) == 40


def test_one_emission_serves_every_example() -> None:
    """The values on the tape at emit time are not baked in: params and examples are inputs."""
    from gemit import compile_c
    from gemit_testutil import emit, flat, tape_run

    r = np.random.default_rng(3)
    p0, x0 = _mlp_data(r)
    fn = compile_c(emit(_mlp, p0, x0, "float64"), "grad", "float64", flat(p0, "f8").size,
                   flat(x0, "f8").size)
    p1, x1 = _mlp_data(r)
    want_l, want_g = tape_run(_mlp, p1, x1, "float64")
    got_l, got_g = fn(flat(p1, "f8"), flat(x1, "f8"))
    assert got_l.tobytes() == want_l.tobytes() and got_g.tobytes() == want_g.tobytes()
    assert got_l != fn(flat(p0, "f8"), flat(x0, "f8"))[0]


def test_batch_is_the_per_example_call() -> None:
    """GradFn.batch (the loop rung 5 runs) returns exactly the per-example calls' bits."""
    from gemit import compile_c
    from gemit_testutil import emit, flat

    r = np.random.default_rng(5)
    p, x0 = _logistic_data(r)
    fn = compile_c(emit(_logistic, p, x0, "float32"), "grad", "float32", flat(p, "f4").size,
                   flat(x0, "f4").size)
    rows = np.stack([flat(_logistic_data(r)[1], "f4") for _ in range(30)])
    losses, grads = fn.batch(flat(p, "f4"), rows)
    for k in range(30):
        lk, gk = fn(flat(p, "f4"), rows[k])
        assert losses[k].tobytes() == lk.tobytes() and grads[k].tobytes() == gk.tobytes()
    with pytest.raises(ValueError, match=r"expected \(n, 7\)"):
        fn.batch(flat(p, "f4"), rows[:, :5])


def test_param_the_loss_does_not_reach_gets_zeros() -> None:
    """A listed param with no path to the loss: grad_out holds the tape's +0.0 for it."""
    def build(w, unused, x):
        return g.sum(w * x)

    def make(r):
        return [r.normal(size=3), r.normal(size=(2, 2))], [r.normal(size=3)]

    assert check_examples(build, make, "float64", n=5) == 5


def test_example_ids_batch_and_refusals() -> None:
    """A function with int64 inputs: GradFn.batch with an ids row per example is the
    per-example call; ids missing, of the wrong dtype or shape are refused by name."""
    from gemit import compile_c
    from gemit_testutil import emit, flat, flat_ids

    r = np.random.default_rng(9)
    p, x0 = _classifier_data(r)
    src = emit(_classifier, p, x0, "float64")
    assert "const double *example, const long long *example_ids, double *grad_out)" in src
    fn = compile_c(src, "grad", "float64", flat(p, "f8").size, flat(x0, "f8").size, n_ids=4)
    xs = [_classifier_data(r)[1] for _ in range(20)]
    rows, ids = np.stack([flat(x, "f8") for x in xs]), np.stack([flat_ids(x) for x in xs])
    losses, grads = fn.batch(flat(p, "f8"), rows, ids)
    for k in range(20):
        lk, gk = fn(flat(p, "f8"), rows[k], ids[k])
        assert losses[k].tobytes() == lk.tobytes() and grads[k].tobytes() == gk.tobytes()
    assert len(set(losses.tolist())) > 1  # the ids are inputs, not baked
    with pytest.raises(ValueError, match=r"ids is None; expected int64 of shape \(4,\)"):
        fn(flat(p, "f8"), rows[0])
    with pytest.raises(ValueError, match="ids is int32"):
        fn(flat(p, "f8"), rows[0], ids[0].astype(np.int32))
    with pytest.raises(ValueError, match=r"expected int64 of shape \(20, 4\)"):
        fn.batch(flat(p, "f8"), rows, ids[:, :3])
