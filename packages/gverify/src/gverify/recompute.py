"""The referee's arithmetic: one op of a traced step, recomputed from its committed inputs by
the op's definition (gtensor's forward and VJP rules, gopt's update) on any engine.

- ``forward(engine, node, inputs)``: the node's op on its input values;
- ``gradient(engine, graph, i, values, grads)``: node i's gradient as the backward pass
  defines it (``gtape.backward``): the seed 1.0 at the loss; else each consumer's VJP
  contribution for i (consumers in descending node order, within one in input order),
  reduced to i's shape with ``sum_to`` where it differs, summed with ``add`` in that order;
  a parameter the gradient does not reach: +0.0;
- ``update(engine, state, grads)``: one optimizer step from the state before it (every
  parameter, optimizer buffer and scalar) and the parameters' gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gopt
import gtape as g
import gtensor
import numpy as np

from . import canonical, store
from .checkpoint import Checkpoint, load_checkpoint
from .nodetrace import attrs_from_json
from .steptrace import StepTrace

LEAVES = ("param", "const")
OPTIMIZERS: dict[str, Callable[[g.Tape], gopt.Optimizer]] = {
    "sgd": lambda tp: gopt.SGD(tp, lr=1.0), "adam": gopt.Adam, "adamw": gopt.AdamW}


def _be(engine: str) -> Any:
    return gtensor.backend(engine)


def _on(be: Any, x: np.ndarray) -> Any:
    return be.asarray(np.asarray(x), dtype=np.asarray(x).dtype)


def forward(engine: str, node: dict, inputs: list[np.ndarray]) -> np.ndarray:
    """Node ``node``'s (a graph entry) value from its inputs' values."""
    if node["op"] in LEAVES:
        raise ValueError(f"recompute.forward: node {node['index']} is a {node['op']}; it has "
                         "no op to recompute")
    be = _be(engine)
    op = gtensor.ops.get(node["op"])
    attrs = attrs_from_json(node["attrs"], f"node {node['index']} ({node['op']})")
    return np.array(be.to_numpy(be.apply(op, [_on(be, x) for x in inputs], **attrs)))


def reached(graph: list[dict]) -> set[int]:
    """The nodes the backward pass visits (``gtape.backward.reached``): those needing a
    gradient that the loss (the last node) depends on."""
    loss = len(graph) - 1
    reach = {loss} if graph[loss]["req"] else set()
    for i in range(loss, -1, -1):
        if i in reach and graph[i]["op"] not in LEAVES:
            reach.update(j for j in graph[i]["inputs"] if graph[j]["req"])
    return reach


def consumers(graph: list[dict], i: int, reached: set[int]) -> list[int]:
    """The nodes whose gradient flows into node ``i``: those reading it that the gradient
    reached, in descending order (the backward pass's)."""
    return sorted((c for c in reached if i in graph[c]["inputs"]), reverse=True)


def gradient(engine: str, graph: list[dict], i: int, values: dict[int, np.ndarray],
             grads: dict[int, np.ndarray], loss: int) -> np.ndarray | None:
    """Node ``i``'s gradient from its consumers' gradients (``grads``: at least every
    consumer the gradient reached) and the values they read (``values``)."""
    be = _be(engine)
    node = graph[i]
    dtype = np.dtype(graph[loss]["dtype"])
    shape = tuple(node["shape"])
    if i == loss:
        return np.array(be.to_numpy(be.fill(shape, 1.0, dtype)))
    total = None
    for c in consumers(graph, i, reached(graph)):
        cn = graph[c]
        op = gtensor.ops.get(cn["op"])
        ins = cn["inputs"]
        needs = tuple(graph[j]["req"] for j in ins)
        contribs = op.vjp(be, _on(be, grads[c]), [_on(be, values[j]) for j in ins],
                          _on(be, values[c]), needs, **attrs_from_json(cn["attrs"]))
        for j, part, need in zip(ins, contribs, needs):
            if j != i or not need:
                continue
            if tuple(part.shape) != shape:
                part = be.sum_to(part, shape)
            total = part if total is None else be.add(total, part)
    if total is None:
        return np.array(be.to_numpy(be.zeros(shape, dtype))) if node["op"] == "param" else None
    return np.array(be.to_numpy(total))


def _tape(engine: str, state: dict[str, np.ndarray]) -> tuple[g.Tape, dict[int, g.Var]]:
    """A tape whose parameters sit at the state's node indices (consts in between)."""
    contract = str(state["tape.contract"].reshape(-1)[0]) if "tape.contract" in state else "plain"
    # the tape's seed (a decimal text entry where it is not 0): a checkpoint loads only into
    # a tape of its seed
    seed = int(str(state["tape.seed"].reshape(-1)[0])) if "tape.seed" in state else 0
    tp = g.Tape(engine, str(state["tape.dtype"].reshape(-1)[0]), inner=contract, seed=seed)
    params = [int(x) for x in np.asarray(state["tape.params"]).reshape(-1)]
    made = {}
    for i in range(max(params) + 1 if params else 0):
        if i in params:
            made[i] = tp.param(np.zeros(state[f"param.{i}"].shape))
        else:
            tp.const(np.zeros(()))
    return tp, made


def update(engine: str, entries: list[tuple[str, np.ndarray]], grads: dict[int, np.ndarray]
           ) -> tuple[list[tuple[str, int, str, np.ndarray | None]], str]:
    """One optimizer step from state ``entries`` (the state before it, as a checkpoint holds
    it) with parameter gradients ``grads`` (by node): the update entries (as
    ``StepTrace.add_update`` names them) and the digest of the state after."""
    state = dict(entries)
    kind = str(state["opt.kind"].reshape(-1)[0])
    if kind not in OPTIMIZERS:
        raise NotImplementedError(f"recompute.update: optimizer {kind!r}; expected one of "
                                  f"{sorted(OPTIMIZERS)}")
    tp, params = _tape(engine, state)
    try:
        opt = OPTIMIZERS[kind](tp)
        order = [params[int(i)] for i in np.asarray(state["opt.params"]).reshape(-1)]
        groups = (np.asarray(state["opt.param_group"]).reshape(-1).tolist()
                  if "opt.param_group" in state else [0] * len(order))
        if len(groups) != len(order):
            raise ValueError(f"recompute.update: the state's opt.param_group has {len(groups)} "
                             f"entries for {len(order)} parameters")
        # the groups as the trainer made them (each group's parameters in slot order; their
        # hyperparameters come with the state)
        opt.add([p for p, k in zip(order, groups) if k == 0])
        for k in range(1, max(groups, default=0) + 1):
            opt.add_param_group({"params": [p for p, j in zip(order, groups) if j == k]})
        load_checkpoint(Checkpoint(None, 0, canonical.entries_digest(entries), None, {},
                                   list(entries)), tp, opt)
        mark = tp.mark()
        loss = None
        for i, p in params.items():  # d/dp sum(p * c) = 1.0 * c = c, bit for bit
            term = g.sum(p * tp.const(np.asarray(grads[i])))
            loss = term if loss is None else loss + term
        tp.backward(loss)
        opt.step()
        trace = StepTrace(tp.dtype.name, 0, [], [], [], [], [])
        trace.add_update(tp, opt)
        after = canonical.entries_digest(store.entries(tp, opt, "recompute.update"))
        tp.reset_to(mark)
        return trace.update, after
    finally:
        tp.close()
