"""Higher-order gradients: the backward pass recorded on the tape, so gradients are Vars.

The ops' backward rules are written in gtensor backend ops (``vjp(be, g, ins, out, needs)``).
Run with ``be`` = ``TapeOps(tp)`` -- a backend whose every op method records a node on the tape
-- and on Vars instead of arrays, a rule records its gradient as nodes that can be
differentiated again (their own rules, the helper ops' included, are in gtensor too). The walk
is ``gtape.backward.run``'s, step for step: the seed ``fill(1.0)``, nodes in descending order,
one ``sum_to`` per broadcast contribution, ``add`` in arrival order. Every value is therefore
the same op on the same inputs as in a first-order pass: first-order gradients are bitwise
those of ``tp.backward(loss)``.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> w = tp.param(np.array([1.0, 2.0]))
>>> (gw,) = g.grad(g.sum(w * w * w), [w], create_graph=True)   # 3 w^2, a Var
>>> gw.numpy().tolist(), g.grad(g.sum(gw), [w])[0].tolist()      # and its gradient: 6 w
([3.0, 12.0], [6.0, 12.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gtensor
from gtensor import Op, describe

from . import backward as _backward
from .leaves import PARAM, Leaf
from .var import Var

if TYPE_CHECKING:
    from .tape import Tape


class TapeOps(gtensor.Backend):
    """A backend over the Vars of one tape: each op method records a node (``Tape._record``)."""

    differentiates = True

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.name = f"tape({tape.backend.name})"

    def apply(self, op: Op | str, inputs: Sequence[Any], out: Any = None, **attrs: Any) -> Var:
        """Record ``op`` on ``inputs`` (Vars of the tape) as a new node."""
        if out is not None:  # NOTE: a recorded node owns its buffer; no rule writes into one
            raise TypeError(f"{getattr(op, 'name', op)}: out= is not supported on a tape")
        return self.tape._record(op, list(inputs), attrs)

    def is_array(self, x: Any) -> bool:
        """Vars of this tape."""
        return isinstance(x, Var) and x.tape is self.tape

    def constant(self, x: Any, dtype: Any = None) -> Var:
        """Host data as a const of the tape."""
        return self.tape.const(x, dtype=dtype)


def _walk(tp: Tape, loss: int) -> tuple[dict[int, Var], dict]:
    """The recorded backward pass from node ``loss``: {node index: gradient Var} for every node
    the gradient reaches, and counts of the work."""
    nodes = tp.nodes()[:loss + 1]  # a snapshot: the walk appends nodes after the loss
    graph = _backward.Graph([n.op for n in nodes], [n.inputs for n in nodes],
                            [n.attrs for n in nodes], [n.shape for n in nodes],
                            [n.requires_grad for n in nodes], [], [])
    reach = _backward.reached(graph, loss)  # NotImplementedError before any node is recorded
    be = TapeOps(tp)
    stats = {"vjps": 0, "reductions": 0, "accumulations": 0, "param_copies": 0}
    grads: dict[int, Var] = {}
    if not reach[loss]:
        return grads, stats
    pending: dict[int, Var] = {loss: be.fill(nodes[loss].shape, 1.0, tp.dtype)}
    for i in range(loss, -1, -1):
        if not reach[i]:
            continue
        g = pending.pop(i)
        grads[i] = g
        n = nodes[i]
        if isinstance(n.op, Leaf):
            stats["param_copies"] += n.op is PARAM
            continue
        needs = tuple(graph.req[j] for j in n.inputs)
        contribs = n.op.vjp(be, g, [tp.var_at(j) for j in n.inputs], tp.var_at(i), needs,
                            **n.attrs)
        stats["vjps"] += 1
        for j, c, need in zip(n.inputs, contribs, needs):
            if not need:
                continue
            if c is None:
                raise AssertionError(f"backward: the vjp of {n.name} returned no gradient for "
                                     f"input node {j}, which needs one")
            if c.shape != nodes[j].shape:
                c = be.sum_to(c, nodes[j].shape)
                stats["reductions"] += 1
            if j in pending:
                pending[j] = be.add(pending[j], c)
                stats["accumulations"] += 1
            else:
                pending[j] = c
    return grads, stats


def _check_loss(where: str, tp: Tape, loss: Any) -> int:
    if not isinstance(loss, Var):
        raise TypeError(f"{where}: loss is {describe(loss)}; expected a scalar Var")
    tp._check_var(loss, where)
    shape = loss.shape
    if math.prod(shape) != 1:
        raise ValueError(f"{where}: loss has shape {shape}; expected a scalar (one element), "
                         "e.g. g.sum(...) or g.mean(...)")
    if not loss.requires_grad:
        raise ValueError(f"{where}: no parameter reaches the loss (node {loss.index}, "
                         f"{loss.op}): every gradient would be zero; build the loss from "
                         "tp.param(...) Vars")
    tp._check_fresh(loss.index)
    return loss.index


def _zeros(tp: Tape, v: Var) -> Var:
    return TapeOps(tp).fill(v.shape, 0.0, tp.dtype)


def backward(tp: Tape, loss: Var, create_graph: Any = True) -> list[Var]:
    """``tp.backward(loss, create_graph=True)``: the pass recorded on the tape; every param's
    gradient buffer gets its value (as a first-order pass, bitwise) and ``p.grad`` is the
    gradient Var. Returns the params' gradient Vars in ``tp.params()`` order (a recorded
    ``fill(0.0)`` for a param the loss does not reach)."""
    if create_graph is not True:
        raise TypeError(f"backward: create_graph is {describe(create_graph)}; expected True "
                        "or False")
    li = _check_loss("backward", tp, loss)
    grads, stats = _walk(tp, li)
    params = tp.params()
    out = [grads[p.index] if p.index in grads else _zeros(tp, p) for p in params]
    _store(tp, grads, params, out)
    tp._last_backward = stats
    tp._backwards += 1
    tp._grad_loss = li
    tp._grad_vars = (tp._backwards, {**grads, **{p.index: v for p, v in zip(params, out)}})
    tp._note_growth()
    return out


def _store(tp: Tape, grads: dict[int, Var], params: list[Var], out: list[Var]) -> None:
    """Give the tape's gradient slots the recorded pass's values (what ``tp.grad`` reads)."""
    # NOTE: the tape's storage, written as Tape.backward's pass writes it: each param's
    # persistent buffer by the copy op, other slots pointing at the gradient nodes' values
    be, slots, values = tp.backend, tp._grads, tp._values
    for i in range(len(slots)):
        if tp._op[i] is not PARAM:
            slots[i] = values[grads[i].index] if i in grads else None
    for p, v in zip(params, out):
        be.copy(values[v.index], out=slots[p.index])


def grad(loss: Var, inputs: Var | Sequence[Var], create_graph: bool = False) -> list[Any]:
    """d loss / d input for each of ``inputs`` (Vars of the loss's tape), as torch's
    ``torch.autograd.grad``.

    ``create_graph=True``: the backward pass is recorded on the tape and the gradients are
    Vars (differentiable again); the tape's gradient buffers are left alone. Otherwise this is
    ``tp.backward(loss)`` and copies of ``tp.grad(v)`` (arrays of the tape's backend, which a
    later backward leaves alone). An input the loss does not reach gets zeros.
    """
    if not isinstance(loss, Var):
        raise TypeError(f"grad: loss is {describe(loss)}; expected a scalar Var")
    tp = loss.tape
    many = isinstance(inputs, (list, tuple))
    xs = list(inputs) if many else [inputs]
    if not xs:
        raise ValueError("grad: inputs is empty; expected the Vars to differentiate by")
    for k, x in enumerate(xs):
        what = f"inputs[{k}]" if many else "inputs"
        if not isinstance(x, Var):
            raise TypeError(f"grad: {what} is {describe(x)}; expected a Var of the loss's tape")
        if x.tape is not tp:
            raise ValueError(f"grad: {what} {x!r} belongs to another tape than the loss")
        tp._check_var(x, f"grad: {what}")
    if create_graph is False:  # copies: a later backward overwrites what tp.grad views
        tp.backward(loss)
        return [tp.backend.copy(tp.grad(x)) for x in xs]
    if create_graph is not True:
        raise TypeError(f"grad: create_graph is {describe(create_graph)}; expected True or "
                        "False")
    grads, _ = _walk(tp, _check_loss("grad", tp, loss))
    return [grads[x.index] if x.index in grads else _zeros(tp, x) for x in xs]
