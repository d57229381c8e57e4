"""Drills: make a run differ on purpose, by a known number of ulps, at a known place.

``perturb(tp, node, ulps, phase)``: phase "forward" moves the node's recorded value now (call
it after the forward, before ``backward``) and recomputes every later node that depends on it
with the tape's own ops, so the episode is what an op that landed ``ulps`` off would have
produced (the loss, and the gradients, see it). Phase "update" (parameter nodes only; call it
right after ``opt.step()``) moves the live parameter and nothing else: an update that landed
``ulps`` off. Phase "backward" moves the node's gradient when the next ``backward``
computes it, and the moved gradient flows on to the node's inputs. ``perturb_state`` moves an
optimizer state buffer (``"m.0"``, ``"v.2"``: gopt's ``state_dict`` names). ``flip_bit``
flips one bit of a parameter.

``Drill`` is a cheating trainer (or a lying auditor) as data: what ``gverify record`` and
``gverify audit`` take as flags and apply as a probe of every step (``Drill.probe``):
``ulp`` moves the ``which``-th node of ``op`` by ``ulps`` at step k in phase forward, backward
or update; ``flip`` flips bit ``bit`` of element ``element`` of a parameter after step k's
update; ``inconsistent`` computes as ``ulp`` and then answers the query for step k's record
with the honest record instead of the committed one (a trainer hiding its fault: the proof
fails).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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


def flip_bit(tp: gtape.Tape, node: Any, bit: int, element: int = 0) -> None:
    """Flip bit ``bit`` (0: the least significant) of flat element ``element`` of parameter
    ``node``'s live value (call right after ``opt.step()``: a weight that went bad)."""
    where = "flip_bit"
    i = _node(where, tp, node)
    info = tp.node(i)
    if info.op is not gtape.PARAM:
        raise ValueError(f"{where}: node {i} is a {info.name!r} node; expected a parameter")
    width = 8 * tp.dtype.itemsize
    if isinstance(bit, bool) or not isinstance(bit, (int, np.integer)) or not 0 <= bit < width:
        raise ValueError(f"{where}: bit is {describe(bit)}; expected an int in [0, {width})")
    el = _element(where, element, int(np.prod(info.shape)))
    host = np.array(tp.backend.to_numpy(tp.value_at(i)))
    words = host.reshape(-1).view(f"u{tp.dtype.itemsize}")
    words[el] ^= words.dtype.type(1) << words.dtype.type(bit)
    tp.overwrite_value_at(i, host)


DRILLS = ("ulp", "flip", "inconsistent")


@dataclass(frozen=True)
class Drill:
    """A fault at step ``step`` (see the module docstring); ``node`` names the node directly
    (else the ``which``-th node of ``op``; for ``flip``, the first parameter)."""

    kind: str
    step: int
    op: str | None = None
    which: int = 0
    phase: str = "forward"
    ulps: int = 1
    node: int | None = None
    bit: int = 0
    element: int | None = None

    def __post_init__(self) -> None:
        where = "Drill"
        if self.kind not in DRILLS:
            raise ValueError(f"{where}: kind is {self.kind!r}; expected one of {DRILLS}")
        for name in ("step", "which", "bit"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "step" else 0):
                raise ValueError(f"{where}: {name} is {describe(v)}; expected an int >= "
                                 f"{1 if name == 'step' else 0}")
        for name in ("node", "element"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{where}: {name} is {describe(v)}; expected None or an int "
                                 ">= 0")
        _steps(where, self.ulps)
        if self.kind != "flip":
            if self.phase not in PHASES:
                raise ValueError(f"{where}: phase is {self.phase!r}; expected one of {PHASES}")
            if self.op is None and self.node is None:
                raise ValueError(f"{where}: a {self.kind} drill needs op (with which) or node")

    def to_dict(self) -> dict:
        """The drill as JSON data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Drill:
        """The drill ``to_dict`` wrote (ValueError naming a bad field)."""
        if not isinstance(d, dict) or not set(d) <= set(cls.__dataclass_fields__) or "kind" \
                not in d or "step" not in d:
            raise ValueError(f"Drill.from_dict: {describe(d)} is not a drill; expected a dict "
                             f"of {sorted(cls.__dataclass_fields__)} with kind and step")
        return cls(**d)

    def probe(self) -> DrillProbe:
        """A fresh probe applying the drill (``Session.step``'s hooks)."""
        return DrillProbe(self)


class DrillProbe:
    """Applies a ``Drill`` at its step; ``node`` is the node it moved (None until then)."""

    def __init__(self, drill: Drill) -> None:
        self.drill = drill
        self.node: int | None = None

    def _resolve(self, tp: gtape.Tape) -> int:
        d = self.drill
        if d.node is not None:
            return tp.node(d.node).index
        if d.kind == "flip":
            return tp.params()[0].index
        found = [n.index for n in tp.nodes() if n.name == d.op]
        if d.which >= len(found):
            raise ValueError(f"Drill: step {d.step} has {len(found)} {d.op!r} node(s); "
                             f"expected at least {d.which + 1} (which={d.which})")
        return found[d.which]

    def forward(self, step: int, tp: gtape.Tape, loss: Any) -> None:
        """After the forward: a forward or backward ``ulp`` drill moves its node."""
        d = self.drill
        if step == d.step and d.kind != "flip" and d.phase in ("forward", "backward"):
            self.node = self._resolve(tp)
            perturb(tp, self.node, d.ulps, d.phase, d.element)

    def update(self, step: int, tp: gtape.Tape, opt: Any) -> None:
        """After the update: ``flip`` flips its bit, an update ``ulp`` drill moves its
        parameter."""
        d = self.drill
        if step != d.step:
            return
        if d.kind == "flip":
            self.node = self._resolve(tp)
            flip_bit(tp, self.node, d.bit, d.element or 0)
        elif d.phase == "update":
            self.node = self._resolve(tp)
            perturb(tp, self.node, d.ulps, "update", d.element)
