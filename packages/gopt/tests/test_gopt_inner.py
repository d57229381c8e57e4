"""The inner-product contract in optimizer state: named in an fma run's state, refused by a
tape of the other contract (nothing changes), and a plain run's state as it always was."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import Adam
from gtensor.testing import bits_equal


def _run(bname, inner, steps=3):
    rng = np.random.default_rng(2)
    x, w0 = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))
    tp = g.Tape(bname, inner=inner)
    w = tp.param(w0)
    opt = Adam(tp, lr=0.05)
    opt.add(w)
    mark = tp.mark()
    for _ in range(steps):
        tp.backward(g.sum(g.tanh(g.matmul(tp.const(x), w))))
        opt.step()
        tp.reset_to(mark)
    return tp, w, opt


def test_state_names_the_contract_and_refuses_the_other(bname, tmp_path):
    tp, w, opt = _run(bname, "fma")
    assert str(opt.state_dict()["inner"]) == "fma"
    tp_plain, w_plain, opt_plain = _run(bname, "plain")
    assert "inner" not in opt_plain.state_dict()
    assert not bits_equal(tp.backend.to_numpy(tp.value(w)),
                          tp_plain.backend.to_numpy(tp_plain.value(w_plain)))
    opt.save(tmp_path / "fma.npz")
    before = tp_plain.backend.to_numpy(tp_plain.value(w_plain)).copy()
    with pytest.raises(ValueError, match=r"Adam.load_state_dict: the state is of a run under "
                                         r"the 'fma' inner-product contract; this tape's is "
                                         r"'plain'"):
        opt_plain.load(tmp_path / "fma.npz")
    assert bits_equal(tp_plain.backend.to_numpy(tp_plain.value(w_plain)), before)
    opt_plain.save(tmp_path / "plain.npz")
    with pytest.raises(ValueError, match=r"the state is of a run under the 'plain'"):
        opt.load(tmp_path / "plain.npz")
    tp2, w2, opt2 = _run(bname, "fma", steps=0)
    opt2.load(tmp_path / "fma.npz")
    assert bits_equal(tp2.backend.to_numpy(tp2.value(w2)), tp.backend.to_numpy(tp.value(w)))
