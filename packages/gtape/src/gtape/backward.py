"""The backward pass: one reverse walk over the flat node list.

Order (fixed, so every engine can reproduce the bits):
  * node indices descend from the loss; a node is visited only if it requires a gradient
    (a parameter lies upstream) and the loss depends on it;
  * a visited op node calls its op's ``vjp`` with ``needs[k]`` = input k requires a gradient;
  * each contribution whose shape differs from its input's shape is reduced once with
    ``sum_to``; contributions to one node are summed with ``add`` in arrival order
    (consumers in descending index order, and within one consumer in input order);
  * a parameter's total is copied (``reshape``) into its persistent gradient buffer.
All arithmetic is done by backend ops; the engine itself only moves references.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .tape import Tape


def _reached(tape: Tape, loss: int) -> list[bool]:
    """Nodes the gradient reaches: requires-grad nodes the loss depends on.

    Raises NotImplementedError (before any work) if a gradient would have to flow through an
    op without a backward rule.
    """
    reach = [False] * (loss + 1)
    reach[loss] = tape._req[loss]
    for i in range(loss, -1, -1):
        if not reach[i] or isinstance(tape._op[i], str):
            continue
        op = tape._op[i]
        if op.vjp is None:
            raise NotImplementedError(
                f"backward: op {op.name} (node {i}) has no backward rule, but a parameter "
                "lies upstream of it and the loss depends on it; keep it off the gradient path")
        for j in tape._inputs[i]:
            if tape._req[j]:
                reach[j] = True
    return reach


def run(tape: Tape, loss: int) -> dict:
    """Fill ``tape._grads`` with d loss / d node; returns counts of the work done."""
    from .tape import PARAM, copy_into

    be, req = tape._be, tape._req
    reach = _reached(tape, loss)  # may raise: nothing has been touched yet
    stats = {"vjps": 0, "reductions": 0, "accumulations": 0, "param_copies": 0}
    for i, op in enumerate(tape._op):  # forget the previous backward's gradients
        if op == PARAM:
            if i > loss or not reach[i]:
                tape._grads[i].fill(0)
        else:
            tape._grads[i] = None
    if not reach[loss]:
        return stats
    pending: dict[int, Any] = {loss: be.asarray(np.ones(tape._shape[loss]), dtype=tape.dtype)}
    for i in range(loss, -1, -1):
        if not reach[i]:
            continue
        g = pending.pop(i)
        op = tape._op[i]
        if op == PARAM:
            copy_into(tape, g, tape._grads[i])
            stats["param_copies"] += 1
            continue
        tape._grads[i] = g
        inputs = tape._inputs[i]
        needs = tuple(req[j] for j in inputs)
        contribs = op.vjp(be, g, [tape._values[j] for j in inputs], tape._values[i], needs,
                          **tape._attrs[i])
        stats["vjps"] += 1
        for j, c, need in zip(inputs, contribs, needs):
            if not need:
                continue
            if c is None:
                raise AssertionError(f"backward: the vjp of {op.name} returned no gradient for "
                                     f"input node {j}, which needs one")
            if tuple(c.shape) != tape._shape[j]:
                c = be.sum_to(c, tape._shape[j])
                stats["reductions"] += 1
            if j in pending:
                pending[j] = be.add(pending[j], c)
                stats["accumulations"] += 1
            else:
                pending[j] = c
    return stats
