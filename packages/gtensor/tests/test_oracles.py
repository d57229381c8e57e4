"""The backend under test vs independent slow oracles: plain Python loops in the defined order.

Python floats are IEEE binary64 with correctly rounded + - * /; np.float32 scalars give the
same for binary32. The loops below spell out each op's definition (docs/semantics.md).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cases import arrays, loop_sum
from fma_oracle import oracle as exact_fma
from gtensor.dtypes import float_type
from gtensor.ops.elementwise import EXP
from gtensor.testing import bits_equal, first_difference
from hypothesis import given
from hypothesis import strategies as st

DTYPES = [np.float64, np.float32]


def _scalar(dtype):
    return float if dtype == np.float64 else np.float32


def loop_matmul(a, b):
    """c[..,i,j] = a[..,i,0]*b[..,0,j], then += a[..,i,k]*b[..,k,j], k ascending."""
    T = _scalar(a.dtype)
    batch = a.shape[:-2]
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]), a.dtype)
    for idx in itertools.product(*[range(d) for d in batch]):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                acc = T(0.0)
                for k in range(a.shape[-1]):
                    with np.errstate(all="ignore"):
                        p = T(a[idx + (i, k)]) * T(b[idx + (k, j)])
                    acc = p if k == 0 else acc + p
                out[idx + (i, j)] = acc
    return out


def loop_matmul_fma(a, b):
    """c[..,i,j] = +0.0, then c = fma(a[..,i,k], b[..,k,j], c), k ascending (exact fma)."""
    batch = a.shape[:-2]
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]), a.dtype)
    for idx in itertools.product(*[range(d) for d in batch]):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                acc = 0.0
                for k in range(a.shape[-1]):
                    acc = exact_fma(float(a[idx + (i, k)]), float(b[idx + (k, j)]), acc,
                                    a.dtype.type)
                out[idx + (i, j)] = acc
    return out


def loop_softmax(x, axis):
    """Per row: max, e = exp(x - max) with our exp, serial sum, divide."""
    T = _scalar(x.dtype)
    exp = EXP[float_type(x)]
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros_like(xm)
    for idx in itertools.product(*[range(d) for d in xm.shape[:-1]]):
        row = [T(v) for v in xm[idx]]
        m = row[0]
        for v in row[1:]:
            m = v if (v > m or v != v) else m
        e = [T(exp.numpy(np.asarray(v - m, x.dtype))) for v in row]
        s = e[0]
        for v in e[1:]:
            s = s + v
        out[idx] = [v / s for v in e]
    return np.moveaxis(out, -1, axis)


def _check(be, want, got, what):
    got = be.to_numpy(got)
    assert bits_equal(want, got), f"{what}: {first_difference(want, got)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shapes", [((3, 4), (4, 2)), ((1, 5), (5, 1)), ((2, 0), (0, 3)),
                                    ((2, 3, 4), (2, 4, 2))])
@given(data=st.data())
def test_matmul_bmm_serial_order(be, dtype, shapes, data):
    a = data.draw(arrays(np.dtype(dtype), shapes[0]))
    b = data.draw(arrays(np.dtype(dtype), shapes[1]))
    op = be.bmm if len(shapes[0]) == 3 else be.matmul
    _check(be, loop_matmul(a, b), op(be.asarray(a), be.asarray(b)), op.__name__)
    _check(be, loop_matmul(a, b), op(be.asarray(a), be.asarray(b), inner="plain"), op.__name__)
    _check(be, loop_matmul_fma(a, b), op(be.asarray(a), be.asarray(b), inner="fma"),
           f"{op.__name__} (fma)")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_contracts_differ_where_they_must(be, dtype):
    """[-1, x] . [1, x] with x = 1 + 2^-(p//2+2): plain rounds x*x before adding -1 (the
    2^-2(p//2+2) bit is lost), fma adds it exactly; the switch is real on every backend."""
    p = 53 if dtype == np.float64 else 24
    x = 1 + 2.0 ** -(p // 2 + 2)
    a = np.array([[-1.0, x]], dtype)
    b = np.array([[1.0], [x]], dtype)
    plain = be.to_numpy(be.matmul(be.asarray(a), be.asarray(b)))
    fused = be.to_numpy(be.matmul(be.asarray(a), be.asarray(b), inner="fma"))
    assert plain[0, 0] == dtype(2.0 ** -(p // 2 + 1)), plain
    assert fused[0, 0] == dtype(2.0 ** -(p // 2 + 1) + 2.0 ** -(2 * (p // 2 + 2))), fused
    bat = be.to_numpy(be.bmm(be.asarray(a[None]), be.asarray(b[None]), inner="fma"))
    assert bat.tobytes() == fused.tobytes()


def test_inner_refusal(be):
    x = be.asarray(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"matmul: inner is 'fused'; expected one of"):
        be.matmul(x, x, inner="fused")
    with pytest.raises(ValueError, match=r"bmm: inner is 1; expected one of"):
        be.bmm(be.asarray(np.ones((1, 2, 2))), be.asarray(np.ones((1, 2, 2))), inner=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (1, 1), (0, 2)])
@given(data=st.data())
def test_sum_mean_serial_order(be, dtype, shape, data):
    x = data.draw(arrays(np.dtype(dtype), shape))
    bx = be.asarray(x)
    all_axes = tuple(range(len(shape)))
    _check(be, loop_sum(x, all_axes), be.sum(bx), "sum")
    n = dtype(int(np.prod(shape)))
    with np.errstate(all="ignore"):
        _check(be, loop_sum(x, all_axes) / n, be.mean(bx), "mean")
    for ax in all_axes:
        _check(be, loop_sum(x, (ax,)), be.sum(bx, ax), f"sum axis {ax}")
        with np.errstate(all="ignore"):
            want = loop_sum(x, (ax,)) / dtype(shape[ax])
        _check(be, want, be.mean(bx, ax), f"mean axis {ax}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape,axes", [((2, 3, 4, 5), (0, 2, 3)), ((2, 3, 4), (2, 0)),
                                        ((3, 4, 5), (-1, -2)), ((0, 3, 2), (0, 2))])
@given(data=st.data())
def test_sum_mean_over_several_axes(be, dtype, shape, axes, data):
    """sum / mean over a tuple of axes (batch norm's (N, H, W), layer norm's last k): per
    kept slot the serial sum in row-major order over those axes, then / their count."""
    x = data.draw(arrays(np.dtype(dtype), shape))
    bx = be.asarray(x)
    norm = tuple(sorted(a % len(shape) for a in axes))
    want = loop_sum(x, norm)
    _check(be, want, be.sum(bx, axes), f"sum axes {axes}")
    with np.errstate(all="ignore"):
        _check(be, want / dtype(int(np.prod([shape[a] for a in norm]))), be.mean(bx, axes),
               f"mean axes {axes}")
    kept = be.sum(bx, axes, keepdims=True)
    assert tuple(kept.shape) == tuple(1 if i in norm else d for i, d in enumerate(shape))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape,target,axes", [((2, 3, 4), (3, 1), (0, 2)),
                                               ((2, 3, 4), (2, 1, 4), (1,)),
                                               ((3, 5), (), (0, 1)), ((3, 5), (5,), (0,))])
@given(data=st.data())
def test_sum_to_serial_order(be, dtype, shape, target, axes, data):
    x = data.draw(arrays(np.dtype(dtype), shape))
    want = loop_sum(x, axes).reshape(target)
    _check(be, want, be.sum_to(be.asarray(x), target), "sum_to")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1)])
@given(data=st.data())
def test_softmax_definition(be, dtype, shape, axis, data):
    x = data.draw(arrays(np.dtype(dtype), shape))
    with np.errstate(all="ignore"):
        want = loop_softmax(x, axis)
    _check(be, want, be.softmax(be.asarray(x), axis), "softmax")


def test_accumulator_starts_at_first_element(be):
    """The sign of a zero sum: [-0.0] sums to -0.0, [-0.0, -0.0] too, an empty sum to +0.0."""
    for data, want in [([-0.0], -0.0), ([-0.0, -0.0], -0.0), ([-0.0, 0.0], 0.0)]:
        got = be.to_numpy(be.sum(be.asarray(np.array(data))))
        assert got.tobytes() == np.float64(want).tobytes(), (data, got)
    empty = be.to_numpy(be.sum(be.asarray(np.zeros((0,)))))
    assert empty.tobytes() == np.float64(0.0).tobytes()
    k0 = be.to_numpy(be.matmul(be.asarray(np.zeros((2, 0))), be.asarray(np.zeros((0, 3)))))
    assert np.array_equal(k0.view(np.uint64), np.zeros((2, 3), np.uint64))


def test_serial_sum_differs_from_pairwise(be):
    """A serial sum is not numpy's pairwise np.sum: pinned on a case where they differ."""
    x = np.array([1.0] + [1e-16] * 143)  # each 1e-16 is below half an ulp of 1.0
    got = be.to_numpy(be.sum(be.asarray(x))).item()
    assert got == 1.0  # serial: 1.0 + 1e-16 rounds back to 1.0, every time
    assert float(np.sum(x)) > 1.0  # pairwise sums the small terms first


# ---------------------------------------------------------------- typed-input ops
def loop_take_grad(g, ids, n):
    """take's backward by loops: destination i = serial sum, in position order, of g[j]."""
    T = _scalar(g.dtype)
    flat = [int(v) + n if v < 0 else int(v) for v in ids.reshape(-1)]
    g2 = g.reshape((len(flat),) + g.shape[ids.ndim:])
    out = np.zeros((n,) + g2.shape[1:], g.dtype)
    for col in itertools.product(*[range(d) for d in g2.shape[1:]]):
        for i in range(n):
            acc = None
            for j, d in enumerate(flat):
                if d == i:
                    v = T(g2[(j, *col)])
                    with np.errstate(all="ignore"):
                        acc = v if acc is None else acc + v
            out[(i, *col)] = T(0.0) if acc is None else acc
    return out


def loop_log_softmax(x, axis):
    """Per row: m = max + 0.0, s = serial sum exp(x - m), (x - m) - log(s), our exp and log."""
    from gtensor.ops.elementwise import LOG

    T = _scalar(x.dtype)
    ft = float_type(x)
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros_like(xm)
    with np.errstate(all="ignore"):
        for idx in itertools.product(*[range(d) for d in xm.shape[:-1]]):
            row = [T(v) for v in xm[idx]]
            m = row[0]
            for v in row[1:]:
                m = v if (v > m or v != v) else m
            m = m + T(0.0)
            d = [v - m for v in row]
            e = [T(EXP[ft].numpy(np.asarray(v, x.dtype))) for v in d]
            s = e[0]
            for v in e[1:]:
                s = s + v
            ls = T(LOG[ft].numpy(np.asarray(s, x.dtype)))
            out[idx] = [v - ls for v in d]
    return np.moveaxis(out, -1, axis)


def loop_argmax(x, axis):
    """The first index of the maximum; a later element wins only when strictly greater; the
    first NaN wins."""
    xm = np.moveaxis(x, axis, -1)
    out = np.zeros(xm.shape[:-1], np.int64)
    for idx in itertools.product(*[range(d) for d in xm.shape[:-1]]):
        row = list(xm[idx])
        best = 0
        for r in range(1, len(row)):
            if row[best] != row[best]:
                break
            if row[r] != row[r] or row[r] > row[best]:
                best = r
        out[idx] = best
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("gshape,nids,n", [((6, 3), 6, 4), ((5,), 5, 2), ((7, 2), 7, 7)])
@given(data=st.data())
def test_take_grad_adds_in_position_order(be, dtype, gshape, nids, n, data):
    g = data.draw(arrays(np.dtype(dtype), gshape))
    ids = np.asarray(data.draw(st.lists(st.integers(-n, n - 1), min_size=nids,
                                        max_size=nids)), np.int64)
    got = be.take_grad(be.asarray(g), be.asarray(ids, dtype="int64"), n, 0)
    _check(be, loop_take_grad(g, ids, n), got, "take_grad")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1)])
@given(data=st.data())
def test_log_softmax_definition(be, dtype, shape, axis, data):
    x = data.draw(arrays(np.dtype(dtype), shape))
    _check(be, loop_log_softmax(x, axis), be.log_softmax(be.asarray(x), axis), "log_softmax")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1)])
@given(data=st.data())
def test_argmax_definition(be, dtype, shape, axis, data):
    x = data.draw(arrays(np.dtype(dtype), shape))
    got = be.to_numpy(be.argmax(be.asarray(x), axis))
    assert np.array_equal(got, loop_argmax(x, axis)), (x, got)


def test_take_grad_order_is_the_position_order(be):
    """(1 + 1e-16) + 1e-16 is 1 but 1e-16 + 1e-16 + 1 is not: the order is seen, and it is
    the order of the positions in ids."""
    g = np.array([1.0, 1e-16, 1e-16, 5.0])
    ids = np.array([0, 0, 0, 1], np.int64)
    got = be.to_numpy(be.take_grad(be.asarray(g), be.asarray(ids, dtype="int64"), 2, 0))
    assert got.tolist() == [1.0, 5.0]
    g2 = np.array([1e-16, 1e-16, 1.0, 5.0])
    got2 = be.to_numpy(be.take_grad(be.asarray(g2), be.asarray(ids, dtype="int64"), 2, 0))
    assert got2[0] == 1e-16 + 1e-16 + 1.0 and got2[0] > 1.0


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_comparisons_are_ieee(be, dtype):
    """Each comparison against Python's own operator on every pair of special values (NaN
    false except !=, +0.0 == -0.0, infinities ordered)."""
    import operator

    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1.5], dtype)
    a, b = np.meshgrid(vals, vals, indexing="ij")
    ba, bb = be.asarray(a), be.asarray(b)
    for name, fn in (("greater", operator.gt), ("greater_equal", operator.ge),
                     ("less", operator.lt), ("less_equal", operator.le),
                     ("equal", operator.eq), ("not_equal", operator.ne)):
        want = np.array([[fn(float(x), float(y)) for y in vals] for x in vals])
        got = be.to_numpy(getattr(be, name)(ba, bb))
        assert got.dtype == np.bool_ and np.array_equal(got, want), name
