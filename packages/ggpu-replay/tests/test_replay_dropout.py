"""A captured training loop with dropout: fresh masks each step from the per-step key input,
bitwise equal to the eager loop (the key is an int64 device buffer refreshed by set_input)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
import pytest
from ggpu_replay import StaleInputError, capture

P = 0.5
BASE = g.rng.key(2**100 + 42)


def _problem(steps: int):
    rng = np.random.default_rng(5)
    init = [rng.normal(0, 0.5, (4, 8)), np.zeros((1, 8)), rng.normal(0, 0.5, (8, 2))]
    data = [(rng.normal(size=(16, 4)), rng.normal(size=(16, 2))) for _ in range(steps)]
    return init, data


def _loss(x, t, ps, key):
    h = g.relu(x @ ps[0] + ps[1])
    d = g.dropout(h, P, key)
    return g.mse(d @ ps[2], t), d, h


def _eager(steps: int, backend: str):
    init, data = _problem(steps)
    tp = g.Tape(backend)
    ps = [tp.param(a) for a in init]
    opt = gopt.Adam(tp, lr=1e-2)
    opt.add(ps)
    mark = tp.mark()
    losses, masks = [], []
    for s in range(steps):
        x, t = data[s]
        loss, d, _ = _loss(tp.const(x, name="x"), tp.const(t, name="t"), ps, BASE.fold(s))
        tp.backward(loss)
        opt.step()
        losses.append(float(tp.backend.to_numpy(tp.value(loss))))
        masks.append(tp.backend.to_numpy(tp.value(d)) != 0)
        tp.reset_to(mark)
    out = [tp.backend.to_numpy(tp.value(p)).copy() for p in ps]
    tp.close()
    return losses, masks, out


def _replayed(steps: int, device: str):
    init, data = _problem(steps)
    tp = g.Tape("numpy")
    ps = [tp.param(a) for a in init]
    x, t = tp.const(data[0][0], name="x"), tp.const(data[0][1], name="t")
    loss, d, h = _loss(x, t, ps, BASE.fold(0))
    prog = capture(tp, loss, backend=device)
    assert set(prog.inputs) == {"x", "t", "rng_key"}
    dopt = prog.adam(lr=1e-2)
    dopt.add(ps)
    losses, masks, relus = [], [], []
    for s in range(steps):
        prog.set_input("x", data[s][0])
        prog.set_input("t", data[s][1])
        prog.set_input("rng_key", BASE.fold(s))  # the step's key: a Key into the int64 buffer
        prog.step(dopt)
        losses.append(prog.loss())
        masks.append(prog.value(d) != 0)
        relus.append(prog.value(h) != 0)
    prog.sync_params(tp)
    out = [tp.backend.to_numpy(tp.value(p)).copy() for p in ps]
    tp.close()
    return losses, masks, out, relus


def test_captured_loop_draws_fresh_masks_bitwise_as_eager(device):
    steps = 4
    want_l, want_m, want_p = _eager(steps, "numpy")
    got_l, got_m, got_p, _ = _replayed(steps, device)
    assert np.array_equal(np.array(got_l), np.array(want_l)), (got_l, want_l)
    for s in range(steps):
        assert np.array_equal(got_m[s], want_m[s]), f"step {s}: mask differs from eager"
    assert not np.array_equal(got_m[0], got_m[1]), "a new step must draw a new mask"
    for a, b in zip(want_p, got_p):
        assert a.tobytes() == b.tobytes()


def test_the_mask_is_the_keys_uniforms(device):
    """The captured program's mask is uniform(key) >= p with numpy's own Generator(Philox)."""
    _, masks, _, relus = _replayed(2, device)
    for s in range(2):
        u = np.random.Generator(np.random.Philox(key=BASE.fold(s).seed)).random(16 * 8)
        assert np.array_equal(masks[s], relus[s] & (u.reshape(16, 8) >= P))


def test_forgetting_the_key_is_refused_once_it_was_refreshed(device):
    init, data = _problem(2)
    with g.Tape("numpy") as tp:
        ps = [tp.param(a) for a in init]
        x, t = tp.const(data[0][0], name="x"), tp.const(data[0][1], name="t")
        loss, _, _ = _loss(x, t, ps, BASE)
        prog = capture(tp, loss, backend=device)
        for name, v in (("x", data[0][0]), ("t", data[0][1]), ("rng_key", BASE.fold(1))):
            prog.set_input(name, v)
        prog.forward()
        prog.set_input("x", data[1][0])
        prog.set_input("t", data[1][1])
        with pytest.raises(StaleInputError, match="rng_key"):
            prog.forward()  # the previous step's mask again: refused, naming the key


def test_set_input_refuses_a_float_key(device):
    init, data = _problem(1)
    with g.Tape("numpy") as tp:
        ps = [tp.param(a) for a in init]
        loss, _, _ = _loss(tp.const(data[0][0]), tp.const(data[0][1]), ps, BASE)
        prog = capture(tp, loss, backend=device)
        with pytest.raises(TypeError, match="int64"):
            prog.set_input("rng_key", np.array([1.0, 2.0]))


def test_a_key_never_refreshed_is_refused_from_the_second_step(device):
    """The first step may run on the captured key; the second on the same key would redraw the
    first step's masks: refused before anything runs, even when no input was ever refreshed."""
    init, data = _problem(1)
    with g.Tape("numpy") as tp:
        ps = [tp.param(a) for a in init]
        loss, d, _ = _loss(tp.const(data[0][0]), tp.const(data[0][1]), ps, BASE)
        prog = capture(tp, loss, backend=device)
        prog.forward()
        first = prog.value(d).copy()
        with pytest.raises(StaleInputError, match="rng_key.*fresh key"):
            prog.forward()
        assert prog.value(d).tobytes() == first.tobytes()  # nothing ran
        prog.hold_input("rng_key")  # reusing the masks on purpose is allowed, once declared
        prog.forward()
        assert prog.value(d).tobytes() == first.tobytes()


def test_the_program_store_is_a_param_store():
    """A replay program's parameters implement gtape.ParamStore (what gopt accepts)."""
    from ggpu_replay.program import ParamStore
    from gtape.params import missing_members

    assert not missing_members(ParamStore)
