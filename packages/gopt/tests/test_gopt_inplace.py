"""The in-place update kernels give the bits of the out-of-place ops they replaced.

Reference: each optimizer with its previous ``_update`` (gtensor's out-of-place ops ``adam_m``,
``adam_v``, ``adam_p``; AdamW's op chain; SGD's mul/muls/add/``sgd_p``, each into a workspace
buffer, then copies into place), on the same backend and dtype; parameters, state and the
clip norm compared bitwise after every step, clipping and L2 on and off.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam, AdamW
from gopt_testutil import problem, tape_loss


def _copies(be, pairs):
    def run():
        for src, dst in pairs:
            be.copy(src, out=dst)

    return run


def _old_moments(opt, be, ws, i, slot, p, g_, scale, clip):
    """Adam's and AdamW's first step as it was: the new m and v out of place, into ``ws``."""
    shape, a = slot.shape, slot.alpha
    m, v = slot.state["m"], slot.state["v"]
    m_new = be.adam_m(m, g_, p, scale, opt.betas[0], a, clip, out=ws(("adam_m", i), shape))
    v_new = be.adam_v(v, g_, p, scale, opt.betas[1], a, clip, out=ws(("adam_v", i), shape))
    return [(m_new, m), (v_new, v)]


class OldAdam(Adam):
    """Adam as it was: three out-of-place ops, then three copies."""

    def _update(self, be, ws, i, slot, p, g_, scale, clip):
        (m_new, _), (v_new, _) = moved = _old_moments(self, be, ws, i, slot, p, g_, scale, clip)
        p_new = be.adam_p(p, m_new, v_new, ws("adam_lr_t", ()), self.eps,
                          out=ws(("new", i), slot.shape))
        return _copies(be, [*moved, (p_new, p)])


class OldAdamW(AdamW):
    """AdamW as it was: adam_m, adam_v, then sqrt, div, adds, mul, div, mul, sub."""

    def _update(self, be, ws, i, slot, p, g_, scale, clip):
        shape = slot.shape
        (m_new, _), (v_new, _) = moved = _old_moments(self, be, ws, i, slot, p, g_, scale, clip)
        s1, s2, s3 = (ws((f"adamw_{k}", i), shape) for k in "abc")
        be.sqrt(v_new, out=s1)
        be.div(s1, ws("adamw_bc2", ()), out=s2)
        den = be.adds(s2, self.eps, out=s1)
        num = be.mul(m_new, ws("adamw_step", ()), out=s2)
        q = be.div(num, den, out=s3)
        decayed = be.mul(p, ws("adamw_decay", ()), out=s1)
        p_new = be.sub(decayed, q, out=ws(("new", i), shape))
        return _copies(be, [*moved, (p_new, p)])


class OldSGD(SGD):
    """SGD as it was: mul (clip), muls + add (L2), sgd_p with the lr buffer, then a copy."""

    def _update(self, be, ws, i, slot, p, g_, scale, clip):
        shape = slot.shape
        gk = g_
        if clip:
            gk = be.mul(g_, scale, out=ws(("sgd_gk", i), shape))
        if slot.alpha != 0.0:
            a = be.muls(p, slot.alpha, out=ws(("sgd_l2", i), shape))
            gk = be.add(gk, a, out=ws(("sgd_gl", i), shape))
        out = be.sgd_p(p, gk, p, ws("sgd_lr", ()), 1.0, 0.0, True, out=ws(("new", i), shape))
        return _copies(be, [(out, p)])


KINDS = {
    "adam": (lambda tp: Adam(tp, lr=0.05), lambda tp: OldAdam(tp, lr=0.05)),
    "adamw": (lambda tp: AdamW(tp, lr=0.05, weight_decay=0.1),
              lambda tp: OldAdamW(tp, lr=0.05, weight_decay=0.1)),
    "sgd": (lambda tp: SGD(tp, lr=0.1), lambda tp: OldSGD(tp, lr=0.1)),
}
STEPS = 4


def _run(bname, dtype, make, alphas, clip):
    inits, targets = problem(3)
    tp = g.Tape(bname, dtype)
    params = [tp.param(x) for x in inits]
    opt = make(tp)
    for p, a in zip(params, alphas):
        opt.add(p, alpha=a)
    if clip is not None:
        opt.set_clip(clip)
    mark = tp.mark()
    be = tp.backend
    out = []
    for _ in range(STEPS):
        tp.backward(tape_loss(tp, params, targets))
        opt.step()
        out.append(([be.to_numpy(tp.value(p)) for p in params],
                    [be.to_numpy(s.state[k]) for s in opt._slots for k in sorted(s.state)],
                    opt.last_norm))
        tp.reset_to(mark)
    return out


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("clip", [None, 0.5], ids=["noclip", "clip"])
@pytest.mark.parametrize("l2", [False, True], ids=["nol2", "l2"])
def test_in_place_update_is_bitwise_the_out_of_place_ops(bname, kind, dtype, clip, l2):
    new, old = KINDS[kind]
    alphas = [1e-2, 0.0, 3e-3] if l2 else [0.0, 0.0, 0.0]
    got = _run(bname, dtype, new, alphas, clip)
    want = _run(bname, dtype, old, alphas, clip)
    for step, ((gp, gs, gn), (wp, ws, wn)) in enumerate(zip(got, want)):
        for k, (a, b) in enumerate(zip(gp, wp)):
            assert _bits(a) == _bits(b), f"step {step + 1}: parameter {k} differs"
        for k, (a, b) in enumerate(zip(gs, ws)):
            assert _bits(a) == _bits(b), f"step {step + 1}: state buffer {k} differs"
        assert gn == wn or (gn is not None and np.isnan(gn) and np.isnan(wn))
    if clip is not None:  # premise: the clip is active (the norm exceeds it) at the first step
        assert got[0][2] > clip
    assert not np.array_equal(got[-1][0][0], problem(3)[0][0].astype(dtype)), "premise: moved"


def test_the_parameter_is_updated_in_its_own_buffer(bname):
    inits, targets = problem(1)
    tp = g.Tape(bname, "float64")
    params = [tp.param(x) for x in inits]
    opt = Adam(tp, lr=0.1)
    opt.add(params)
    view = tp.value(params[0])
    before = tp.backend.to_numpy(view)
    loss = tape_loss(tp, params, targets)
    tp.backward(loss)
    opt.step()
    assert not np.array_equal(tp.backend.to_numpy(view), before)  # the old view sees it
    assert _bits(tp.backend.to_numpy(view)) == _bits(tp.backend.to_numpy(tp.value(params[0])))
    # the tape noted the in-place write: the forward recorded before it is stale
    with pytest.raises(RuntimeError, match="was overwritten"):
        tp.backward(loss)


def test_note_updated_refuses_a_non_parameter(bname):
    tp = g.Tape(bname, "float64")
    w = tp.param(np.ones(3))
    c = tp.const(np.ones(3))
    with pytest.raises(ValueError, match="note_updated: .* is not a param"):
        tp.note_updated(c)
    with pytest.raises(ValueError, match="param_buffer: .* is not a param"):
        tp.param_buffer(c)
    buf = tp.param_buffer(w)  # the parameter's own buffer, writable on every backend
    buf[0] = 2.0
    assert tp.backend.to_numpy(tp.value(w)).tolist() == [2.0, 1.0, 1.0]
