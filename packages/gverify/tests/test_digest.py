"""digest: invariant under backend, layout, byte order and NaN payload; sensitive to one bit
anywhere in the parameters and in every optimizer-state entry."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from gverify import canonical, digest

RNG = np.random.default_rng(7)
SHAPES = [(3, 4), (1, 4), (4,), ()]
VALUES = [RNG.standard_normal(s) for s in SHAPES]


def _run(backend, dtype="float64", kind="adam", steps=2, values=VALUES, clip=None):
    tp = g.Tape(backend, dtype)
    ps = [tp.param(v) for v in values]
    opt = gopt.Adam(tp, lr=0.01) if kind == "adam" else gopt.SGD(tp, lr=0.01)
    for k, p in enumerate(ps):
        opt.add(p, alpha=1e-3 if k == 0 else 0.0)
    if clip:
        opt.set_clip(clip)
    mark = tp.mark()
    for _ in range(steps):
        loss = g.sum(g.tanh(ps[0] * ps[1]) * ps[2]) + g.sum(ps[3] * ps[3])
        tp.backward(loss)
        opt.step()
        tp.reset_to(mark)
    return tp, ps, opt


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_digest_is_the_same_on_every_backend(bname, dtype):
    a = digest(*_run("numpy", dtype)[::2])
    b = digest(*_run(bname, dtype)[::2])
    assert a == b and len(a) == 64


def test_canonical_bytes_ignore_layout_byte_order_and_nan_payload():
    x = RNG.standard_normal((5, 3))
    ref = canonical.array_bytes(x)
    assert canonical.array_bytes(np.asfortranarray(x)) == ref
    assert canonical.array_bytes(x.astype(">f8")) == ref
    big = np.ascontiguousarray(x.T).T  # same values, transposed memory
    assert canonical.array_bytes(big) == ref
    n1 = np.array([1.0, np.nan])
    n2 = n1.copy()
    n2.view(np.uint64)[1] = 0xFFF8000000000123  # another NaN payload, sign set
    assert canonical.array_bytes(n1) == canonical.array_bytes(n2)
    assert canonical.array_bytes(np.float32(1.0)) != canonical.array_bytes(np.float64(1.0))
    assert canonical.array_bytes(x.reshape(3, 5)) != ref  # the shape is part of it
    with pytest.raises(TypeError, match="array_bytes: dtype complex128"):
        canonical.array_bytes(np.zeros(2, complex))


def test_a_param_given_in_any_layout_digests_the_same(bname):
    x = RNG.standard_normal((4, 3))
    tps = [g.Tape(bname) for _ in range(3)]
    for tp, v in zip(tps, (x, np.asfortranarray(x), x.astype(">f8"))):
        tp.param(v)
    assert len({digest(tp) for tp in tps}) == 1


def _flip(a, pos, bit):
    out = np.array(a, copy=True)
    flat = out.reshape(-1).view(f"u{out.dtype.itemsize}")
    flat[pos] ^= np.array(1 << bit, flat.dtype)
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_bit_anywhere_in_a_param_changes_the_digest(bname, dtype):
    tp, ps, opt = _run(bname, dtype)
    ref = digest(tp, opt)
    bits = 8 * np.dtype(dtype).itemsize
    for p in ps:
        v = p.numpy()
        for pos, bit in {(0, 0), (v.size - 1, bits - 1), (v.size // 2, bits // 2)}:
            tp.set_value(p, _flip(v, pos, bit))
            assert digest(tp, opt) != ref, (p, pos, bit)
            tp.set_value(p, v)
    assert digest(tp, opt) == ref


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_one_bit_in_every_optimizer_state_entry_changes_the_digest(bname, kind):
    tp, _, opt = _run(bname, kind=kind, clip=1.5)
    ref = digest(tp, opt)
    state = opt.state_dict(params=False)
    floats = [k for k, v in state.items() if np.asarray(v).dtype.kind == "f"]
    buffers = [k for k in floats if k[:2] in ("m.", "v.")]
    if kind == "adam":
        assert {"m.0", "m.3", "v.0", "v.3", "hyper.beta1", "host.b1_pow"} <= set(floats)
    for key in floats:
        a = np.asarray(state[key])
        for pos in {0, a.size - 1}:
            bad = dict(state)
            bad[key] = _flip(a, pos, 3 if key.startswith("hyper") or key == "max_norm" else 0)
            opt.load_state_dict(bad)
            assert digest(tp, opt) != ref, (key, pos)
            opt.load_state_dict(state)
    assert digest(tp, opt) == ref
    bad = dict(state)
    bad["t"] = np.array(int(state["t"]) + 1, np.int64)
    opt.load_state_dict(bad)
    assert digest(tp, opt) != ref
    assert len(buffers) == (8 if kind == "adam" else 0)  # every moment of every param


def test_configs_never_compare_equal(bname):
    base = digest(*_run(bname)[::2])
    assert digest(*_run(bname, kind="sgd")[::2]) != base
    assert digest(*_run(bname, steps=3)[::2]) != base
    tp, _, opt = _run(bname)
    assert digest(tp) != digest(tp, opt)  # with and without the optimizer
    t64 = g.Tape(bname)
    t64.param(np.ones(3))
    t32 = g.Tape(bname, "float32")
    t32.param(np.ones(3))
    assert digest(t64) != digest(t32)
    # the same values at other node indices are another run
    ta, tb = g.Tape(bname), g.Tape(bname)
    ta.param(np.ones(2))
    tb.const(np.zeros(1))
    tb.param(np.ones(2))
    assert digest(ta) != digest(tb)


def test_bad_input_is_refused(bname):
    with pytest.raises(TypeError, match="digest: tp is"):
        digest(np.zeros(3))
    tp, _, opt = _run(bname)
    other = g.Tape(bname)
    other.param(np.ones(2))
    with pytest.raises(TypeError, match="digest: opt is"):
        digest(other, opt)
    tp.close()
    with pytest.raises(ValueError, match="digest: the tape is closed"):
        digest(tp)


def test_every_bit_position_of_an_element_changes_the_digest(bname):
    tp, ps, opt = _run(bname)
    ref = digest(tp, opt)
    v = ps[0].numpy()
    seen = {ref}
    for bit in range(64):
        tp.set_value(ps[0], _flip(v, 5, bit))
        seen.add(digest(tp, opt))
    tp.set_value(ps[0], v)
    state = opt.state_dict(params=False)
    tried = 0
    for bit in range(64):
        bad = dict(state)
        bad["v.2"] = _flip(state["v.2"], 1, bit)
        if not np.all(bad["v.2"] >= 0) or not np.all(np.isfinite(bad["v.2"])):
            continue  # a sign or exponent flip gopt itself refuses or that is a NaN
        opt.load_state_dict(bad)
        seen.add(digest(tp, opt))
        tried += 1
    opt.load_state_dict(state)
    assert digest(tp, opt) == ref
    assert tried >= 60 and len(seen) == 1 + 64 + tried  # every flip: a digest of its own
