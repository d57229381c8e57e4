"""gtape's op functions agree with gtensor's registry, and the typed stub is current."""

from __future__ import annotations

import inspect

import gtape as g
import gtensor
import pytest
from gtape import ops, surface


def test_every_registry_op_is_exposed_or_internal_with_a_reason():
    """Each registry op: a gtape function with the op's inputs, attrs and defaults, or an
    INTERNAL entry saying why not (surface.mismatches lists every disagreement)."""
    assert surface.mismatches() == []
    exposed = set(gtensor.REGISTRY) - set(ops.INTERNAL)
    assert exposed <= set(g.__all__) and all(callable(getattr(g, n)) for n in exposed)
    assert set(ops.INTERNAL) <= set(gtensor.REGISTRY)
    assert all(reason.strip() for reason in ops.INTERNAL.values())


@pytest.mark.parametrize("name", sorted(set(gtensor.REGISTRY) - set(ops.INTERNAL)))
def test_function_arity_matches_the_op(name):
    """The function takes the op's array inputs first (one list for a variadic op)."""
    op = gtensor.REGISTRY[name]
    params = list(inspect.signature(getattr(ops, name)).parameters)
    n = 1 if op.variadic else op.arity
    assert params[:n] == (["xs"] if op.variadic else list(op.inputs))


def test_mismatches_are_found(monkeypatch):
    """The check can fail: a renamed input, a changed default, a missing function, a stale
    internal entry are each reported, naming the op."""
    def take(x, idx, axis=0):  # 'idx' instead of 'ids'
        return None

    def softmax(x, axis=0):  # default 0 instead of -1
        return None

    monkeypatch.setattr(ops, "take", take)
    take.__module__ = softmax.__module__ = ops.__name__
    monkeypatch.setattr(ops, "softmax", softmax)
    monkeypatch.delattr(ops, "relu")
    monkeypatch.setitem(ops.INTERNAL, "no_such_op", "a reason")
    monkeypatch.setitem(ops.EXTRA_PARAMS, "exp", {"b": ""})
    got = "\n".join(surface.mismatches())
    assert "take: inputs ['x', 'idx']" in got
    assert "softmax: attr axis defaults to 0 in gtape, to -1 in the op" in got, got
    assert "relu: a gtensor op with no gtape.ops function" in got
    assert "INTERNAL names 'no_such_op'" in got
    assert "EXTRA_PARAMS names 'exp'" in got


def test_committed_stub_is_current():
    """ops.pyi is what tools/gen_stubs.py writes now (run it after changing an op)."""
    assert surface.STUB_PATH.read_text() == surface.render_stub(), (
        "packages/gtape/src/gtape/ops.pyi is stale: run python tools/gen_stubs.py")


def test_stub_types_inputs_by_their_declared_types():
    """Index and mask inputs are typed as such in the stub, from Op.types."""
    text = surface.render_stub()
    assert "def where(cond: MaskOperand, a: FloatOperand, b: FloatOperand) -> Var:" in text
    assert "def take(x: FloatOperand, ids: IndexOperand, axis: int = 0) -> Var:" in text
    for name in sorted(set(gtensor.REGISTRY) - set(ops.INTERNAL)):
        assert f"\ndef {name}(" in text


def test_an_op_without_a_function_gets_one_from_the_registry():
    """An op defined only in gtensor is still a gtape function (its inputs, attrs, defaults and
    doc from the registry), computing what the written one computes, bit for bit."""
    import numpy as np

    made = {n: ops._from_registry(gtensor.REGISTRY[n]) for n in ("maximum", "sum", "concat",
                                                                 "index_weight")}
    for n, fn in made.items():
        assert fn.__name__ == n and fn.from_registry and fn.__doc__
    assert str(inspect.signature(made["sum"])) == "(x, axis=None, keepdims=False) -> 'Var'"
    tp = g.Tape()
    a = tp.param(np.array([1.0, -0.0, 3.0]))
    b = tp.const(np.array([0.0, 0.0, np.nan]))
    for got, want in ((made["maximum"](a, b), g.maximum(a, b)),
                      (made["sum"](a, keepdims=True), g.sum(a, keepdims=True)),
                      (made["concat"]([a, b], 0), g.concat([a, b], 0))):
        assert got.numpy().tobytes() == want.numpy().tobytes()
    ids = tp.const(np.array([2, -1, 0]), dtype="int64")
    w = made["index_weight"](ids, -1)
    assert w.numpy().tobytes() == g.index_weight(ids, -1).numpy().tobytes()
    assert w.numpy().dtype == np.float64
