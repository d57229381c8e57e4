"""The wide-margin, +-0 and -inf cases of the losses, against torch float64 / float32."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtensor.testing import bits_equal

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype,margin", [("float32", 90.0), ("float32", 104.0),
                                          ("float64", 740.0), ("float64", 746.0)])
def test_cross_entropy_wide_margins(bname, dtype, margin):
    tp = g.Tape(bname, dtype)
    z = tp.param(np.array([[0.0, margin]], dtype))
    loss = g.cross_entropy(z, [0])
    tp.backward(loss)
    assert loss.item() == margin  # exactly the margin, never inf
    tz = torch.tensor([[0.0, margin]], dtype=getattr(torch, dtype), requires_grad=True)
    torch.nn.functional.cross_entropy(tz, torch.tensor([0])).backward()
    gz = tp.backend.to_numpy(tp.grad(z))
    assert np.isfinite(gz).all()
    assert np.array_equal(gz, tz.grad.numpy())


def test_cross_entropy_ignore_index_matches_torch(bname):
    rng = np.random.default_rng(3)
    z0, y = rng.normal(size=(5, 4)) * 4, np.array([1, -100, 3, 0, -100])
    tp = g.Tape(bname)
    z = tp.param(z0)
    loss = g.cross_entropy(z, y, ignore_index=-100)
    tp.backward(loss)
    tz = torch.tensor(z0, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tz, torch.tensor(y), ignore_index=-100)
    tl.backward()
    assert abs(loss.item() - tl.item()) <= 1e-15 * abs(tl.item())
    assert np.abs(tp.backend.to_numpy(tp.grad(z)) - tz.grad.numpy()).max() <= 1e-15
    assert not tp.grad(z)[1].any() and not tp.grad(z)[4].any()


def test_bce_with_logits_gradient_at_zero(bname):
    for zero in (0.0, -0.0):
        tp = g.Tape(bname)
        z = tp.param(np.array([[zero, zero]]))
        tp.backward(g.bce_with_logits(z, np.array([[1.0, 0.0]])))
        assert tp.grad(z).tolist() == [[-0.25, 0.25]]


def test_bce_with_logits_matches_torch(bname):
    rng = np.random.default_rng(4)
    z0 = np.concatenate([rng.normal(size=6) * 30, [0.0, -0.0, 700.0, -700.0]]).reshape(2, 5)
    y = rng.random((2, 5))
    tp = g.Tape(bname)
    z = tp.param(z0)
    loss = g.bce_with_logits(z, y)
    tp.backward(loss)
    tz = torch.tensor(z0, requires_grad=True)
    tl = torch.nn.functional.binary_cross_entropy_with_logits(tz, torch.tensor(y))
    tl.backward()
    assert abs(loss.item() - tl.item()) <= 1e-14 * abs(tl.item())
    assert np.abs(tp.backend.to_numpy(tp.grad(z)) - tz.grad.numpy()).max() <= 1e-15


def test_softmax_rows_with_minus_inf_match_torch(bname):
    x0 = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 2.0, -np.inf]])
    tp = g.Tape(bname)
    x = tp.const(x0)
    t = torch.tensor(x0)
    for ours, theirs in [(g.softmax(x), torch.softmax(t, -1)),
                         (g.log_softmax(x), torch.log_softmax(t, -1)),
                         (g.logsumexp(x), torch.logsumexp(t, -1))]:
        a, b = ours.numpy(), theirs.numpy()
        assert np.array_equal(np.isnan(a), np.isnan(b))
        keep = ~np.isnan(a)
        assert np.allclose(a[keep], b[keep], rtol=1e-15, atol=0)
        assert np.array_equal(np.isinf(a), np.isinf(b))


def test_integer_scalars_round_once(bname):
    n = 2**60 + 2**36 + 1
    tp = g.Tape(bname, "float32")
    w = tp.param(np.array([1.0], np.float32))
    assert bits_equal((w * n).numpy(), np.array([np.float32(np.int64(n))]))
    assert bits_equal(g.muls(w, n).numpy(), np.array([np.float32(np.int64(n))]))
    assert (w * n).numpy()[0] != np.float32(2.0**60)
    big = 2**200 + 1  # beyond int64: rounded exactly too (to inf on float32)
    assert np.isinf((w * big).numpy()[0])


def test_index_errors_leave_the_tape_unchanged(bname):
    tp = g.Tape(bname)
    x = tp.param(np.ones((3, 2)))
    n = len(tp.nodes())
    with pytest.raises(IndexError, match=r"take: ids: id 3 is out of range .* -3 <= id < 3"):
        g.take(x, np.array([0, 3]))
    with pytest.raises(TypeError, match="expected integer indices"):
        g.take(x, np.array([0.0, 1.0]))
    with pytest.raises(TypeError, match="expected a bool mask"):
        g.where(np.array([1, 0]), x, x)
    with pytest.raises(TypeError, match="expected int class labels"):
        g.cross_entropy(x, np.array([0.0, 1.0, 1.0]))
    with pytest.raises(IndexError, match="the bool mask has shape"):
        x[np.array([True, False])]
    assert len(tp.nodes()) == n
    assert x[np.array([True, False, True])].numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_cross_entropy_steps_reuse_the_label_buffer(bname):
    """Episode after episode the int labels refill their kept buffer (no float copy op)."""
    tp = g.Tape(bname)
    w = tp.param(np.ones((3, 4)))
    mark = tp.mark()
    losses = []
    for labels in ([0, 1, 2], [3, 3, 1], [2, 0, 1]):
        loss = g.cross_entropy(tp.const(np.eye(3)) @ w, np.array(labels))
        tp.backward(loss)
        losses.append((loss.item(), tp.grad(w).copy()))
        tp.reset_to(mark)
    for labels, (value, grad) in zip(([0, 1, 2], [3, 3, 1], [2, 0, 1]), losses):
        fresh = g.Tape(bname)
        fw = fresh.param(np.ones((3, 4)))
        ref = g.cross_entropy(fresh.const(np.eye(3)) @ fw, np.array(labels))
        fresh.backward(ref)
        assert ref.item() == value and np.array_equal(fresh.grad(fw), grad)


def test_typed_consts_and_a_refreshable_embedding(bname):
    """tp.const(ids, dtype="int64") keeps ids as int64 (refused for floats); take on it."""
    tp = g.Tape(bname)
    E = tp.param(np.arange(12.0).reshape(4, 3))
    ids = tp.const(np.array([3, 0, 3]), name="ids", dtype="int64")
    assert ids.dtype == np.int64 and tp.name_of(ids) == "ids"
    assert g.embedding(E, ids).numpy().tolist() == [[9, 10, 11], [0, 1, 2], [9, 10, 11]]
    mask = tp.const(np.array([True, False, True]), dtype="bool")
    assert mask.dtype == np.bool_
    n = len(tp.nodes())
    with pytest.raises(TypeError, match="expected integer indices"):
        tp.const(np.array([0.5]), dtype="int64")
    with pytest.raises(TypeError, match="expected a bool mask"):
        tp.const(np.array([1, 0]), dtype="bool")
    with pytest.raises(TypeError, match="float data takes the tape's dtype"):
        tp.const(np.ones(2), dtype="float32")
    assert len(tp.nodes()) == n


def test_cross_entropy_ignore_index_type(bname):
    tp = g.Tape(bname)
    z = tp.param(np.zeros((2, 3)))
    for bad in (True, "x", 1.0):
        with pytest.raises(TypeError, match="ignore_index must be an int or None"):
            g.cross_entropy(z, [0, 1], ignore_index=bad)
    assert g.cross_entropy(z, [0, 1], ignore_index=np.int64(1)).item() > 0
