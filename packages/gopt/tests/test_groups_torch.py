"""Parameter groups against torch.optim in float64, fed the same bits: SGD, Adam and AdamW with
two groups of different lr / weight_decay (Adam: betas too), with and without
``set_clip(max_norm, rule="torch")`` against ``torch.nn.utils.clip_grad_norm_``.

Adam runs with eps = 0, where our folded bias correction is torch's formula (with eps > 0
they differ by design, docs/optimizers.md); AdamW is torch's form for any eps. The clip
threshold is under the first steps' norms and above the last ones', so both sides of the
clamp are taken.
"""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam, AdamW
from gopt_testutil import problem, tape_loss

torch = pytest.importorskip("torch")
STEPS = 15
GROUPS = [[0, 2], [1]]  # the weights, then the "bias": registration order 0, 2, 1

CASES = {
    "sgd": (SGD, torch.optim.SGD, {"lr": 0.05},
            [{"weight_decay": 0.1}, {"lr": 0.02, "weight_decay": 0.0}], 6.0),
    "adam": (Adam, torch.optim.Adam, {"lr": 0.05, "eps": 0.0},
             [{"weight_decay": 0.05, "betas": (0.8, 0.99)}, {"lr": 0.2}], 5.0),
    "adamw": (AdamW, torch.optim.AdamW, {"lr": 0.05},
              [{"weight_decay": 0.1}, {"lr": 0.1, "weight_decay": 0.0}], 5.0),
}


def _ours(bname: str, kind: str, clip: float | None):
    ours, _, common, opts, _ = CASES[kind]
    inits, targets = problem()
    tp = g.Tape(bname)
    ps = [tp.param(x) for x in inits]
    opt = ours([{"params": [ps[i] for i in idx], **o} for idx, o in zip(GROUPS, opts)],
               **common)
    if clip is not None:
        opt.set_clip(clip, rule="torch")
    mark = tp.mark()
    traj, norms = [], []
    for _ in range(STEPS):
        tp.backward(tape_loss(tp, ps, targets))
        opt.step()
        norms.append(opt.last_norm)
        tp.reset_to(mark)
        traj.append([tp.backend.to_numpy(tp.value(p)).copy() for p in ps])
    return traj, norms


def _torch(kind: str, clip: float | None):
    _, theirs, common, opts, _ = CASES[kind]
    inits, targets = problem()
    ps = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inits]
    cs = [torch.tensor(c, dtype=torch.float64) for c in targets]
    opt = theirs([{"params": [ps[i] for i in idx], **o} for idx, o in zip(GROUPS, opts)],
                 **common)
    traj, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        sum(((p - c) * (p - c)).sum() for p, c in zip(ps, cs)).backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(ps, clip)))
        opt.step()
        traj.append([p.detach().numpy().copy() for p in ps])
    return traj, norms


def _rel(ours, theirs) -> float:
    return max(float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
               for sa, sb in zip(ours, theirs) for a, b in zip(sa, sb))


@pytest.mark.parametrize("clipped", [False, True], ids=["noclip", "torchclip"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_two_groups_match_torch_float64(bname, kind, clipped):
    clip = CASES[kind][4] if clipped else None
    ours, our_norms = _ours(bname, kind, clip)
    theirs, their_norms = _torch(kind, clip)
    assert _rel(ours, theirs) <= 1e-12, (kind, _rel(ours, theirs))
    if clipped:  # premise: the clamp took both sides (clipped early, not at the end)
        np.testing.assert_allclose(our_norms, their_norms, rtol=1e-13)
        assert our_norms[0] > clip > our_norms[-1], our_norms


@pytest.mark.parametrize("kind", sorted(CASES))
def test_groups_are_not_one_group(kind):
    """Premise of the oracle: the second group's settings change the trajectory (a test
    that ignored them would not pass against torch)."""
    ours_cls, _, common, opts, _ = CASES[kind]
    inits, targets = problem()

    def run(groups):
        tp = g.Tape()
        ps = [tp.param(x) for x in inits]
        opt = ours_cls([{"params": [ps[i] for i in idx], **o} for idx, o in zip(GROUPS, groups)],
                       **common)
        mark = tp.mark()
        for _ in range(3):
            tp.backward(tape_loss(tp, ps, targets))
            opt.step()
            tp.reset_to(mark)
        return [p.numpy() for p in ps]

    a, b = run(opts), run([opts[0], opts[0]])
    assert not np.array_equal(a[1], b[1]) and np.array_equal(a[0], b[0])
