"""The Tape API: ownership, conversion, views, errors, operators, stale Vars, close."""

from __future__ import annotations

import gtape as g
import gtensor
import numpy as np
import pytest
from gtape.tape import Tape
from gtape_testutil import address, bits_equal, host, values


def snapshot(tp: Tape) -> tuple:
    """Everything observable about a tape: its nodes and the bits of every value."""
    return ([tuple(n[:3]) + (n.shape, n.requires_grad) for n in tp.nodes()],
            [host(tp, v).tobytes() for v in values(tp)], len(tp))


# ---------------------------------------------------------------- leaves and ownership
def test_param_is_copied_in(bname):
    w0 = np.array([[1.0, 2.0], [3.0, 4.0]])
    with g.Tape(bname) as tp:
        w = tp.param(w0)
        w0[0, 0] = 99.0
        assert host(tp, tp.value(w))[0, 0] == 1.0
        assert w.shape == (2, 2) and w.dtype == np.float64 and w.requires_grad and w.op == "param"
        assert tp.params()[0].index == w.index


def test_views_are_read_only(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((2, 2)))
        loss = g.sum(w * w)
        tp.backward(loss)
        for view in (tp.value(w), tp.grad(w), tp.value(loss), tp.grad(loss)):
            if isinstance(view, np.ndarray):
                assert not view.flags.writeable
                with pytest.raises(ValueError):
                    view[...] = 0.0


def test_integer_inputs_convert_to_the_tape_dtype(bname):
    with g.Tape(bname) as tp:
        c = tp.const(np.array([1, -2, 2**53 + 1], dtype=np.int64))
        assert host(tp, tp.value(c)).dtype == np.float64
        assert host(tp, tp.value(c)).tolist() == [1.0, -2.0, float(2**53)]  # rounds to nearest
        assert host(tp, tp.value(tp.const(True))).tolist() == 1.0
        assert host(tp, tp.value(tp.const([1, 2]))).tolist() == [1.0, 2.0]


def test_float32_tape_rounds_float64_inputs(bname):
    x = np.array([0.1, 1e300, -1e-50, np.nan, np.inf])
    with g.Tape(bname, dtype="float32") as tp:
        v = tp.param(x)
        got = host(tp, tp.value(v))
        assert got.dtype == np.float32
        with np.errstate(over="ignore"):
            want = x.astype(np.float32)
        assert bits_equal(got, want)  # round to nearest even, overflow -> inf
        y = v * 2.0
        assert host(tp, tp.value(y)).dtype == np.float32


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), np.array(["a"]), object()])
def test_non_real_inputs_are_rejected(bname, bad):
    with g.Tape(bname) as tp:
        with pytest.raises(TypeError, match="const"):
            tp.const(bad)
        assert len(tp) == 0


def test_bad_dtype_rejected():
    with pytest.raises(TypeError, match="float16"):
        g.Tape(dtype="float16")


# ---------------------------------------------------------------- operators
def test_operators_map_to_ops(bname):
    with g.Tape(bname) as tp:
        x = tp.param(np.arange(6.0).reshape(2, 3) + 1.0)
        m = tp.param(np.ones((3, 2)))
        assert (x + 2.0).op == "adds" and (2.0 + x).op == "adds"
        assert (x - 2.0).op == "adds" and (2.0 - x).op == "adds"
        assert (x * 2.0).op == "muls" and (2.0 * x).op == "muls"
        assert (x / 2.0).op == "div" and (2.0 / x).op == "div"
        assert (x + x).op == "add" and (x - x).op == "sub" and (x * x).op == "mul"
        assert (-x).op == "neg" and (x @ m).op == "matmul"
        assert (np.ones(3) + x).op == "add"  # ndarray on the left defers to the Var
        b = tp.param(np.ones((2, 2, 3)))
        assert (b @ tp.const(np.ones((2, 3, 1)))).op == "bmm"
        d = x / 3.0
        divisor = tp.node(d).inputs[1]
        assert tp.node(divisor).op is g.CONST and tp.node(divisor).shape == ()
        xv = host(tp, tp.value(x))
        assert bits_equal(host(tp, tp.value(d)), xv / 3.0)
        assert bits_equal(host(tp, tp.value(2.0 - x)), 2.0 - xv)
        assert bits_equal(host(tp, tp.value(x - 0.1)), xv - 0.1)


def test_every_registry_op_is_a_function():
    from gtensor.ops.optim import UPDATE_OPS

    for name, op in gtensor.REGISTRY.items():
        if not op.inputs or name in UPDATE_OPS:  # fill and optimizer updates: not graph ops
            continue
        assert callable(getattr(g, name, None)), f"gtape has no function for op {name!r}"


# ---------------------------------------------------------------- flat storage
def test_flat_storage_inputs_have_smaller_indices(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((3, 2)))
        y = g.relu(g.matmul(np.ones((4, 3)), w))  # the array becomes a const node
        loss = g.mse(y, np.zeros((4, 2)))
        nodes = tp.nodes()
        assert [n.name for n in nodes] == ["param", "const", "matmul", "relu", "const", "sub",
                                           "mul", "mean"]
        assert nodes[0].op is g.PARAM and nodes[1].op is g.CONST and nodes[0].is_leaf
        assert nodes[2].op is gtensor.REGISTRY["matmul"] and not nodes[2].is_leaf
        assert all(j < n.index for n in nodes for j in n.inputs)
        assert nodes[6].inputs == (5, 5)  # fan-out: d * d
        assert loss.index == len(tp) - 1


# ---------------------------------------------------------------- errors
def test_shape_mismatch_leaves_tape_unchanged(bname):
    with g.Tape(bname) as tp:
        a = tp.param(np.ones((2, 3)))
        b = tp.param(np.ones((4,)))
        h = g.tanh(a)
        before = snapshot(tp)
        with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\)"):
            g.add(h, b)
        with pytest.raises(ValueError, match=r"matmul: .*\(2, 3\) @ b \(2, 2\)"):
            h @ np.ones((2, 2))
        with pytest.raises(ValueError, match=r"sub: shapes \(2, 3\) and \(5,\)"):
            h - np.ones(5)  # the array operand must not leave a const behind
        with pytest.raises(ValueError, match="mse"):
            g.mse(h, np.ones((3, 2)))
        with pytest.raises(ValueError, match="slice"):
            g.slice(h, 1, 2, 7)
        with pytest.raises(ValueError, match="concat"):
            g.concat([h, b], axis=0)
        assert snapshot(tp) == before


def test_backward_argument_errors(bname):
    with g.Tape(bname) as tp, g.Tape(bname) as other:
        w = tp.param(np.ones((2, 2)))
        with pytest.raises(ValueError, match=r"shape \(2, 2\).*scalar"):
            tp.backward(w * w)
        foreign = g.sum(other.param(np.ones(2)))
        with pytest.raises(ValueError, match="another tape"):
            tp.backward(foreign)
        with pytest.raises(TypeError, match="Var"):
            tp.backward(np.float64(1.0))
        with pytest.raises(ValueError, match="another tape"):
            g.add(w, other.param(np.ones((2, 2))))
        with pytest.raises(TypeError, match="at least one Var"):
            g.add(np.ones(2), np.ones(2))


def test_non_differentiable_op_raises_only_if_a_gradient_must_flow(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones((2, 2)))
        c = tp.const(np.ones((2, 2)))
        frozen = g.relu_grad(c, c)  # no param upstream: fine
        tp.backward(g.sum(w * frozen))
        assert host(tp, tp.grad(w)).tolist() == [[1.0, 1.0], [1.0, 1.0]]
        loss = g.sum(g.apply("adam_p", (w, c, c, tp.const(np.array(0.1))), eps=1e-8))
        with pytest.raises(NotImplementedError, match="adam_p"):
            tp.backward(loss)


def test_nan_and_inf_propagate(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([np.nan, np.inf, 1.0]))
        loss = g.sum(w * 2.0)
        tp.backward(loss)
        assert np.isnan(host(tp, tp.value(loss)))
        assert host(tp, tp.grad(w)).tolist() == [2.0, 2.0, 2.0]
        tp.backward(g.sum(w * w))
        gw = host(tp, tp.grad(w))
        assert np.isnan(gw[0]) and gw[1] == np.inf and gw[2] == 2.0


# ---------------------------------------------------------------- episodes and lifetime
def test_stale_vars_raise(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(3))
        m = tp.mark()
        y = g.exp(w)
        tp.reset_to(m)
        z = g.tanh(w)  # reuses y's index
        assert z.index == y.index and not y.alive and z.alive
        for use in (lambda: tp.value(y), lambda: tp.grad(y), lambda: g.add(y, w),
                    lambda: tp.backward(g.sum(y)), lambda: y.shape):
            with pytest.raises(g.StaleVarError, match="dropped by reset_to"):
                use()
        assert "dropped" in repr(y)
        tp.reset_to(tp.mark())
        with pytest.raises(ValueError, match="mark"):
            tp.reset_to(g.Tape(bname).mark())


def test_old_mark_is_refused_after_an_earlier_reset(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(3))
        m0 = tp.mark()
        g.exp(w)
        m1 = tp.mark()
        tp.reset_to(m0)
        g.tanh(w)
        with pytest.raises(ValueError, match="take a new mark"):
            tp.reset_to(m1)


def test_close_releases_everything(bname):
    tp = g.Tape(bname)
    w = tp.param(np.ones(3))
    tp.close()
    assert tp.closed and len(tp) == 0
    # NOTE: internals on purpose: every buffer (device memory included) is released
    assert tp._vcache == [] and tp._gcache == {}
    with pytest.raises(RuntimeError, match="closed"):
        tp.param(np.ones(3))
    with pytest.raises(g.StaleVarError):
        tp.value(w)
    tp.close()  # idempotent
    with g.Tape(bname) as tp2:
        tp2.param(np.ones(2))
    assert tp2.closed


def test_set_value_updates_in_place(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.zeros((2, 2)))
        view = tp.value(w)
        buf = address(tp.value_at(w.index))
        tp.set_value(w, tp.backend.asarray(np.full((2, 2), 3.0)))
        assert address(tp.value_at(w.index)) == buf
        assert host(tp, view).tolist() == [[3.0, 3.0], [3.0, 3.0]]
        tp.set_value(w, [[1, 2], [3, 4]])  # host data: the conversion rule
        assert host(tp, view).tolist() == [[1.0, 2.0], [3.0, 4.0]]
        tp.set_value(w, view)  # its own view: no-op copy through a temporary
        assert host(tp, view).tolist() == [[1.0, 2.0], [3.0, 4.0]]
        with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
            tp.set_value(w, np.ones((3, 2)))
        with pytest.raises(ValueError, match="not a param"):
            tp.set_value(tp.const(np.ones((2, 2))), np.ones((2, 2)))


def test_backward_overwrites_rather_than_accumulates(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.array([1.0, 2.0]))
        loss = g.sum(w * 3.0)
        tp.backward(loss)
        first = host(tp, tp.grad(w))
        tp.backward(loss)
        assert bits_equal(host(tp, tp.grad(w)), first)
        unused = tp.param(np.ones(2))
        tp.backward(loss)
        assert host(tp, tp.grad(unused)).tolist() == [0.0, 0.0]


def test_grad_is_zero_where_no_param_upstream(bname):
    with g.Tape(bname) as tp:
        c = tp.const(np.ones((2, 3)))
        w = tp.param(np.ones(3))
        h = g.exp(c)
        loss = g.sum(h * w)
        tp.backward(loss)
        assert host(tp, tp.grad(h)).tolist() == [[0.0] * 3] * 2
        assert host(tp, tp.grad(c)).tolist() == [[0.0] * 3] * 2
        assert tp.grad_at(h.index) is None and tp.grad_at(c.index) is None


def test_every_registered_op_has_its_gtape_function():
    """One function per gtensor op, named as the op (the optimizer's fused updates run inside
    gopt, and fill is how a tape seeds its backward: they have no gtape function)."""


    internal = set(g.ops.INTERNAL)
    missing = sorted(n for n in gtensor.REGISTRY if n not in internal
                     and not callable(getattr(g, n, None)))
    assert not missing, f"gtensor ops without a gtape function: {missing}"
    assert all(n in g.__all__ for n in gtensor.REGISTRY if n not in internal)
    assert internal <= set(gtensor.REGISTRY)


def test_int64_vars_add_as_int64(bname):
    """``+`` on int64 Vars (and an int64 Var with an integer) runs add_int: int64, wrapping as
    numpy; a float scalar, a float Var or an integer outside int64 is refused and records
    nothing."""
    with g.Tape(bname) as tp:
        ids = tp.const(np.array([0, 5, 2**63 - 1]), dtype="int64")
        x = tp.const(np.ones(3))
        for got, want in [(ids + 1, [1, 6, -2**63]), (2 + ids, [2, 7, -2**63 + 1]),
                          (ids + ids, [0, 10, -2]), (ids + np.int64(-5), [-5, 0, 2**63 - 6]),
                          (ids + np.array([1, 2, 3]), [1, 7, -2**63 + 2])]:
            assert got.op == "add_int" and got.dtype == np.int64
            assert host(tp, tp.value(got)).tolist() == want
        n = len(tp)
        with pytest.raises(TypeError, match="adds: x has dtype int64; expected float32 or "):
            ids + 0.5
        with pytest.raises(TypeError, match="add: a has dtype int64"):
            ids + x
        with pytest.raises(TypeError, match="add: b has dtype int64"):
            x + ids
        with pytest.raises(ValueError, match="add_int: 18446744073709551616 is outside int64"):
            ids + 2**64
        assert len(tp) == n
