"""The backward pass: one reverse walk over a flat node list, written only in backend ops.

Order (fixed, so every engine can reproduce the bits):
  * node indices descend from the loss; a node is visited only if it requires a gradient
    (a parameter lies upstream) and the loss depends on it;
  * the seed is ``fill(loss shape, 1.0)``;
  * a visited op node calls its op's ``vjp`` with ``needs[k]`` = input k requires a gradient;
  * each contribution whose shape differs from its input's shape is reduced once with
    ``sum_to``; contributions to one node are summed with ``add`` in arrival order
    (consumers in descending index order, and within one consumer in input order);
  * a parameter's total is copied (``copy``) into its persistent gradient buffer; parameters
    the gradient does not reach get ``fill(0.0)``. While a recorder records the pass, the one
    launch that computed a total nobody else holds writes the parameter's buffer itself
    instead (``Recorder.redirect_output``: the same kernel on the same inputs, so the same
    bits; the replay makes no copy).
The engine only moves references; every write is a backend op. It runs on any gtensor backend:
the eager tape's, or a ``gtensor.recording.Recorder`` when a replay engine captures the pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gtensor import Op

from .leaves import PARAM, Leaf


@dataclass(frozen=True)
class Graph:
    """The flat node lists the backward pass reads, plus the gradient list it writes.

    ``grads[i]`` is a persistent buffer for every param (overwritten in place) and is replaced
    by the pass for every other node (an array, or None where no gradient is stored).
    """

    ops: Sequence[Op | Leaf]
    inputs: Sequence[tuple[int, ...]]
    attrs: Sequence[dict]
    shapes: Sequence[tuple[int, ...]]
    req: Sequence[bool]
    values: Sequence[Any]
    grads: list


def reached(graph: Graph, loss: int) -> list[bool]:
    """Nodes the gradient reaches: requires-grad nodes the loss depends on.

    Raises NotImplementedError (before any work) if a gradient would have to flow through an
    op without a backward rule.
    """
    reach = [False] * (loss + 1)
    reach[loss] = graph.req[loss]
    for i in range(loss, -1, -1):
        op = graph.ops[i]
        if not reach[i] or isinstance(op, Leaf):
            continue
        if op.vjp is None:
            raise NotImplementedError(
                f"backward: op {op.name} (node {i}) has no backward rule, but a parameter "
                "lies upstream of it and the loss depends on it; keep it off the gradient path")
        for j in graph.inputs[i]:
            if graph.req[j]:
                reach[j] = True
    return reach


def run(be: Any, graph: Graph, loss: int, dtype: Any,
        visit: Callable[[int], None] | None = None,
        adjust: Callable[[int, Any], Any] | None = None) -> dict:
    """Fill ``graph.grads`` with d loss / d node on backend ``be``; returns counts of the work.

    ``visit(i)``, when given, is called before node ``i``'s work (a capture tags launches).
    ``adjust(i, g)``, when given, receives node ``i``'s total gradient and returns the array
    used in its place from then on (``Tape.adjust_next_backward``: fault drills, debugging).
    """
    ops, req, grads = graph.ops, graph.req, graph.grads
    reach = reached(graph, loss)  # may raise: nothing has been touched yet
    stats = {"vjps": 0, "reductions": 0, "accumulations": 0, "param_copies": 0}
    redirect = getattr(be, "redirect_output", None)  # a recording backend's
    stored: set[int] = set()  # ids of the arrays kept as some node's gradient
    for i, op in enumerate(ops):  # forget the previous backward's gradients
        if op is PARAM:
            if i > loss or not reach[i]:
                be.fill(graph.shapes[i], 0.0, dtype, out=grads[i])
        else:
            grads[i] = None
    if not reach[loss]:
        return stats
    pending: dict[int, Any] = {loss: be.fill(graph.shapes[loss], 1.0, dtype)}
    for i in range(loss, -1, -1):
        if not reach[i]:
            continue
        if visit is not None:
            visit(i)
        g = pending.pop(i)
        if adjust is not None:
            g = adjust(i, g)
        op = ops[i]
        if op is PARAM:
            # while recording, the launch that computed g (nobody else's: not kept as a
            # node's gradient, not pending for another node) may write the parameter's
            # buffer itself: the replay then makes no copy (bitwise the copy, so the counts,
            # the same on every engine, count it as one)
            if (redirect is None or id(g) in stored or any(v is g for v in pending.values())
                    or not redirect(g, grads[i])):
                be.copy(g, out=grads[i])
            stats["param_copies"] += 1
            continue
        grads[i] = g
        stored.add(id(g))
        inputs = graph.inputs[i]
        needs = tuple(req[j] for j in inputs)
        contribs = op.vjp(be, g, [graph.values[j] for j in inputs], graph.values[i], needs,
                          **graph.attrs[i])
        stats["vjps"] += 1
        for j, c, need in zip(inputs, contribs, needs):
            if not need:
                continue
            if c is None:
                raise AssertionError(f"backward: the vjp of {op.name} returned no gradient for "
                                     f"input node {j}, which needs one")
            if tuple(c.shape) != graph.shapes[j]:
                c = be.sum_to(c, graph.shapes[j])
                stats["reductions"] += 1
            if j in pending:
                pending[j] = be.add(pending[j], c)
                stats["accumulations"] += 1
            else:
                pending[j] = c
    return stats
