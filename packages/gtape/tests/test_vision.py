"""Issue 41's composites and layers: BatchNorm (train / eval, running statistics as tape
states), GroupNorm, layer_norm over the last k axes, nearest upsampling, conv_transpose2d --
against torch float64 fed the same bits (forward, gradients, double backward), their written
orders bitwise against Python loops, every backend bitwise numpy (f64, f32), the state rules
(chained updates, commits at reset and at the next no_grad block, loads), and bad input refused
with the tape unchanged."""

from __future__ import annotations

import re

import gtape as g
import numpy as np
import pytest
from gtape_testutil import bits_equal, host, report

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _rel(ours, theirs) -> float:
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    assert np.shape(ours) == theirs.shape
    scale = max(float(np.max(np.abs(theirs))), 1e-300)
    return float(np.max(np.abs(np.asarray(ours) - theirs))) / scale


# ---------------------------------------------------------------- against torch float64
def _bn(training):
    return lambda x, w, b: g.batch_norm(x, None, None, w, b, training)


def _tbn(training):
    return lambda x, w, b: F.batch_norm(x, None, None, w, b, training)


FUNCTIONS = [  # id, ours, torch's, input shapes (x first)
    ("batch_norm_2d", _bn(True), _tbn(True), ((4, 3, 3, 2), (3,), (3,))),
    ("batch_norm_1d", _bn(True), _tbn(True), ((5, 3), (3,), (3,))),
    ("batch_norm_1d_L", _bn(True), _tbn(True), ((3, 2, 4), (2,), (2,))),
    ("group_norm", lambda x, w, b: g.group_norm(x, 2, w, b, 1e-5),
     lambda x, w, b: F.group_norm(x, 2, w, b, 1e-5), ((2, 4, 3, 3), (4,), (4,))),
    ("group_norm_1d", lambda x, w, b: g.group_norm(x, 3, w, b),
     lambda x, w, b: F.group_norm(x, 3, w, b), ((2, 6, 5), (6,), (6,))),
    ("layer_norm_2", lambda x, w, b: g.layer_norm(x, (3, 4), w, b),
     lambda x, w, b: F.layer_norm(x, (3, 4), w, b), ((2, 3, 4), (3, 4), (3, 4))),
    ("layer_norm_3", lambda x, w, b: g.layer_norm(x, (2, 3, 4), w, b, 1e-3),
     lambda x, w, b: F.layer_norm(x, (2, 3, 4), w, b, 1e-3), ((2, 2, 3, 4), (2, 3, 4),
                                                              (2, 3, 4))),
    ("interpolate", lambda x: g.interpolate(x, scale_factor=(2, 3)),
     lambda x: F.interpolate(x, scale_factor=(2, 3), mode="nearest"), ((1, 2, 2, 3),)),
    ("conv_transpose2d", lambda x, w, b: g.conv_transpose2d(x, w, b, (2, 1), 1, (1, 0), 2,
                                                            (1, 2)),
     lambda x, w, b: F.conv_transpose2d(x, w, b, (2, 1), 1, (1, 0), 2, (1, 2)),
     ((2, 4, 3, 4), (4, 3, 3, 2), (6,))),
]


@pytest.mark.parametrize("row", FUNCTIONS, ids=[r[0] for r in FUNCTIONS])
def test_values_gradients_and_double_backward_match_torch(bname, row):
    """loss = sum(tanh(f(x)) * C): values, first-order gradients of every input, a
    Hessian-vector product and a gradient penalty's gradients against torch float64."""
    name, ours, theirs, shapes = row
    rng = np.random.default_rng(sum(map(ord, name)))
    xs = [rng.normal(0.5, 1.5, s) for s in shapes]
    with g.Tape(bname) as tp:
        ps = [tp.param(x) for x in xs]
        y = ours(*ps)
        C = rng.normal(size=y.shape)
        V = [rng.normal(size=s) for s in shapes]
        loss = g.sum(g.tanh(y) * C)
        gs = g.grad(loss, ps, create_graph=True)
        dot = g.sum(gs[0] * V[0])
        for gv, v in zip(gs[1:], V[1:]):
            dot = dot + g.sum(gv * v)
        hv = g.grad(dot, ps)
        mine = [host(tp, tp.value(y))] + [gv.numpy() for gv in gs] + [host(tp, a) for a in hv]
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    yt = theirs(*ts)
    lt = (torch.tanh(yt) * torch.tensor(C)).sum()
    gt = torch.autograd.grad(lt, ts, create_graph=True)
    dt = sum((a * torch.tensor(v)).sum() for a, v in zip(gt, V))
    ht = torch.autograd.grad(dt, ts, materialize_grads=True)
    want = [yt] + list(gt) + list(ht)
    errs = [_rel(a, b) for a, b in zip(mine, want)]
    report("vision composites vs torch", f"{name}[{bname}]", max(errs))
    assert max(errs[:1 + len(xs)]) < 1e-13, (name, errs)
    assert max(errs) < 1e-11, (name, errs)


def test_batch_norm_layers_train_and_eval_match_torch_over_five_steps(bname):
    """BatchNorm2d / BatchNorm1d (momentum 0.1, 0.3 and None: the cumulative average) over 5
    training steps: outputs, gradients, running statistics and num_batches_tracked as torch's
    (1e-13); then eval mode on the running statistics."""
    rng = np.random.default_rng(3)
    cases = [(g.nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 3, 3), 0.1),
             (g.nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 3), 0.3),
             (g.nn.BatchNorm1d, torch.nn.BatchNorm1d, (5, 3, 4), None)]
    for ours_cls, torch_cls, shape, momentum in cases:
        tp = g.Tape(bname)
        bn = ours_cls(tp, 3, momentum=momentum)
        tb = torch_cls(3, momentum=momentum).double()
        w0, b0 = rng.normal(size=3), rng.normal(size=3)
        tp.set_value(bn.weight, w0)
        tp.set_value(bn.bias, b0)
        with torch.no_grad():
            tb.weight.copy_(torch.tensor(w0))
            tb.bias.copy_(torch.tensor(b0))
        for _ in range(5):
            x = rng.normal(1.0, 2.0, shape)
            with tp.episode():
                y = bn(tp.const(x))
                g.sum(y * y).backward()
                got = (host(tp, tp.value(y)), host(tp, tp.grad(bn.weight)),
                       host(tp, tp.grad(bn.bias)))
            tb.zero_grad()
            yt = tb(torch.tensor(x))
            (yt * yt).sum().backward()
            for a, b in zip(got, (yt, tb.weight.grad, tb.bias.grad)):
                assert _rel(a, b) < 1e-13
        ours, theirs = bn.state_dict(), tb.state_dict()
        assert list(ours) == list(theirs)  # names and order 1:1
        for k in ("running_mean", "running_var"):
            assert np.max(np.abs(ours[k] - theirs[k].numpy())) < 1e-12, k
        assert ours["num_batches_tracked"].dtype == np.int64
        assert ours["num_batches_tracked"] == theirs["num_batches_tracked"].item() == 5
        bn.eval()
        tb.eval()
        x = rng.normal(size=shape)
        with tp.episode():
            assert _rel(host(tp, tp.value(bn(tp.const(x)))), tb(torch.tensor(x))) < 1e-13
        tp.close()


def test_batch_norm_options_as_torch(bname):
    """track_running_stats=False (batch statistics in eval too, no states) and affine=False."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 2, 2, 2))
    with g.Tape(bname) as tp:
        bn = g.nn.BatchNorm2d(tp, 2, affine=False, track_running_stats=False).eval()
        tb = torch.nn.BatchNorm2d(2, affine=False, track_running_stats=False).double().eval()
        assert bn.state_dict() == {} and not list(bn.named_states())
        assert _rel(host(tp, tp.value(bn(tp.const(x)))), tb(torch.tensor(x))) < 1e-13
        assert bn.running_mean is None and "running_mean" not in dict(bn.named_buffers())


# ---------------------------------------------------------------- written orders
def _loop_batch_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """The module docstring's order on numpy scalars: per channel the serial sums over
    (n, h, w) row-major, one rounding per operation."""
    T = x.dtype.type
    n, c, h, w = x.shape
    y = np.empty_like(x)
    for ch in range(c):
        pos = [(a, i, j) for a in range(n) for i in range(h) for j in range(w)]
        acc = None
        for a, i, j in pos:
            acc = x[a, ch, i, j] if acc is None else T(acc + x[a, ch, i, j])
        mu = T(acc / T(len(pos)))
        ss = None
        for a, i, j in pos:
            d = T(x[a, ch, i, j] - mu)
            ss = T(d * d) if ss is None else T(ss + T(d * d))
        r = T(T(1.0) / np.sqrt(T(T(ss / T(len(pos))) + T(eps))))
        for a, i, j in pos:
            y[a, ch, i, j] = T(T(x[a, ch, i, j] - mu) * r)
    return y


def _loop_group_norm(x: np.ndarray, groups: int, eps: float) -> np.ndarray:
    """Per (n, group): the serial sums over the group's (c, h, w) row-major."""
    T = x.dtype.type
    n, c = x.shape[:2]
    flat = x.reshape(n, groups, -1)
    y = np.empty_like(flat)
    for a in range(n):
        for gi in range(groups):
            v = flat[a, gi]
            acc = v[0]
            for t in v[1:]:
                acc = T(acc + t)
            mu = T(acc / T(v.size))
            ss = None
            for t in v:
                d = T(t - mu)
                ss = T(d * d) if ss is None else T(ss + T(d * d))
            r = T(T(1.0) / np.sqrt(T(T(ss / T(v.size)) + T(eps))))
            y[a, gi] = [T(T(t - mu) * r) for t in v]
    return y.reshape(x.shape)


def _composite_batch_norm(x, w, b, eps: float):
    """batch_norm in training as it was recorded before its ``bn_normalize`` op: the module
    docstring's ops one by one (y, and ss for the running variance)."""
    axes = (0,) + tuple(range(2, len(x.shape)))
    chan = (1, x.shape[1]) + (1,) * (len(x.shape) - 2)
    n = int(np.prod([x.shape[a] for a in axes]))
    mu = g.mean(x, axis=axes, keepdims=True)
    d = x - mu
    ss = g.sum(d * d, axis=axes, keepdims=True)
    y = d * g.ops.div(1.0, g.ops.sqrt(g.ops.adds(g.ops.div(ss, float(n)), eps)))
    return y * g.reshape(w, chan) + g.reshape(b, chan), ss


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_batch_norm_op_is_the_recorded_composite_bitwise(bname, dtype, threads, monkeypatch):
    """batch_norm in training (mean, ``bn_normalize``, ``bn_sum_squares``) against the
    composite it replaced, recorded op by op: y, the gradients of x, weight and bias for a
    random upstream, and the running statistics, bit for bit; 1 to 11 channels (the cpu
    kernels' channels side by side in 8s, 4s, 2s and 1s), rank 2, 3 and 4, a constant channel,
    signed zeros, eps 0 (a constant channel's NaNs compared by class, docs/semantics.md's
    rule); cpu on 1, 2 and 3 threads."""
    from gtensor.testing import bits_equal as same_bits

    if threads != "1" and bname != "cpu":
        pytest.skip("threads: the cpu backend's split (the other backends have one row)")
    monkeypatch.setenv("GTENSOR_CPU_THREADS", threads)
    rng = np.random.default_rng(11)
    shapes = [(5, c, 3, 2) for c in range(1, 12)] + [(6, 3), (3, 2, 4), (2, 9, 1, 1),
                                                     (2, 8, 4, 5), (3, 17, 19), (9, 8)]
    for shape in shapes:
        for eps in (1e-5, 0.0):
            x = (rng.normal(size=shape) * 3 + 1).astype(dtype)
            x[:, 0] = 2.5  # a constant channel: d = 0, var = 0
            if shape[1] > 1:
                x[0, 1] = -0.0
            wv, bv = rng.normal(size=shape[1]), rng.normal(size=shape[1])
            up = rng.normal(size=shape).astype(dtype)
            got = []
            for composite in (False, True):
                with g.Tape(bname, dtype) as tp:
                    xv, w, b = tp.param(x), tp.param(wv), tp.param(bv)
                    rm = tp.state(np.zeros(shape[1]))
                    rv = tp.state(np.ones(shape[1]))
                    if composite:
                        y, ss = _composite_batch_norm(xv, w, b, eps)
                        stat = host(tp, tp.value(ss)).reshape(-1)
                    else:
                        y = g.batch_norm(xv, rm, rv, w, b, True, 0.1, eps)
                        stat = None
                    g.sum(y * tp.const(up)).backward()
                    got.append([host(tp, tp.value(y)), host(tp, tp.grad(xv)),
                                host(tp, tp.grad(w)), host(tp, tp.grad(b))])
                    if not composite:
                        mu = host(tp, tp.value(g.mean(xv, axis=(0,) + tuple(
                            range(2, len(shape))), keepdims=True))).reshape(-1)
                        got[-1] += [host(tp, tp.state_value(rm)), host(tp, tp.state_value(rv))]
            n = x.size // shape[1]
            T = np.dtype(dtype).type
            want_rm = mu * T(0.1) + np.zeros(shape[1], dtype) * T(0.9)
            want_rv = (stat / T(n - 1)) * T(0.1) + np.ones(shape[1], dtype) * T(0.9)
            for i, (a, c) in enumerate(zip(got[0][:4], got[1])):
                assert same_bits(a, c), (shape, eps, ["y", "dx", "dw", "db"][i])
            assert same_bits(got[0][4], want_rm.astype(dtype)), (shape, eps)
            assert same_bits(got[0][5], want_rv.astype(dtype)), (shape, eps)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_batch_norm_affine_is_one_op_with_the_unfused_bits(bname, dtype):
    """Training with weight and bias Vars of the tape records one ``bn_affine`` (backward:
    ``bn_affine_grad``, ``bn_weight_grad``, the bias's ``sum_to``); host arrays as weight and
    bias (or only a weight) record ``bn_normalize`` and the affine ops: the same y and
    gradients of x either way, bit for bit (as the composite test above for the Vars' w and
    b)."""
    rng = np.random.default_rng(4)
    x0 = rng.normal(size=(4, 3, 2, 5)).astype(dtype)
    wv, bv = rng.normal(size=3).astype(dtype), rng.normal(size=3).astype(dtype)
    up = rng.normal(size=x0.shape).astype(dtype)
    got = {}
    for how in ("vars", "arrays"):
        with g.Tape(bname, dtype) as tp:
            x = tp.param(x0)
            w, b = (tp.param(wv), tp.param(bv)) if how == "vars" else (wv, bv)
            y = g.batch_norm(x, None, None, w, b, True)
            ops = [tp.var_at(i).op for i in range(len(tp))]
            assert ("bn_affine" in ops) == (how == "vars"), ops
            assert ("bn_normalize" in ops) == (how == "arrays"), ops
            g.sum(y * tp.const(up)).backward()
            got[how] = (host(tp, tp.value(y)), host(tp, tp.grad(x)))
    for a, c in zip(got["vars"], got["arrays"]):
        assert bits_equal(a, c)


def test_bn_affine_refuses_per_channel_shapes_that_do_not_fit(bname):
    """w or b not (C,): a ValueError naming the op, the argument, the shape and the one
    expected; nothing recorded."""
    with g.Tape(bname) as tp:
        x = tp.param(np.ones((2, 3, 4)))
        n = len(tp)
        for w, b, bad in [(np.ones(2), np.ones(3), "w has shape (2,)"),
                          (np.ones(3), np.ones((1, 3)), "b has shape (1, 3)")]:
            with pytest.raises(ValueError, match=rf"bn_affine: {re.escape(bad)}; expected "
                                                 r"\(3,\)"):
                g.bn_affine(x, tp.param(w), tp.param(b))
            n += 2  # the two params
            assert len(tp) == n


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_batch_and_group_norm_orders_bitwise(bname, dtype):
    """batch_norm's and group_norm's statistics: the loops of their docstrings, bit for bit."""
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(3, 4, 2, 3)) * 3 + 1).astype(dtype)
    with g.Tape(bname, dtype) as tp:
        v = tp.const(x)
        assert bits_equal(host(tp, tp.value(g.batch_norm(v, training=True))),
                          _loop_batch_norm(x, 1e-5))
        assert bits_equal(host(tp, tp.value(g.group_norm(v, 2))), _loop_group_norm(x, 2, 1e-5))


def test_layer_norm_over_k_axes_is_its_flattened_last_axis(bname):
    """layer_norm over the last k axes == layer_norm over the one flattened axis (the same
    serial sums: row-major over the k axes), bit for bit; torch's and gtape's argument orders
    agree; the last-axis form records the same nodes as before."""
    rng = np.random.default_rng(6)
    x, w, b = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    with g.Tape(bname) as tp:
        v = tp.const(x)
        k2 = host(tp, tp.value(g.layer_norm(v, (4, 5), w, b, 1e-5)))
        flat = g.layer_norm(g.reshape(v, (2, 3, 20)), w.reshape(20), b.reshape(20))
        assert bits_equal(k2, host(tp, tp.value(flat)).reshape(x.shape))
        kw = g.layer_norm(v, w, b, normalized_shape=(4, 5))
        assert bits_equal(k2, host(tp, tp.value(kw)))
        ln = g.nn.LayerNorm(tp, (4, 5))
        assert ln.weight.shape == (4, 5) and ln(v).shape == x.shape


# ---------------------------------------------------------------- states
def test_state_updates_chain_and_commit_at_reset_and_no_grad(bname):
    """Two training forwards in one episode chain their updates (as torch's in-place ones);
    the leaf keeps the episode's start until reset_to writes the pending value; a no_grad
    block's update is written when the next block drops it; set_state drops a pending one."""
    rng = np.random.default_rng(7)
    with g.Tape(bname) as tp:
        bn = g.nn.BatchNorm1d(tp, 2, momentum=0.5)
        tb = torch.nn.BatchNorm1d(2, momentum=0.5).double()
        mark = tp.mark()
        xs = [rng.normal(size=(4, 2)) for _ in range(3)]
        bn(tp.const(xs[0]))
        bn(tp.const(xs[1]))
        for x in xs[:2]:
            tb(torch.tensor(x))
        rm = bn.__dict__["_buffers"]["running_mean"]
        assert host(tp, tp.value(rm)).tolist() == [0.0, 0.0]  # the leaf: the episode's start
        assert _rel(bn.running_mean.numpy(), tb.running_mean) < 1e-15  # the current value
        tp.reset_to(mark)
        assert _rel(host(tp, tp.value(rm)), tb.running_mean) < 1e-15
        assert int(bn.state_dict()["num_batches_tracked"]) == 2
        with tp.no_grad():
            bn(tp.const(xs[2]))
        tb(torch.tensor(xs[2]))
        with tp.no_grad():  # drops the previous block: its update is written first
            pass
        assert _rel(host(tp, tp.value(rm)), tb.running_mean) < 1e-15
        bn(tp.const(xs[0]))
        tp.set_state(rm, np.ones(2))
        assert bn.running_mean.numpy().tolist() == [1.0, 1.0] and tp.pending_states()[0][0] != \
            rm.index


def test_state_dict_round_trip_and_safetensors(bname, tmp_path):
    """Running statistics load with load_state_dict (torch's state dict as is) and round
    trip through safetensors files; a float64 buffer into a float32 tape is refused."""
    rng = np.random.default_rng(8)
    tb = torch.nn.BatchNorm2d(3).double()
    tb(torch.tensor(rng.normal(size=(4, 3, 2, 2))))
    with g.Tape(bname) as tp:
        bn = g.nn.BatchNorm2d(tp, 3)
        bn.load_state_dict({k: v.numpy() for k, v in tb.state_dict().items()})
        sd = bn.state_dict()
        assert all(np.array_equal(sd[k], v.numpy()) for k, v in tb.state_dict().items())
        g.nn.save(bn, tmp_path / "bn.safetensors")
        other = g.nn.BatchNorm2d(tp, 3)
        g.nn.load(other, tmp_path / "bn.safetensors")
        assert all(np.array_equal(other.state_dict()[k], v) for k, v in sd.items())
    with g.Tape(bname, "float32") as tp:
        bn = g.nn.BatchNorm2d(tp, 3)
        sd32 = {k: v.astype(np.float32) if k in ("weight", "bias") else v for k, v in sd.items()}
        with pytest.raises(TypeError, match="running_mean' is float64, which does not convert"):
            bn.load_state_dict(sd32)
        assert bn.running_mean.numpy().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_backend_is_numpy_bitwise(bname, dtype):
    """A conv + BatchNorm + GroupNorm + pools + upsample step on this backend: values,
    gradients and running statistics bitwise the numpy tape's."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(3, 2, 6, 6))

    def run(backend):
        tp = g.Tape(backend, dtype, seed=3)
        model = g.nn.Sequential(
            g.nn.Conv2d(tp, 2, 4, 3, padding=2, dilation=2, groups=2), g.nn.BatchNorm2d(tp, 4),
            g.nn.ReLU(), g.nn.MaxPool2d(3, 2, 1, ceil_mode=True), g.nn.GroupNorm(tp, 2, 4),
            g.nn.Upsample(scale_factor=2), g.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
            g.nn.ConvTranspose2d(tp, 4, 2, 2, stride=2, groups=2),
            g.nn.AdaptiveAvgPool2d((2, 1)))
        mark = tp.mark()
        out = []
        for _ in range(2):
            with tp.episode():
                loss = g.mean(model(tp.const(x)) ** 2)
                loss.backward()
                out += [host(tp, tp.value(loss))] + [host(tp, p.grad) for p in
                                                     model.parameters()]
        tp.reset_to(mark)
        out += list(model.state_dict().values())
        return out

    for a, b in zip(run("numpy"), run(bname)):
        assert bits_equal(a, b)


# ---------------------------------------------------------------- bad input
BAD = [
    (lambda tp, v: g.nn.BatchNorm2d(tp, 2)(g.reshape(v, (1, 2, 9, 2))[:, :, :1, :1]),
     ValueError,
     "batch_norm: expected more than 1 value per channel when training, got input of shape "
     "(1, 2, 1, 1)"),
    (lambda tp, v: g.nn.BatchNorm2d(tp, 3)(v), ValueError,
     "BatchNorm2d: x has 2 channels (shape (2, 2, 3, 3)); expected 3"),
    (lambda tp, v: g.nn.BatchNorm1d(tp, 2)(v), ValueError,
     "BatchNorm1d: x has shape (2, 2, 3, 3); expected 2-D or 3-D input"),
    (lambda tp, v: g.nn.BatchNorm2d(tp, 2, momentum=2.0), ValueError,
     "BatchNorm2d: momentum is 2.0; expected a number in [0, 1]"),
    (lambda tp, v: g.batch_norm(v, np.zeros(2), np.ones(2), training=True), TypeError,
     "batch_norm: running_mean is"),
    (lambda tp, v: g.group_norm(v, 3), ValueError,
     "group_norm: num_groups is 3; expected an int >= 1 dividing the 2 channels"),
    (lambda tp, v: g.nn.GroupNorm(tp, 3, 4), ValueError,
     "GroupNorm: num_groups is 3, which does not divide num_channels 4"),
    (lambda tp, v: g.layer_norm(v, (3, 4)), ValueError,
     "layer_norm: normalized_shape is (3, 4) but x has shape (2, 2, 3, 3); expected its last "
     "2 axes"),
    (lambda tp, v: g.conv_transpose2d(v, np.ones((2, 1, 3, 3)), stride=2, output_padding=2),
     ValueError, "conv_transpose2d: output_padding (2, 2) is not smaller than the stride (2, 2)"),
    (lambda tp, v: g.conv2d(v, np.ones((3, 1, 3, 3)), groups=2), ValueError,
     "conv2d: groups is 2, which does not divide the output channels 3"),
    (lambda tp, v: g.nn.Conv2d(tp, 4, 6, 3, groups=4), ValueError,
     "Conv2d: groups is 4, which does not divide in_channels 4 and out_channels 6"),
    (lambda tp, v: g.max_pool2d(v, 2, padding=2), ValueError,
     "max_pool2d: padding (2, 2) is more than half the kernel (2, 2)"),
    (lambda tp, v: g.adaptive_avg_pool2d(v, 4), ValueError,
     "adaptive_avg_pool2d: output_size (4, 4) is larger than the input (3, 3)"),
    (lambda tp, v: g.interpolate(v, scale_factor=1.5), ValueError,
     "interpolate: scale_factor is 1.5; expected integer factors >= 1"),
    (lambda tp, v: g.interpolate(v, scale_factor=2, mode="bilinear"), NotImplementedError,
     "interpolate: mode 'bilinear' is not supported"),
    (lambda tp, v: tp.update_state(v, v), ValueError, "update_state: "),
]


@pytest.mark.parametrize("k", range(len(BAD)))
def test_bad_input_is_refused_and_the_tape_is_unchanged(k):
    call, exc, words = BAD[k]
    with g.Tape() as tp:
        v = tp.const(np.ones((2, 2, 3, 3)))
        n = len(tp)
        with pytest.raises(exc) as info:
            call(tp, v)
        assert words in str(info.value), str(info.value)
        extra = [nd.name for nd in tp.nodes()[n:]]
        # a layer's own leaves, or the slicing that made a bad input, at most
        assert set(extra) <= {"param", "state", "reshape", "slice"}, extra
        assert not tp.pending_states()


# ---------------------------------------------------------------- from_torch
def _torch_resnet():
    """A ResNet-like torch tree: BasicBlocks (conv, BN, ReLU), a strided projection shortcut, a
    grouped conv, max pooling with padding, GroupNorm, nearest upsampling, a transposed conv,
    global average pooling."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False, groups=2)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 4, 3, 1, 1, bias=False), nn.BatchNorm2d(4),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            self.layers = nn.Sequential(Block(4, 4, 1), Block(4, 8, 2))
            self.norm = nn.GroupNorm(2, 8)
            self.up = nn.Upsample(scale_factor=2)
            self.deconv = nn.ConvTranspose2d(8, 4, 3, 2, 1, 1)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            h = self.deconv(self.up(self.norm(self.layers(self.stem(x)))))
            return self.fc(torch.flatten(self.pool(h), 1))

    torch.manual_seed(0)
    return Net().double()


def test_from_torch_resnet_like_trains_as_torch(bname):
    """from_torch of the ResNet-like tree: names, parameters and buffers 1:1; 5 SGD steps in
    training mode with outputs within 1e-13 of torch float64 and the running statistics
    within 1e-12 after them; then eval mode. (The SGD step is written here: gtape's tests
    install no optimizer package.)"""
    net = _torch_resnet()
    rng = np.random.default_rng(10)
    with g.Tape(bname) as tp:
        model = g.nn.from_torch(net, tp)
        assert list(model.state_dict()) == list(net.state_dict())
        assert [n for n, _ in model.named_buffers()] == [n for n, _ in net.named_buffers()]
        params = list(model.parameters())
        topt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(5):
            x = rng.normal(size=(4, 1, 8, 8))
            with tp.episode():
                y = model(tp.const(x))
                g.mean(y * y).backward()
                steps = [host(tp, tp.value(p)) - 0.1 * host(tp, tp.grad(p)) for p in params]
                for p, new in zip(params, steps):  # torch's p.add_(grad, alpha=-lr)
                    tp.set_value(p, new)
                mine = host(tp, tp.value(y))
            topt.zero_grad()
            yt = net(torch.tensor(x))
            (yt * yt).mean().backward()
            topt.step()
            assert _rel(mine, yt) < 1e-13
        ours, theirs = model.state_dict(), net.state_dict()
        for k, v in theirs.items():
            err = np.max(np.abs(ours[k] - v.numpy()))
            assert err < 1e-12, (k, err)
        model.eval()
        net.eval()
        x = rng.normal(size=(2, 1, 8, 8))
        with tp.episode():
            assert _rel(host(tp, tp.value(model(tp.const(x)))), net(torch.tensor(x))) < 1e-13


def test_from_torch_refuses_what_it_cannot_do():
    """Refused before anything is registered, naming the layer: a non-integer Upsample, a
    bilinear one, an output_padding at the stride (torch allows it below the dilation)."""
    nn = torch.nn
    for m, words in [(nn.Upsample(scale_factor=1.5), "scale_factor=1.5"),
                     (nn.Upsample(scale_factor=2, mode="bilinear"), "mode='bilinear'"),
                     (nn.ConvTranspose2d(2, 2, 3, 1, output_padding=1, dilation=2),
                      "output_padding=(1, 1) >= stride=(1, 1)"),
                     (nn.MaxPool2d(2, return_indices=True), "return_indices=True")]:
        with g.Tape() as tp:
            with pytest.raises(TypeError, match="from_torch: .*" + words.replace("(", r"\(")
                               .replace(")", r"\)").replace("[", r"\[")):
                g.nn.from_torch(nn.Sequential(nn.Identity(), m), tp)
            assert len(tp) == 0
