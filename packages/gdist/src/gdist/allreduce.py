"""One replica's share of a step: its microbatches, the tree nodes it owns, the root, the apply.

Written against two callbacks, so the same code runs under any transport: ``send(node, rank,
value)`` hands a value to the replica of that rank (True when it was copied out before the
call returned, so its arrays are free again; False when a send may still read them later),
``wait(node)`` blocks until the value of
``node`` sent to this replica arrives (or raises: an abort, a timeout). The tree is the fixed
pairwise tree over microbatch index (``gdist.tree``); a node is added by the owner of its left
child, so each right child whose owner differs travels once, to its parent's owner. At the
root the two children's owners swap their values when they differ and both add the root (the
same addition of the same operands: the same bits), so on two replicas the root travels
nowhere; the root's owner and that twin send it down a binomial tree over the other replicas,
and every replica applies it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from . import faults, tree

if TYPE_CHECKING:
    from .replica import Replica
    from .service import Plan

Send = Callable[[Any, int, Any], bool]
Wait = Callable[[Any], Any]


def leaves(rep: Replica, plan: Plan, me: int, parts: Mapping[int, Any],
           done: Callable[[int, Any], None]) -> None:
    """This replica's microbatches (in index order, or shuffled with ``plan.order_seed``),
    each handed to ``done(i, result)`` as soon as it is computed."""
    mine = sorted(parts)
    if plan.order_seed is not None:
        np.random.default_rng([plan.order_seed, plan.step, me]).shuffle(mine)
    for i in mine:
        faults.hit("leaf", plan.step)
        try:
            result = rep.leaf(plan.serial + i, parts[i])
        except Exception as e:
            e.gdist_microbatch = i  # the driver's note names it
            raise
        done(i, result)


def share(rep: Replica, plan: Plan, me: int, parts: Mapping[int, Any], send: Send,
          wait: Wait) -> dict[str, Any]:
    """The replica's whole share of a step with the tree on the workers (see the module
    docstring); returns {"loss", "steps", "seconds"} and, on check steps, "digest";
    "seconds" splits the share's time: leaves, tree additions, waiting, the apply."""
    k = plan.k
    owner, parent, root = tree.owners(k, plan.holders), tree.parents(k), tree.root(k)
    nodes = tree.plan(k)
    # the root's children: when another replica owns the right one, its owner (the twin)
    # also receives the left one and adds the root itself -- the same addition of the same
    # operands, so the same bits -- and the root travels to neither of the two
    rl, rr = nodes[-1][1:] if nodes else (root, root)
    twin = owner[rr] if owner[rr] != owner[rl] else None
    vals: dict[int, Any] = {}
    clock = Clock()

    sent: set[int] = set()  # nodes whose values a send may still read (not copied out yet)

    def sum_of(a: Any, b: Any, a_free: bool, b_free: bool) -> Any:
        """``a + b``, into an operand this replica made whose value no send still reads, when
        there is one (never into a received value)."""
        return clock.timed("adds", rep.add, a, b, a if a_free else b if b_free else None)

    def keep(node: int, value: Any) -> None:  # a value this replica made: kept or sent
        if node != root and owner[parent[node]] != me:
            if not send(node, owner[parent[node]], value):
                sent.add(node)
            if node == rr and me == twin:
                vals[node] = value
        else:
            vals[node] = value
            if node == rl and twin is not None:
                if not send(node, twin, value):
                    sent.add(node)

    leaves(rep, plan, me, parts, keep)
    clock.lap("leaves")
    for node, left, right in nodes:
        if owner[node] == me:
            a = vals.pop(left)
            b = vals.pop(right) if owner[right] == me else clock.timed("wait", wait, right)
            keep(node, sum_of(a, b, left not in sent, owner[right] == me and right not in sent))
    if me == twin:
        a = clock.timed("wait", wait, rl)
        vals[root] = sum_of(a, vals.pop(rr), False, rr not in sent)
    faults.hit("reduce", plan.step)
    first = [owner[root]] + ([twin] if twin is not None else [])
    ranks = first + [r for r in range(len(plan.addresses)) if r not in first]
    pos = ranks.index(me)
    value = vals.pop(root) if pos < len(first) else clock.timed("wait", wait, "root")
    for c in tree.broadcast_children(pos, len(ranks)):
        if c >= len(first):  # the twin (position 1) has the root already
            send("root", ranks[c], value)  # the root is only read from here on
    clock.lap()
    out: dict[str, Any] = {"loss": rep.apply(value, k, plan.lrs)}
    clock.lap("apply")
    faults.hit("apply", plan.step)
    if plan.check:
        out["digest"] = rep.digest()
    out["steps"] = rep.steps
    out["seconds"] = clock.spent
    return out


class Clock:
    """Seconds spent per part of a share (perf_counter laps and timed calls)."""

    def __init__(self) -> None:
        self.spent = {"leaves": 0.0, "adds": 0.0, "wait": 0.0, "apply": 0.0}
        self._t = time.perf_counter()

    def lap(self, what: str | None = None) -> None:
        """Charge the time since the last lap to ``what`` (None: to nothing)."""
        now = time.perf_counter()
        if what is not None:
            self.spent[what] += now - self._t
        self._t = now

    def timed(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its time charged to ``what``."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.spent[what] += time.perf_counter() - t0
            self._t = time.perf_counter()


def partial(rep: Replica, plan: Plan, me: int, parts: Mapping[int, Any]) -> dict[int, Any]:
    """With the tree on the driver: this replica's leaves, with every node whose whole subtree
    it holds already added (the driver adds the rest)."""
    vals: dict[int, Any] = {}
    leaves(rep, plan, me, parts, vals.__setitem__)
    full = {i: plan.holders[i] == me for i in range(plan.k)}
    for node, left, right in tree.plan(plan.k):
        full[node] = full[left] and full[right]
        if full[node]:  # both this replica's own: the sums into the left
            a = vals.pop(left)
            vals[node] = rep.add(a, vals.pop(right), a)
    return vals
