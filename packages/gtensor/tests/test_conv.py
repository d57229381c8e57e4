"""conv2d (strides, paddings, dilations, groups), its gradients and the pools (padding,
dilation, ceil mode, count_include_pad, adaptive): the backend under test vs the loop oracles
(bitwise, special values included), vs torch float64 (forward and both gradients, random
geometries), tie and NaN rules, and bad input refused with the op, the argument and what is
accepted."""

from __future__ import annotations

import numpy as np
import pytest
from cases import CASES, case_inputs
from gtensor import conv_loops as cl
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference
from hypothesis import given
from hypothesis import strategies as st

DTYPES = [np.float64, np.float32]
_GEO = ("dilation", "groups")
_MAX = ("padding", "dilation", "ceil_mode")
_AVG = ("padding", "ceil_mode", "count_include_pad")


def _more(at: dict, names: tuple) -> dict:
    return {k: at[k] for k in names if k in at}


ORACLES = {
    "conv2d": lambda a, at: cl.loop_conv2d(*a, at["stride"], at["padding"],
                                           at.get("inner", "plain"), **_more(at, _GEO)),
    "conv2d_grad_weight": lambda a, at: cl.loop_conv2d_grad_weight(
        *a, at["stride"], at["padding"], at["kernel"], at.get("inner", "plain"),
        **_more(at, _GEO)),
    "conv2d_grad_input": lambda a, at: cl.loop_conv2d_grad_input(
        *a, at["stride"], at["padding"], at["size"], at.get("inner", "plain"),
        **_more(at, _GEO)),
    "max_pool2d": lambda a, at: cl.loop_max_pool2d(*a, at["kernel"], at["stride"],
                                                   **_more(at, _MAX)),
    "max_pool2d_grad": lambda a, at: cl.loop_max_pool2d_grad(*a, at["kernel"], at["stride"],
                                                             **_more(at, _MAX)),
    "max_pool2d_pick": lambda a, at: cl.loop_max_pool2d_pick(*a, at["kernel"], at["stride"],
                                                             **_more(at, _MAX)),
    "avg_pool2d": lambda a, at: cl.loop_avg_pool2d(*a, at["kernel"], at["stride"],
                                                   **_more(at, _AVG)),
    "avg_pool2d_grad": lambda a, at: cl.loop_avg_pool2d_grad(*a, at["kernel"], at["stride"],
                                                             at["size"], **_more(at, _AVG)),
    "adaptive_avg_pool2d": lambda a, at: cl.loop_adaptive_avg_pool2d(*a, at["output_size"]),
    "adaptive_avg_pool2d_grad": lambda a, at: cl.loop_adaptive_avg_pool2d_grad(*a, at["size"]),
}
ROWS = [c for c in CASES if c.op in ORACLES]


def _run(be, op, arrays, **attrs):
    return be.to_numpy(getattr(be, op)(*[be.asarray(a, dtype=a.dtype) for a in arrays],
                                       **attrs))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("case", ROWS, ids=[c.id for c in ROWS])
@given(data=st.data())
def test_against_the_loop_oracle(be, case, dtype, data):
    """Every conv/pool row: the defined order, each operation rounded, bit for bit."""
    ins = [data.draw(s, label=f"input{i}") for i, s in enumerate(case_inputs(case, dtype))]
    if case.op.startswith("conv"):
        full = {"stride": 1, "padding": 0, **case.attrs}
    elif case.op.startswith("adaptive"):
        full = dict(case.attrs)
    else:
        full = {"stride": None, **case.attrs}
    want = ORACLES[case.op](ins, full)
    got = _run(be, case.op, ins, **case.attrs)
    assert bits_equal(want, got), f"{case.id} {np.dtype(dtype)}: {first_difference(want, got)}"


@st.composite
def _geometry(draw):
    """A conv geometry: sizes, kernel, stride, padding, dilation, groups (dilated kernel <=
    padded input; groups dividing both channel counts)."""
    n, g = draw(st.integers(0, 2)), draw(st.sampled_from([1, 1, 2, 3]))
    c, o = g * draw(st.integers(1, 2)), g * draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh = min(draw(st.integers(1, 4)), (h + 2 * ph - 1) // dh + 1)
    kw = min(draw(st.integers(1, 4)), (w + 2 * pw - 1) // dw + 1)
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return (n, c, h, w), (o, c // g, kh, kw), (sh, sw), (ph, pw), (dh, dw), g


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@given(geom=_geometry(), data=st.data())
def test_conv_geometries_against_the_loops(be, dtype, inner, geom, data):
    """Random sizes, kernels, strides, paddings, dilations and groups (borders, taps skipped
    by strides, empty batches): all three conv ops bitwise the loop oracles, both contracts."""
    from cases import arrays

    xs, ws, stride, padding, dilation, groups = geom
    at = {"stride": stride, "padding": padding, "inner": inner, "dilation": dilation,
          "groups": groups}
    geo = {"dilation": dilation, "groups": groups}
    x = data.draw(arrays(np.dtype(dtype), xs), label="x")
    w = data.draw(arrays(np.dtype(dtype), ws), label="w")
    y = _run(be, "conv2d", [x, w], **at)
    want = cl.loop_conv2d(x, w, stride, padding, inner, **geo)
    assert bits_equal(want, y), f"conv2d: {first_difference(want, y)}"
    gy = data.draw(arrays(np.dtype(dtype), y.shape), label="g")
    got = _run(be, "conv2d_grad_input", [gy, w], size=xs[2:], **at)
    want = cl.loop_conv2d_grad_input(gy, w, stride, padding, xs[2:], inner, **geo)
    assert bits_equal(want, got), f"grad_input: {first_difference(want, got)}"
    got = _run(be, "conv2d_grad_weight", [gy, x], kernel=ws[2:], **at)
    want = cl.loop_conv2d_grad_weight(gy, x, stride, padding, ws[2:], inner, **geo)
    assert bits_equal(want, got), f"grad_weight: {first_difference(want, got)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_stride_two_rows_bitwise(be, dtype):
    """Stride-2 im2col rows (the cpu kernels copy them four values at a time by a shuffle of
    two loads, reading one value past the last they use): 3x3 pad 1 and 1x1 pad 0 convs on
    widths giving 4 to 9 output columns (whole groups of four and tails), the last load at
    the end of the padded image's buffer; all three ops bitwise the loop oracles, -0.0 kept."""
    rng = np.random.default_rng(21)
    for width in (7, 8, 9, 12, 15, 16, 17):
        for (kh, kw), pad in (((3, 3), 1), ((1, 1), 0)):
            x = rng.standard_normal((3, 2, 5, width)).astype(dtype)
            x[0, 0, 0, 0] = -0.0
            w = rng.standard_normal((3, 2, kh, kw)).astype(dtype)
            at = {"stride": 2, "padding": pad}
            y = _run(be, "conv2d", [x, w], **at)
            assert y.shape[3] >= 4
            assert bits_equal(cl.loop_conv2d(x, w, 2, pad, "plain"), y), (width, kh)
            gy = rng.standard_normal(y.shape).astype(dtype)
            got = _run(be, "conv2d_grad_weight", [gy, x], kernel=(kh, kw), **at)
            want = cl.loop_conv2d_grad_weight(gy, x, 2, pad, (kh, kw), "plain")
            assert bits_equal(want, got), (width, kh)
            got = _run(be, "conv2d_grad_input", [gy, w], size=(5, width), **at)
            want = cl.loop_conv2d_grad_input(gy, w, 2, pad, (5, width), "plain")
            assert bits_equal(want, got), (width, kh)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_contracts_differ_where_they_must(be, dtype):
    """One output, taps w = [-1, v], x = [1, v] with v = 1 + 2^-(p//2+2): plain rounds v*v
    before adding -1 (the 2^-2(p//2+2) bit is lost), fma keeps it; so in the weight gradient
    (positions g = [-1, v] against x) and in the input gradient (per tap, over o); the taps'
    sum in col2im is a plain add under both."""
    p = 53 if dtype == np.float64 else 24
    v = 1 + 2.0 ** -(p // 2 + 2)
    plain_bits, fma_bits = dtype(2.0 ** -(p // 2 + 1)), dtype(2.0 ** -(p // 2 + 1)
                                                              + 2.0 ** -(2 * (p // 2 + 2)))
    x = np.array([1.0, v], dtype).reshape(1, 2, 1, 1)  # 2 channels: 2 taps of a 1x1 kernel
    w = np.array([-1.0, v], dtype).reshape(1, 2, 1, 1)
    got = {inner: _run(be, "conv2d", [x, w], inner=inner) for inner in ("plain", "fma")}
    assert got["plain"].item() == plain_bits and got["fma"].item() == fma_bits, got
    xs = np.array([1.0, v], dtype).reshape(2, 1, 1, 1)  # 2 images: 2 positions
    gs = np.array([-1.0, v], dtype).reshape(2, 1, 1, 1)
    got = {inner: _run(be, "conv2d_grad_weight", [gs, xs], kernel=1, inner=inner)
           for inner in ("plain", "fma")}
    assert got["plain"].item() == plain_bits and got["fma"].item() == fma_bits, got
    wo = np.array([-1.0, v], dtype).reshape(2, 1, 1, 1)  # 2 output channels
    go = np.array([1.0, v], dtype).reshape(1, 2, 1, 1)
    got = {inner: _run(be, "conv2d_grad_input", [go, wo], size=1, inner=inner)
           for inner in ("plain", "fma")}
    assert got["plain"].item() == plain_bits and got["fma"].item() == fma_bits, got
    assert got["plain"].tobytes() != got["fma"].tobytes()


def test_fma_reference_is_the_fma_matmul_of_im2col(ref):
    """conv2d under fma: the fma matmul of w.reshape(O, K) by im2col(x padded), bit for bit
    (padded zeros multiplied: fma(w, +0.0, acc))."""
    from gtensor.ops.conv import im2col

    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5, 4))
    w = rng.standard_normal((4, 3, 3, 2))
    x[0, 1, 2, 2] = np.inf  # meets padded zeros in no window: every tap is inside
    cols = im2col(x, (3, 2), (1, 2), (2, 1))
    k, n, oh, ow = cols.shape
    mm = ref.to_numpy(ref.matmul(w.reshape(4, k), cols.reshape(k, -1), inner="fma"))
    want = np.ascontiguousarray(mm.reshape(4, n, oh, ow).transpose(1, 0, 2, 3))
    got = _run(ref, "conv2d", [x, w], stride=(1, 2), padding=(2, 1), inner="fma")
    assert bits_equal(want, got), first_difference(want, got)
    with pytest.raises(ValueError, match=r"conv2d: inner is 'fused'; expected one of"):
        ref.conv2d(ref.asarray(x), ref.asarray(w), inner="fused")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@given(data=st.data())
def test_pool_geometries_against_the_loops(be, dtype, data):
    """Random pool geometries (padding, dilation, ceil mode, count_include_pad; windows of
    padding only) over a few repeated values (ties, +-0.0, NaN, inf): the pools and their
    gradients bitwise the loop oracles; adaptive pools over random output sizes too."""
    from hypothesis.extra import numpy as hnp

    n, c = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    h, w = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    k = (data.draw(st.integers(1, h + 1)), data.draw(st.integers(1, w + 1)))
    stride = data.draw(st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    pad = (data.draw(st.integers(0, k[0] // 2)), data.draw(st.integers(0, k[1] // 2)))
    dil = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    ceil, inc = data.draw(st.booleans()), data.draw(st.booleans())
    vals = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, np.nan, np.inf, -np.inf, 0.5])
    x = data.draw(hnp.arrays(np.dtype(dtype), (n, c, h, w), elements=vals), label="x")
    mx = {"kernel": k, "stride": stride, "padding": pad, "dilation": dil, "ceil_mode": ceil}
    av = {"kernel": k, "stride": stride, "padding": pad, "ceil_mode": ceil,
          "count_include_pad": inc}
    try:
        y = _run(be, "max_pool2d", [x], **mx)
    except ValueError:  # the dilated window does not fit: refused (tested below)
        y = None
    if y is not None:
        assert bits_equal(cl.loop_max_pool2d(x, k, stride, pad, dil, ceil), y)
        gy = data.draw(hnp.arrays(np.dtype(dtype), y.shape, elements=vals), label="g")
        want = cl.loop_max_pool2d_grad(gy, x, k, stride, pad, dil, ceil)
        got = _run(be, "max_pool2d_grad", [gy, x], **mx)
        assert bits_equal(want, got), f"max grad: {first_difference(want, got)}"
        assert bits_equal(cl.loop_max_pool2d_pick(x * 2, x, k, stride, pad, dil, ceil),
                          _run(be, "max_pool2d_pick", [x * 2, x], **mx))
    try:
        y = _run(be, "avg_pool2d", [x], **av)
    except ValueError:
        y = None
    if y is not None:
        assert bits_equal(cl.loop_avg_pool2d(x, k, stride, pad, ceil, inc), y)
        gy = data.draw(hnp.arrays(np.dtype(dtype), y.shape, elements=vals), label="ga")
        want = cl.loop_avg_pool2d_grad(gy, k, stride, (h, w), pad, ceil, inc)
        got = _run(be, "avg_pool2d_grad", [gy], size=(h, w), **av)
        assert bits_equal(want, got), f"avg grad: {first_difference(want, got)}"
    out = (data.draw(st.integers(1, h)), data.draw(st.integers(1, w)))
    y = _run(be, "adaptive_avg_pool2d", [x], output_size=out)
    assert bits_equal(cl.loop_adaptive_avg_pool2d(x, out), y)
    gy = data.draw(hnp.arrays(np.dtype(dtype), y.shape, elements=vals), label="gad")
    want = cl.loop_adaptive_avg_pool2d_grad(gy, (h, w))
    got = _run(be, "adaptive_avg_pool2d_grad", [gy], size=(h, w))
    assert bits_equal(want, got), f"adaptive grad: {first_difference(want, got)}"


# --------------------------------------------------------------------------- torch float64
torch = pytest.importorskip("torch")
F = torch.nn.functional
CONV_SHAPES = [  # x, w, stride, padding: strides, paddings, odd sizes, 1x1, non-square
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1), ((1, 2, 9, 8), (3, 2, 3, 2), 2, 0),
    ((3, 1, 5, 7), (2, 1, 2, 3), (2, 3), (1, 2)), ((2, 4, 6, 6), (5, 4, 1, 1), 1, 0),
    ((1, 3, 8, 8), (2, 3, 5, 5), 3, 2), ((2, 2, 4, 4), (3, 2, 4, 4), 1, 3)]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CONV_SHAPES)
def test_conv2d_matches_torch_float64(be, x_shape, w_shape, stride, padding):
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    yt = F.conv2d(xt, wt, stride=stride, padding=padding)
    gy = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(gy))
    y = _run(be, "conv2d", [x, w], stride=stride, padding=padding)
    dx = _run(be, "conv2d_grad_input", [gy, w], stride=stride, padding=padding,
              size=x_shape[2:])
    dw = _run(be, "conv2d_grad_weight", [gy, x], stride=stride, padding=padding,
              kernel=w_shape[2:])
    for what, ours, theirs in (("y", y, yt), ("dx", dx, xt.grad), ("dw", dw, wt.grad)):
        theirs = theirs.detach().numpy()
        assert ours.shape == theirs.shape, what
        err = np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))
        assert err < 1e-14, f"{what}: relative error {err:.2e}"


def _rel(ours, theirs) -> float:
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
    assert ours.shape == theirs.shape
    scale = np.max(np.abs(theirs)) if theirs.size else 1.0
    return float(np.max(np.abs(ours - theirs)) / scale) if theirs.size and scale else 0.0


@pytest.mark.parametrize("seed", range(12))
def test_conv_random_geometries_match_torch_float64(be, seed):
    """Random strides, paddings, dilations, groups (depthwise included) and odd sizes: conv2d,
    its two gradients, and conv2d_grad_input as torch's conv_transpose2d (weight (C_in,
    C_out/groups, KH, KW), output_padding < stride), against torch float64."""
    rng = np.random.default_rng(100 + seed)
    g = int(rng.choice([1, 2, 3]))
    c, o = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    if seed % 4 == 3:  # depthwise
        o = c = g
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(4, 9)), int(rng.integers(4, 9))
    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    st_ = tuple(int(v) for v in rng.integers(1, 3, 2))
    pd, dl = (tuple(int(v) for v in rng.integers(0, 3, 2)),
              tuple(int(v) for v in rng.integers(1, 3, 2)))
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c // g, *k))
    xt, wtt = torch.tensor(x, requires_grad=True), torch.tensor(wt, requires_grad=True)
    yt = F.conv2d(xt, wtt, stride=st_, padding=pd, dilation=dl, groups=g)
    gy = rng.standard_normal(tuple(yt.shape))
    yt.backward(torch.tensor(gy))
    at = {"stride": st_, "padding": pd, "dilation": dl, "groups": g}
    y = _run(be, "conv2d", [x, wt], **at)
    dx = _run(be, "conv2d_grad_input", [gy, wt], size=(h, w), **at)
    dw = _run(be, "conv2d_grad_weight", [gy, x], kernel=k, **at)
    for what, ours, theirs in (("y", y, yt), ("dx", dx, xt.grad), ("dw", dw, wtt.grad)):
        assert _rel(ours, theirs) < 1e-14, f"{what} {at}: {_rel(ours, theirs):.2e}"
    op = tuple(int(rng.integers(0, s)) for s in st_)  # conv_transpose2d of gy by wt
    size = tuple((gy.shape[2 + a] - 1) * st_[a] - 2 * pd[a] + dl[a] * (k[a] - 1) + op[a] + 1
                 for a in (0, 1))
    tt = F.conv_transpose2d(torch.tensor(gy), torch.tensor(wt), stride=st_, padding=pd,
                            output_padding=op, groups=g, dilation=dl)
    ours = _run(be, "conv2d_grad_input", [gy, wt], size=size, **at)
    assert _rel(ours, tt) < 1e-14, f"conv_transpose2d {at} output_padding {op}"


@pytest.mark.parametrize("seed", range(12))
def test_pool_random_geometries_match_torch_float64(be, seed):
    """Random kernels, strides, paddings (<= kernel // 2), dilations, ceil mode and
    count_include_pad, and adaptive output sizes: values and gradients against torch float64
    (max pooling's values and, on distinct values, its gradients exactly)."""
    rng = np.random.default_rng(200 + seed)
    n, c, h, w = 2, 2, int(rng.integers(3, 9)), int(rng.integers(3, 9))
    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    s = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
    d = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    ceil, inc = bool(seed % 2), bool(seed % 3)
    x = rng.standard_normal((n, c, h, w))
    xt = torch.tensor(x, requires_grad=True)
    calls = []
    try:
        calls.append(("max", F.max_pool2d(xt, k, s, p, d, ceil), {
            "kernel": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil}))
    except RuntimeError:  # torch refuses the geometry too: so do we (bad-input tests)
        pass
    calls.append(("avg", F.avg_pool2d(xt, k, s, p, ceil, inc), {
        "kernel": k, "stride": s, "padding": p, "ceil_mode": ceil, "count_include_pad": inc}))
    out = (int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1)))
    calls.append(("adaptive", F.adaptive_avg_pool2d(xt, out), {"output_size": out}))
    for kind, yt, at in calls:
        xt.grad = None
        gy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(gy))
        if kind == "max":
            y = _run(be, "max_pool2d", [x], **at)
            if np.isneginf(y).any():  # a window of padding only: torch indexes past it
                continue
            assert bits_equal(y, yt.detach().numpy()), f"max {at}"
            dx = _run(be, "max_pool2d_grad", [gy, x], **at)
        elif kind == "avg":
            y = _run(be, "avg_pool2d", [x], **at)
            dx = _run(be, "avg_pool2d_grad", [gy], size=(h, w), **at)
        else:
            y = _run(be, "adaptive_avg_pool2d", [x], **at)
            dx = _run(be, "adaptive_avg_pool2d_grad", [gy], size=(h, w))
        assert _rel(y, yt) < 1e-15 and _rel(dx, xt.grad) < 1e-15, f"{kind} {at}"


POOL_SHAPES = [((2, 3, 8, 8), 2, None), ((1, 2, 7, 9), 3, 2), ((2, 1, 6, 5), (2, 3), (1, 2)),
               ((1, 2, 5, 5), 3, 1), ((1, 1, 4, 4), 4, None)]


@pytest.mark.parametrize("x_shape,kernel,stride", POOL_SHAPES)
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_pools_match_torch_float64(be, x_shape, kernel, stride, ties):
    """Values and gradients; with ties (values drawn from a few integers) both libraries give
    the gradient to the first maximum of a window in row-major order: equal bits."""
    rng = np.random.default_rng(sum(x_shape))
    x = rng.integers(-2, 3, x_shape).astype(np.float64) if ties else rng.standard_normal(x_shape)
    xt = torch.tensor(x, requires_grad=True)
    for op, fn in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
        xt.grad = None
        yt = fn(xt, kernel, stride)
        gy = rng.standard_normal(tuple(yt.shape))
        yt.backward(torch.tensor(gy))
        y = _run(be, op, [x], kernel=kernel, stride=stride)
        if op == "max_pool2d":
            dx = _run(be, "max_pool2d_grad", [gy, x], kernel=kernel, stride=stride)
            assert bits_equal(y, yt.detach().numpy()), op  # a max is exact
            if ties:  # torch adds a window's contributions in row-major order from +0.0
                assert np.array_equal(dx, xt.grad.numpy()), f"{op} grad"
        else:
            dx = _run(be, "avg_pool2d_grad", [gy], kernel=kernel, stride=stride,
                      size=x_shape[2:])
        for what, ours, theirs in (("y", y, yt.detach().numpy()), ("dx", dx, xt.grad.numpy())):
            err = np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))
            assert err < 1e-15, f"{op} {what}: relative error {err:.2e}"


def test_max_pool_ties_and_nans(be):
    """Ties keep the first element (-0.0 before +0.0); the first NaN of a window wins."""
    x = np.array([[[[-0.0, 0.0], [0.0, -0.0]], [[1.0, np.nan], [np.nan, 5.0]]]])
    x = x.reshape(1, 2, 2, 2)
    y = _run(be, "max_pool2d", [x], kernel=2)
    assert np.signbit(y[0, 0, 0, 0]) and np.isnan(y[0, 1, 0, 0])
    dx = _run(be, "max_pool2d_grad", [np.full((1, 2, 1, 1), 3.0), x], kernel=2)
    assert dx.reshape(2, 4).tolist() == [[3.0, 0.0, 0.0, 0.0], [0.0, 3.0, 0.0, 0.0]]
    assert not np.signbit(dx).any()  # unchosen elements are +0.0


def test_overlapping_max_windows_add_in_window_order(be):
    """stride < kernel: one element chosen by several windows gets their serial sum."""
    x = np.zeros((1, 1, 3, 3))
    x[0, 0, 1, 1] = 9.0  # the max of all four 2x2 windows (stride 1)
    g = np.array([1.0, 0.5, 1e16, 1.0]).reshape(1, 1, 2, 2)
    # row-major window order; reversed, rows reversed, columns reversed or column-major differ
    want = ((1.0 + 0.5) + 1e16) + 1.0
    assert want not in (((1.0 + 1e16) + 0.5) + 1.0, ((1e16 + 1.0) + 1.0) + 0.5,
                        ((0.5 + 1.0) + 1.0) + 1e16, ((1.0 + 1e16) + 0.5) + 1.0)
    for op, args in (("max_pool2d_grad", [g, x]), ("avg_pool2d_grad", [g * 4.0])):
        extra = {} if op == "max_pool2d_grad" else {"size": (3, 3)}
        dx = _run(be, op, args, kernel=2, stride=1, **extra)
        assert dx[0, 0, 1, 1] == want, op


def test_padding_multiplies_zero(be):
    """Padded elements are +0.0 and are multiplied: an infinite weight over padding is NaN."""
    x = np.ones((1, 1, 2, 2))
    w = np.full((1, 1, 3, 3), np.inf)
    y = _run(be, "conv2d", [x, w], padding=1)
    assert np.isnan(y).all()
    w = np.full((1, 1, 3, 3), -1.0)
    x = np.zeros((1, 1, 1, 1))
    # the chain starts at the first product, not at +0.0: nine (-1 * +0) = -0.0 sum to -0.0
    assert np.signbit(_run(be, "conv2d", [x, w], padding=1)).all()


# --------------------------------------------------------------------------- bad input
BAD = [
    ("conv2d", [(2, 3, 5), (4, 3, 3, 3)], {}, ValueError, r"conv2d: x has shape \(2, 3, 5\); "
     r"expected a 4-D array \(N, C, H, W\)"),
    ("conv2d", [(2, 3, 5, 5), (4, 2, 3, 3)], {}, ValueError,
     r"conv2d: x has 3 channels .* w expects 2 .*expected x.shape\[1\] == w.shape\[1\]"),
    ("conv2d", [(1, 1, 2, 2), (1, 1, 3, 3)], {}, ValueError,
     r"conv2d: kernel \(3, 3\) is larger than the padded input \(2, 2\)"),
    ("conv2d", [(1, 1, 4, 4), (1, 1, 3, 3)], {"stride": 0}, ValueError,
     r"conv2d: stride is 0; expected values >= 1"),
    ("conv2d", [(1, 1, 4, 4), (1, 1, 3, 3)], {"padding": -1}, ValueError,
     r"conv2d: padding is -1; expected values >= 0"),
    ("conv2d", [(1, 1, 4, 4), (1, 1, 3, 3)], {"stride": 1.5}, TypeError,
     r"conv2d: stride is 1.5; expected an int or a pair \(h, w\) of ints"),
    ("conv2d", [(1, 1, 4, 4), (1, 1, 3, 3)], {"padding": (1, 2, 3)}, TypeError,
     r"conv2d: padding is \(1, 2, 3\); expected an int or a pair"),
    ("max_pool2d", [(1, 1, 4)], {"kernel": 2}, ValueError, r"max_pool2d: x has shape \(1, 1, 4\)"),
    ("max_pool2d", [(1, 1, 4, 4)], {"kernel": 5}, ValueError,
     r"max_pool2d: kernel \(5, 5\) is larger than the padded input \(4, 4\)"),
    ("avg_pool2d", [(1, 1, 4, 4)], {"kernel": 2, "stride": -1}, ValueError,
     r"avg_pool2d: stride is -1; expected values >= 1"),
    ("avg_pool2d", [(1, 1, 4, 4)], {"kernel": "2"}, TypeError, r"avg_pool2d: kernel is '2'"),
    ("max_pool2d", [(1, 1, 4, 4)], {"kernel": True}, TypeError, r"max_pool2d: kernel is True"),
    ("conv2d_grad_input", [(1, 2, 3, 3), (2, 1, 3, 3)], {"size": (4, 4)}, ValueError,
     r"conv2d_grad_input: g has shape \(1, 2, 3, 3\); expected \(N, O, OH, OW\) with "
     r"\(O, OH, OW\) = \(2, 2, 2\)"),
    ("max_pool2d_grad", [(1, 1, 3, 3), (1, 1, 4, 4)], {"kernel": 2}, ValueError,
     r"max_pool2d_grad: g has shape \(1, 1, 3, 3\); expected \(1, 1, 2, 2\)"),
    ("conv2d", [(1, 4, 5, 5), (6, 2, 3, 3)], {"groups": 3}, ValueError,
     r"conv2d: groups is 3, which does not divide the input channels 4; expected groups "
     r"dividing both"),
    ("conv2d", [(1, 4, 5, 5), (6, 2, 3, 3)], {"groups": 1}, ValueError,
     r"conv2d: x has 4 channels .* w expects 2 .* groups 1\); expected x.shape\[1\] == "
     r"w.shape\[1\] \* groups"),
    ("conv2d", [(1, 2, 5, 5), (2, 1, 3, 3)], {"groups": 0}, ValueError,
     r"conv2d: groups is 0; expected an int >= 1"),
    ("conv2d", [(1, 2, 5, 5), (2, 1, 3, 3)], {"groups": 2.0}, TypeError,
     r"conv2d: groups is 2.0; expected an int >= 1"),
    ("conv2d", [(1, 1, 5, 5), (1, 1, 3, 3)], {"dilation": 3}, ValueError,
     r"conv2d: kernel \(3, 3\) dilated by \(3, 3\) \(extent \(7, 7\)\) is larger than the "
     r"padded input"),
    ("conv2d", [(1, 1, 5, 5), (1, 1, 3, 3)], {"dilation": 0}, ValueError,
     r"conv2d: dilation is 0; expected values >= 1"),
    ("conv2d_grad_input", [(1, 4, 3, 3), (4, 1, 3, 3)], {"size": (5, 5), "groups": 3},
     ValueError, r"conv2d_grad_input: groups is 3, which does not divide the output channels 4"),
    ("max_pool2d", [(1, 1, 5, 5)], {"kernel": 3, "padding": 2}, ValueError,
     r"max_pool2d: padding \(2, 2\) is more than half the kernel \(3, 3\); expected padding "
     r"<= kernel // 2 on each axis \(torch's rule\)"),
    ("avg_pool2d", [(1, 1, 5, 5)], {"kernel": 2, "padding": (0, 2)}, ValueError,
     r"avg_pool2d: padding \(0, 2\) is more than half the kernel"),
    ("max_pool2d", [(1, 1, 4, 4)], {"kernel": 2, "ceil_mode": 1}, TypeError,
     r"max_pool2d: ceil_mode is 1; expected a bool"),
    ("avg_pool2d", [(1, 1, 4, 4)], {"kernel": 2, "count_include_pad": "no"}, TypeError,
     r"avg_pool2d: count_include_pad is 'no'; expected a bool"),
    ("max_pool2d", [(1, 1, 4, 4)], {"kernel": 2, "dilation": 4}, ValueError,
     r"max_pool2d: kernel \(2, 2\) dilated by \(4, 4\) is larger than the padded input"),
    ("max_pool2d", [(1, 1, 0, 4)], {"kernel": 1}, ValueError,
     r"max_pool2d: x has shape \(1, 1, 0, 4\); expected H, W >= 1"),
    ("adaptive_avg_pool2d", [(1, 1, 4, 4)], {"output_size": (5, 2)}, ValueError,
     r"adaptive_avg_pool2d: output_size \(5, 2\) is larger than the input \(4, 4\); "
     r"expected at most"),
    ("adaptive_avg_pool2d", [(1, 1, 4, 4)], {"output_size": 0}, ValueError,
     r"adaptive_avg_pool2d: output_size is 0; expected values >= 1"),
    ("adaptive_avg_pool2d_grad", [(1, 1, 5, 2)], {"size": (4, 4)}, ValueError,
     r"adaptive_avg_pool2d_grad: output_size \(5, 2\) is larger than the input \(4, 4\)"),
]


@pytest.mark.parametrize("op,shapes,attrs,exc,match", BAD, ids=[f"{b[0]}-{i}"
                                                               for i, b in enumerate(BAD)])
def test_bad_input_is_refused(be, op, shapes, attrs, exc, match):
    arrays = [be.asarray(np.ones(s)) for s in shapes]
    with pytest.raises(exc, match=match):
        getattr(be, op)(*arrays, **attrs)


def _assert_thread_runs_equal(be, ref, calls: list) -> None:
    """Each (op, args, attrs) of ``calls`` on the cpu backend at 1, 2 and 3 threads (split
    threshold lowered to 1) gives the reference's bits."""
    with cpu_thread_runs(be, threads=("1", "2", "3")) as runs:
        for op, args, attrs in calls:
            want = _run(ref, op, list(args), **attrs)
            for threads in runs:
                got = _run(be, op, list(args), **attrs)
                assert bits_equal(want, got), f"{op} threads={threads}: " \
                                              f"{first_difference(want, got)}"


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cpu_thread_splits_change_no_bit(be, ref, dtype, inner):
    """The cpu kernels split across 1, 2 and 3 threads (split threshold lowered to 1): images,
    weight-gradient channels and planes end mid-tile; every result equals numpy's bits."""
    if be.name != "cpu":
        pytest.skip("the cpu backend's thread splits")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((5, 3, 7, 6)).astype(dtype), rng.standard_normal((7, 3, 3, 3))
    w = w.astype(dtype)
    gy = rng.standard_normal((5, 7, 4, 3)).astype(dtype)  # stride 2, padding 1
    p = rng.standard_normal((5, 3, 3, 2)).astype(dtype)  # max/avg pool 3, stride 2 of x
    at = {"stride": 2, "padding": 1, "inner": inner}
    xg = rng.standard_normal((5, 6, 7, 6)).astype(dtype)  # groups 3, dilation 2
    wg = rng.standard_normal((9, 2, 3, 3)).astype(dtype)
    gg = rng.standard_normal((5, 9, 3, 2)).astype(dtype)
    ag = {"stride": 2, "padding": 1, "dilation": 2, "groups": 3, "inner": inner}
    pp = {"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True}  # pooled (5, 3, 4, 4)
    q = rng.standard_normal((5, 3, 4, 4)).astype(dtype)
    calls = [("conv2d", (x, w), at),
             ("conv2d_grad_input", (gy, w), {**at, "size": (7, 6)}),
             ("conv2d_grad_weight", (gy, x), {**at, "kernel": (3, 3)}),
             ("conv2d", (xg, wg), ag),
             ("conv2d_grad_input", (gg, wg), {**ag, "size": (7, 6)}),
             ("conv2d_grad_weight", (gg, xg), {**ag, "kernel": (3, 3)}),
             ("max_pool2d", (x,), {"kernel": 3, "stride": 2}),
             ("max_pool2d_grad", (p, x), {"kernel": 3, "stride": 2}),
             ("avg_pool2d_grad", (p,), {"kernel": 3, "stride": 2, "size": (7, 6)}),
             ("max_pool2d_grad", (q, x), pp),
             ("avg_pool2d_grad", (q,), {**pp, "size": (7, 6), "count_include_pad": False}),
             ("adaptive_avg_pool2d", (x,), {"output_size": (3, 4)}),
             ("adaptive_avg_pool2d_grad", (q,), {"size": (7, 6)})]
    _assert_thread_runs_equal(be, ref, calls)


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cpu_image_chunks_change_no_bit(be, ref, dtype, inner):
    """The cpu forward and input gradient take small images in chunks (one product over a
    chunk's positions: 37 images of 4x4 make chunks of 32, 19 / 18 or 13 / 13 / 11 images on
    1, 2, 3 threads); signed zeros everywhere, so the input gradient's sums that start at a
    -0.0 tap keep it and positions no tap reaches (stride 3, kernel 1) are +0.0: numpy's bits."""
    if be.name != "cpu":
        pytest.skip("the cpu backend's image chunks")
    rng = np.random.default_rng(8)

    def signed(shape):
        a = rng.standard_normal(shape).astype(dtype)
        a[rng.random(shape) < 0.3] = -0.0
        return a

    x, w, g = signed((37, 4, 4, 4)), signed((6, 2, 3, 3)), signed((37, 6, 4, 4))
    at = {"stride": 1, "padding": 1, "groups": 2, "inner": inner}
    x1, w1, g1 = signed((37, 3, 7, 7)), signed((5, 3, 1, 1)), signed((37, 5, 3, 3))
    a1 = {"stride": 3, "padding": 0, "inner": inner}
    zeros = np.full((37, 5, 3, 3), -0.0, dtype)  # plain: every tap -0.0, the sums stay -0.0
    calls = [("conv2d", (x, w), at),
             ("conv2d_grad_input", (g, w), {**at, "size": (4, 4)}),
             ("conv2d_grad_weight", (g, x), {**at, "kernel": (3, 3)}),
             ("conv2d", (x1, w1), a1),
             ("conv2d_grad_input", (g1, w1), {**a1, "size": (7, 7)}),
             ("conv2d_grad_input", (zeros, np.abs(w1)), {**a1, "size": (7, 7)})]
    _assert_thread_runs_equal(be, ref, calls)
    dx = np.asarray(_run(ref, "conv2d_grad_input", [zeros, np.abs(w1)], **a1, size=(7, 7)))
    reached = np.zeros((7, 7), bool)
    reached[::3, ::3] = True
    # plain: each tap's value is its first product, -0.0, and the sums keep it; fma: the
    # chains over o start at +0.0, so every tap's value is +0.0
    assert np.all(np.signbit(dx[..., reached])) == (inner == "plain")
    assert not np.any(np.signbit(dx[..., ~reached]))


@pytest.mark.parametrize("op, attrs, shape, kernel", [
    ("avg_pool2d", {"kernel": 2}, (2, 3, 6, 6), "avg_pool2d_window"),
    ("avg_pool2d", {"kernel": 3, "stride": 1}, (1, 2, 5, 7), "avg_pool2d_window"),
    ("avg_pool2d", {"kernel": 3, "stride": 2, "ceil_mode": True}, (1, 2, 7, 7),
     "avg_pool2d_window"),  # ceil mode whose last window is whole
    ("avg_pool2d", {"kernel": 3, "stride": 2, "ceil_mode": True}, (1, 2, 6, 6), "avg_pool2d"),
    ("avg_pool2d", {"kernel": 3, "padding": 1}, (1, 2, 6, 6), "avg_pool2d"),
    ("adaptive_avg_pool2d", {"output_size": 1}, (2, 3, 4, 4), "adaptive_avg_pool2d_window"),
    ("adaptive_avg_pool2d", {"output_size": (2, 3)}, (1, 2, 4, 6), "adaptive_avg_pool2d_window"),
    ("adaptive_avg_pool2d", {"output_size": 3}, (1, 2, 4, 4), "adaptive_avg_pool2d"),
])
def test_whole_windows_run_the_generic_reduction(be, op, attrs, shape, kernel):
    """Whole windows (no padding, none clipped; adaptive windows of one size) run the generic
    reduction's kernel (``k_<op>_window``: mean over the window's positions), the others the
    pool kernel; both the loop oracle's bits, signed zeros and a NaN included."""
    from gtensor.backends.kernel_backend import KernelBackend
    from gtensor.recording import Recorder
    from gtensor.testing import require_backend

    kb = be if isinstance(be, KernelBackend) else require_backend("sim")
    x = np.random.default_rng(4).normal(size=shape)
    x[0, 0, 0, :2] = (-0.0, -0.0)
    x[-1, -1, -1, -1] = np.nan
    rec = Recorder(kb)
    with rec.recording() as launches:
        y = getattr(rec, op)(rec.asarray(x), **attrs)
    assert [launch.kernel.name for launch in launches] == [f"k_{kernel}_f64"]
    got = kb.to_numpy(y)
    if op == "avg_pool2d":
        at = {"stride": None, "padding": 0, "ceil_mode": False, **attrs}
        k = (at["kernel"],) * 2 if isinstance(at["kernel"], int) else at["kernel"]
        s = k if at["stride"] is None else (at["stride"],) * 2
        p = (at["padding"],) * 2
        want = cl.loop_avg_pool2d(x, k, s, p, at["ceil_mode"], True)
    else:
        o = attrs["output_size"]
        want = cl.loop_adaptive_avg_pool2d(x, (o, o) if isinstance(o, int) else o)
    assert bits_equal(want, got), first_difference(want, got)


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_weight_gradient_keeps_zero_signs_and_nans(be, dtype, inner):
    """The weight gradient over a position count whose row bytes are a multiple of 512 (2
    images of 8x8: the cpu kernel closes each chain with (-0.0) * (+0.0) terms there): a
    plain gradient that is exactly -0.0 stays -0.0 (a closing +0.0 term would make it +0.0), NaN
    and inf pass as the loop oracle's, on 1, 2 and 3 cpu threads; a 6x6 pair (no closing
    terms) alike."""
    rng = np.random.default_rng(5)
    for hw in (8, 6):
        x = np.abs(rng.standard_normal((2, 2, hw, hw))).astype(dtype)
        gy = np.full((2, 3, hw, hw), -0.0, dtype)  # every product -0.0: every sum -0.0
        gy[1, 1] = rng.standard_normal((hw, hw)).astype(dtype)  # output channel 1: values
        gy[0, 2, 3, 3] = np.nan
        gy[1, 2, 0, 0] = np.inf
        at = {"stride": 1, "padding": 1, "kernel": (3, 3), "inner": inner}
        want = cl.loop_conv2d_grad_weight(gy, x, 1, 1, (3, 3), inner)
        # the all -0.0 channel: -0.0 under plain (the first product starts the chain), +0.0
        # under fma (its chain starts at +0.0)
        assert not np.any(want[0]) and np.all(np.signbit(want[0]) == (inner == "plain"))
        with cpu_thread_runs(be, threads=("1", "2", "3")) as runs:
            for threads in runs:
                got = _run(be, "conv2d_grad_weight", [gy, x], **at)
                assert bits_equal(want, got), f"{hw}x{hw} threads={threads}: " \
                                              f"{first_difference(want, got)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_weight_gradient_split_taps_bitwise(be, dtype):
    """The cpu weight gradient (g transposed once, each thread a share of the taps against
    it): 16 and 11 output channels (2 groups of 11: groups too) over 64 and 20 positions a
    group's image, 36 and 27 taps, both contracts, bitwise the loop oracle on 1, 2 and 3
    threads."""
    rng = np.random.default_rng(8)
    for (n, c, h, w), o, groups in (((3, 4, 8, 8), 16, 1), ((2, 6, 5, 4), 22, 2),
                                     ((2, 3, 5, 4), 11, 1)):
        x = rng.standard_normal((n, c, h, w)).astype(dtype)
        gy = rng.standard_normal((n, o, h, w)).astype(dtype)
        for inner in ("plain", "fma"):
            at = {"stride": 1, "padding": 1, "kernel": (3, 3), "groups": groups,
                  "inner": inner}
            want = cl.loop_conv2d_grad_weight(gy, x, 1, 1, (3, 3), inner, groups=groups)
            with cpu_thread_runs(be, threads=("1", "2", "3")) as runs:
                for threads in runs:
                    got = _run(be, "conv2d_grad_weight", [gy, x], **at)
                    assert bits_equal(want, got), f"{o} {inner} threads={threads}: " \
                                                  f"{first_difference(want, got)}"
