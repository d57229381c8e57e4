"""Shared helpers of the gverify tests: a drill probe and run-log readers."""

from __future__ import annotations

import json

from gverify import faults, trace_step


class Probe:
    """A probe for ``gverify.example.train``: one fault at step ``k`` and a trace at step
    ``trace_at`` (forward + backward, and the update)."""

    def __init__(self, k=-1, node=0, phase="forward", trace_at=-1, ulps=1, state=None):
        self.k, self.node, self.phase, self.trace_at = k, node, phase, trace_at
        self.ulps, self.state = ulps, state
        self.trace = None

    def forward(self, step, tp, loss):
        if step == self.k and self.phase in ("forward", "backward"):
            faults.perturb(tp, self.node, self.ulps, self.phase)

    def backward(self, step, tp, loss):
        if step == self.trace_at:
            self.trace = trace_step(tp, loss, meta={"step": step})

    def update(self, step, tp, opt):
        if step == self.k and self.phase == "update":
            faults.perturb(tp, self.node, self.ulps, "update")
        if step == self.k and self.phase == "state":
            faults.perturb_state(opt, self.state, self.ulps)
        if step == self.trace_at:
            self.trace.add_update(tp, opt)


def lines(path):
    """The step lines of a run log as (step, loss_bits, digest) tuples."""
    rows = [json.loads(s) for s in open(path).read().splitlines()[1:]]
    return [(r["step"], r["loss_bits"], r["digest"]) for r in rows]
