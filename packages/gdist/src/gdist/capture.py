"""A replica's microbatch as a captured program (ggpu-replay): the same bits, one native call.

``capture=True`` asks each replica to capture its loss and gradient once and replay it for
every later microbatch. A capture is a fixed list of kernels over fixed buffers, so only what
the program knows how to refresh may change between microbatches. gdist works that out from
two recordings of two *different* microbatches (the first two a replica sees) and refuses
what it cannot account for:

* the two recordings must be the same ops on the same shapes (no branch on the data);
* every const leaf must be one of: a float batch entry (gdist recorded it), an int / bool
  entry passed unchanged to an op (cross_entropy's labels, Embedding's ids: matched by
  value, reshaped), a key a model module drew (refreshed per microbatch as the eager run
  draws it), or the same in both recordings (held: a causal mask, position ids);
* the program, run on the first microbatch, must give the eager tape's loss and gradients
  bit for bit.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import gtape
import numpy as np

from .model import Model, Result, random_key_nodes


class CaptureRefused(RuntimeError):
    """The loss_fn cannot be captured as it is (the message says why and what to change)."""


def _snapshot(tp: gtape.Tape, start: int) -> tuple[list, dict[int, gtape.Var], dict]:
    """The nodes after ``start`` as (op name, shape, inputs), the const leaves' Vars and
    their values (host copies)."""
    be = tp.backend
    struct, vs, consts = [], {}, {}
    for n in tp.nodes()[start:]:
        struct.append((n.name, n.shape, n.inputs))
        if n.op is gtape.CONST:
            vs[n.index] = tp.var_at(n.index)
            consts[n.index] = np.array(be.to_numpy(tp.value_at(n.index)))
    return struct, vs, consts


def _matches(c: np.ndarray, rows: np.ndarray) -> bool:
    """Whether const value ``c`` is the int / bool entry ``rows`` itself (any shape, cast)."""
    return (c.size == rows.size and rows.dtype.kind in "biu" and c.dtype.kind in "biu"
            and np.array_equal(c.reshape(-1), rows.reshape(-1).astype(c.dtype)))


def _same(a: Result, b: Result) -> bool:
    """Bitwise equality of two (loss, gradients) results."""
    return a[0].tobytes() == b[0].tobytes() and all(
        a[1][n].tobytes() == b[1][n].tobytes() for n in b[1])


def expected_keys(model: Model, serial: int) -> list[list[tuple[int, int]]]:
    """Per drawing module, the key words it draws for microbatch ``serial`` (its counter is
    left as it was)."""
    out = []
    for (_, m), c in zip(model.drawers, model.draws or []):
        was = m.calls
        m.calls = serial * c
        out.append([tuple(m.next_key().words) for _ in range(c)])
        m.calls = was
    return out


class Captured:
    """The captured microbatch of a model, and how its inputs are refreshed."""

    def __init__(self, model: Model, prog: Any, loss: gtape.Var,
                 floats: dict[str, gtape.Var], ints: list[tuple[gtape.Var, str, tuple]],
                 keys: list[tuple[gtape.Var, int, int]]) -> None:
        self.model, self.prog, self.loss = model, prog, loss
        self.floats, self.ints = floats, ints
        owned: set[int] = set()
        if callable(getattr(prog, "advance_keys", None)):  # keys owned by their module
            got = prog.key_inputs
            owned = {v.index for v, _, _ in keys if got.get(prog.name_of(v.index)) is not None}
        self.advance = bool(owned)  # the module-owned keys: prog.advance_keys() draws them
        self.keys = [k for k in keys if k[0].index not in owned]  # the others: set_input
        self.buffers = {name: prog.trace.values[v.index] for name, v in model.vars.items()}

    @classmethod
    def build(cls, model: Model) -> Captured:
        """Capture ``model``'s microbatch from its two probes (refused: CaptureRefused)."""
        from ggpu_replay import capture

        tp, start = model.tp, model.mark.length
        (na, ra), (nb, rb) = model.probes
        want = model.eager(na, ra, keep=True)
        struct_a, _, consts_a = _snapshot(tp, start)
        floats_a = {k: v.index for k, v in model.inputs.items()}
        try:
            model.eager(nb, rb, keep=True)  # the episode the program is captured from
            loss = model.loss
            struct_b, vs, consts_b = _snapshot(tp, start)
            if struct_a != struct_b:
                raise CaptureRefused(
                    "gdist capture: loss_fn records different ops for two microbatches (a "
                    "branch on the data?); use capture=False")
            floats = dict(model.inputs)
            if {k: v.index for k, v in floats.items()} != floats_a:
                raise CaptureRefused("gdist capture: the batch entries were recorded at "
                                     "different nodes for two microbatches; use capture=False")
            keys = cls._keys(model, random_key_nodes(tp, start), vs, consts_a, consts_b,
                             na, nb)
            done = {v.index for v in floats.values()} | {v.index for v, _, _ in keys}
            ints, held = [], []
            for i in sorted(consts_b):
                if i in done:
                    continue
                a, b = consts_a[i], consts_b[i]
                hits = [k for k in rb if _matches(a, ra[k]) and _matches(b, rb[k])]
                if len(hits) == 1:
                    ints.append((vs[i], hits[0], tuple(b.shape)))
                elif not hits and a.dtype == b.dtype and np.array_equal(a, b):
                    held.append(vs[i])
                else:
                    what = f"entries {hits} alike" if hits else "no batch entry"
                    raise CaptureRefused(
                        f"gdist capture: const node {i} ({tp.name_of(vs[i]) or 'unnamed'}, "
                        f"{b.dtype} {b.shape}) changes with the data but matches {what} (is "
                        "it computed from the batch in numpy inside loss_fn?); compute it in "
                        "the data pipeline, or use capture=False")
            kw = {"model": model.obj} if ("model" in inspect.signature(capture).parameters
                                          and isinstance(model.obj, gtape.nn.Module)) else {}
            prog = capture(tp, loss, model.defn.backend, **kw)
        finally:
            tp.reset_to(model.mark)
        out = cls(model, prog, loss, floats, ints, keys)
        for v in held:
            prog.hold_input(v)
        got = out.leaf(na, ra)
        if not _same(got, want):
            raise CaptureRefused("gdist capture: the captured program's loss and gradients "
                                 "differ from the eager tape's on the same microbatch; use "
                                 "capture=False")
        return out

    @staticmethod
    def _keys(model: Model, nodes: list[int], vs: dict[int, gtape.Var], consts_a: dict,
              consts_b: dict, na: int, nb: int) -> list[tuple[gtape.Var, int, int]]:
        """The random ops' key inputs: (Var, drawer, draw j) for keys a model module drew for
        this microbatch; keys the same in both recordings are left alone (held)."""
        ea, eb = expected_keys(model, na), expected_keys(model, nb)
        out = []
        for i in nodes:
            a = tuple(int(w) for w in consts_a[i].view(np.uint64))
            b = tuple(int(w) for w in consts_b[i].view(np.uint64))
            hit = [(d, j) for d in range(len(ea)) for j in range(len(ea[d]))
                   if ea[d][j] == a and eb[d][j] == b]
            if len(hit) == 1:
                out.append((vs[i], *hit[0]))
            elif a != b:
                raise CaptureRefused(f"gdist capture: the key of random op input node {i} "
                                     "changes between microbatches but is no model module's "
                                     "draw; use capture=False")
        return out

    # ---------------------------------------------------------------- running
    def buffer(self, name: str) -> Any:
        """Parameter ``name``'s value buffer in the program (writable)."""
        return self.buffers[name]

    def leaf(self, serial: int, rows: Mapping[str, np.ndarray]) -> Result:
        """Microbatch ``serial`` replayed: inputs refreshed, forward, backward, read out."""
        prog, model = self.prog, self.model
        for k, v in self.floats.items():
            prog.set_input(v, rows[k])
        for v, k, shape in self.ints:
            prog.set_input(v, np.asarray(rows[k]).reshape(shape))
        if self.keys:
            ek = expected_keys(model, serial)
            for v, d, j in self.keys:
                prog.set_input(v, gtape.rng.Key(*ek[d][j]))
        if self.advance:
            model.set_draws(serial)
            prog.advance_keys()
        prog.forward()
        prog.backward()
        return (prog.value(self.loss).reshape(()),
                {name: prog.grad(v) for name, v in model.vars.items()})
