"""Gradient preparation, in gtensor ops: the global norm and the clip scale of either rule (the
L2 term and the scaling are applied inside the fused update ops, see gtensor/ops/optim.py).

Every formula here is stated operation by operation in docs/optimizers.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .workspace import Workspace


def global_norm(ws: Workspace, grads: Sequence[Any]) -> Any:
    """sqrt(s_0 + s_1 + ... ) as a 0-d array, s_i = serial sum of g_i * g_i, in list order."""
    be = ws.be
    total = None
    for i, g in enumerate(grads):
        sq = be.mul(g, g, out=ws(("sq", i), g.shape))
        s = be.sum(sq, out=ws(("sumsq", i), ()))
        total = s if total is None else be.add(total, s, out=ws(("running", i), ()))
    return be.sqrt(total, out=ws("norm", ()))


def clip_scale(ws: Workspace, norm: Any, max_norm: Any, one: Any) -> Any:
    """max_norm / norm where norm > max_norm, else exactly 1 (a 0-d array; no host sync).

    Computed as ``relu_grad(c, d) + (1 - relu_grad(1, d))`` with ``c = max_norm / norm`` and
    ``d = norm - max_norm``: one branch contributes exactly its value, the other exactly +0.0.
    """
    be = ws.be
    c = be.div(max_norm, norm, out=ws("clip_c", ()))
    d = be.sub(norm, max_norm, out=ws("clip_d", ()))
    keep = be.relu_grad(c, d, out=ws("clip_keep", ()))
    over = be.relu_grad(one, d, out=ws("clip_over", ()))
    rest = be.sub(one, over, out=ws("clip_rest", ()))
    return be.add(keep, rest, out=ws("clip_scale", ()))


# torch.nn.utils.clip_grad_norm_'s guard: max_norm / (total_norm + 1e-6)
TORCH_CLIP_EPS = 1e-6


def torch_clip_scale(ws: Workspace, norm: Any, max_norm: Any, one: Any, eps: Any) -> Any:
    """torch's clip coefficient ``clamp(max_norm / (norm + 1e-6), max=1)`` as a 0-d array.

    Computed as torch computes it, operation by operation: ``den = norm + fl(1e-6)``;
    ``r = 1 / den`` (torch evaluates ``float / tensor`` as ``tensor.reciprocal() * float``);
    ``c = r * fl(max_norm)``; ``scale = minimum(c, 1)`` (torch's ``clamp(c, max=1.0)``: c when
    c < 1 or c is NaN, else 1). ``eps`` and ``max_norm`` are 0-d arrays rounded once to the
    dtype, as torch rounds a Python scalar into a tensor op of that dtype.
    """
    be = ws.be
    den = be.add(norm, eps, out=ws("tclip_den", ()))
    r = be.div(one, den, out=ws("tclip_r", ()))
    c = be.mul(r, max_norm, out=ws("tclip_c", ()))
    return be.minimum(c, one, out=ws("tclip_scale", ()))
