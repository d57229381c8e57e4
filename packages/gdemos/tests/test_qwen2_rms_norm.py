"""Qwen2's RMSNorm is gtape's rms_norm: the same nodes on the tape, the same bits on the host."""

from __future__ import annotations

import gtape as g
import numpy as np
from gdemos import qwen2_math as qm


def test_qwen2_rmsnorm_is_gtape_rms_norm():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(4, 6)), 1.0 + 0.1 * rng.normal(size=6)
    with g.Tape() as tp:
        xv, wv = tp.param(x), tp.param(w)
        n = len(tp)
        ours = qm.rmsnorm(qm.TapeOps(tp), xv, wv, 1e-6)
        names = [node.name for node in tp.nodes()[n:]]
        m = len(tp)
        theirs = g.rms_norm(xv, wv, 1e-6)
        assert names == [node.name for node in tp.nodes()[m:]]
        a, b = ours.numpy(), theirs.numpy()
    host = qm.rmsnorm(qm.ArrayOps(), x, w, 1e-6)
    assert a.tobytes() == b.tobytes() == np.asarray(host).tobytes()
