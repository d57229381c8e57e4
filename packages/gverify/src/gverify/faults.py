"""Drills: make a run differ on purpose, by a known number of ulps, at a known place.

``perturb(tp, node, ulps, phase)``: phase "forward" moves the node's recorded value now (call
it after the forward, before ``backward``) and recomputes every later node that depends on it
with the tape's own ops, so the episode is what an op that landed ``ulps`` off would have
produced (the loss, and the gradients, see it). Phase "update" (parameter nodes only; call it
right after ``opt.step()``) moves the live parameter and nothing else: an update that landed
``ulps`` off. Phase "backward" moves the node's gradient when the next ``backward``
computes it, and the moved gradient flows on to the node's inputs. ``perturb_state`` moves an
optimizer state buffer (``"m.0"``, ``"v.2"``: gopt's ``state_dict`` names).
"""

from __future__ import annotations

from typing import Any

import gtape
import numpy as np
from gtensor import describe

from . import ulps as _ulps

PHASES = ("forward", "backward", "update")


def _node(where: str, tp: Any, node: Any) -> int:
    if not isinstance(tp, gtape.Tape):
        raise TypeError(f"{where}: tp is {describe(tp)}; expected a gtape.Tape")
    if isinstance(node, gtape.Var):
        if node.tape is not tp or not node.alive:
            raise ValueError(f"{where}: node {node!r} is not a live Var of this tape")
        return node.index
    return tp.node(node).index  # TypeError / IndexError naming the problem


def _steps(where: str, ulps: Any) -> int:
    if isinstance(ulps, bool) or not isinstance(ulps, (int, np.integer)) or ulps == 0:
        raise TypeError(f"{where}: ulps is {describe(ulps)}; expected a nonzero int")
    return int(ulps)


def _element(where: str, element: Any, size: int) -> int | None:
    if element is None:
        return None
    if isinstance(element, bool) or not isinstance(element, (int, np.integer)) or not (
            0 <= element < size):
        raise ValueError(f"{where}: element is {describe(element)}; expected None (every "
                         f"element) or a flat index 0 <= element < {size}")
    return int(element)


def perturb(tp: gtape.Tape, node: Any, ulps: int = 1, phase: str = "forward",
            element: int | None = None) -> None:
    """Move node ``node``'s value ("forward": now, later nodes recomputed), gradient
    ("backward": in the next backward) or updated parameter ("update": now, nothing else) by
    ``ulps`` units in the last place: every finite element, or only flat ``element``."""
    where = "perturb"
    i = _node(where, tp, node)
    n = _steps(where, ulps)
    if phase not in PHASES:
        raise ValueError(f"{where}: phase is {phase!r}; expected one of {PHASES}")
    info = tp.node(i)
    el = _element(where, element, int(np.prod(info.shape)))
    be = tp.backend
    if phase == "update" and info.op is not gtape.PARAM:
        raise ValueError(f"{where}: phase 'update' moves a parameter; node {i} is a "
                         f"{info.name!r} node")
    if phase in ("forward", "update"):
        host = np.array(be.to_numpy(tp.value_at(i)))
        tp.overwrite_value_at(i, _ulps.move(host, n, el))
        if phase == "forward":
            _recompute_after(tp, i)
        return
    if not info.requires_grad:
        raise ValueError(f"{where}: node {i} ({info.name}) gets no gradient (no parameter "
                         "lies upstream of it); expected a node whose requires_grad is True")

    def adjust(j: int, g: Any) -> Any:
        if j != i:
            return g
        return be.asarray(_ulps.move(np.array(be.to_numpy(g)), n, el), dtype=tp.dtype)

    tp.adjust_next_backward(adjust)


def _recompute_after(tp: gtape.Tape, i: int) -> None:
    """Re-run every op node after ``i`` that depends on it (node order, the tape's ops and
    attributes), writing each result over the node's recorded value."""
    be = tp.backend
    moved = {i}
    for j in range(i + 1, len(tp)):
        node = tp.node(j)
        if node.is_leaf or not moved.intersection(node.inputs):
            continue
        out = be.apply(node.op, [tp.value_at(k) for k in node.inputs], **node.attrs)
        tp.overwrite_value_at(j, np.array(be.to_numpy(out)))
        moved.add(j)


def perturb_state(opt: Any, key: str, ulps: int = 1, element: int | None = None) -> None:
    """Move optimizer state buffer ``key`` (a ``state_dict`` name such as ``"m.0"``) by
    ``ulps`` (through ``load_state_dict``: all of gopt's checks apply)."""
    where = "perturb_state"
    n = _steps(where, ulps)
    state = opt.state_dict(params=False)
    if key not in state or np.asarray(state[key]).dtype.kind != "f":
        names = [k for k, v in state.items() if np.asarray(v).dtype.kind == "f"]
        raise ValueError(f"{where}: key is {key!r}; expected a float entry of the optimizer's "
                         f"state_dict: {names}")
    a = np.asarray(state[key])
    el = _element(where, element, a.size)
    state[key] = _ulps.move(a, n, el).reshape(a.shape)
    opt.load_state_dict(state)
