"""The facts the AE-step report states, counted from the run instead of typed by hand.

The problem's shape (layer sizes, minibatches, parameters), the nodes one tape step records and
the native calls (cpu backend) and serial matmuls (numpy backend) each phase of a step issues,
the FLOPs of those matmuls, the captured program's nodes and launches (``prog.stats()``) and its
native calls per step, and the cpu runtime's threading threshold read from its header.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import _paths
import gtensor
from _common import BATCH, captured_step, problem
from ae_engines import tape_parts
from gdemos import model
from gtape import CONST, PARAM

WARM = 3  # untimed steps first: the first step records the backward pass and the update
PHASES = ("forward", "backward", "optimizer", "read", "reset")


class _Phased:
    """A wrapper put in a function's place that counts its calls per current phase (and notes
    what ``note`` makes of each call's arguments, in a counted phase)."""

    def __init__(self, inner: Callable, note: Callable[..., Any] | None = None) -> None:
        self.inner, self.note = inner, note
        self.phase = "outside"
        self.calls: Counter[str] = Counter()
        self.notes: list[Any] = []

    def __call__(self, *a: Any, **k: Any) -> Any:
        self.calls[self.phase] += 1
        if self.note is not None and self.phase != "outside":
            self.notes.append(self.note(*a, **k))
        return self.inner(*a, **k)


def _tape_step_phases(backend: str, counter: _Phased) -> dict[str, Any]:
    """One float64 tape step (after ``WARM`` steps), ``counter`` told the phase as it goes."""
    tp, ps, opt, loss_of = tape_parts(backend, "float64")
    mark = tp.mark()

    def step(phased: bool) -> dict[str, Any]:
        def phase(name: str) -> None:
            if phased:
                counter.phase = name
        phase("forward")
        n0 = len(tp)
        loss = loss_of()
        nodes = tp.nodes()[n0:]
        phase("backward")
        tp.backward(loss)
        stats = tp.stats()
        phase("optimizer")
        opt.step()
        phase("read")
        float(tp.backend.to_numpy(tp.value(loss)))
        phase("reset")
        tp.reset_to(mark)
        counter.phase = "outside"
        return {"nodes": nodes, "stats": stats, "params": len(ps)}

    for _ in range(WARM):
        step(False)
    return step(True)


def problem_facts() -> dict[str, Any]:
    """Layer sizes, batch, minibatches and parameter count of the benchmark's problem."""
    batches, init = problem()
    sizes = model.layer_sizes(batches[0].shape[1], tuple(model.HIDDEN))
    return {"sizes": "-".join(str(s) for s in sizes), "batch": BATCH,
            "minibatches": len(batches), "params": len(init)}


def cpu_tape_facts() -> dict[str, Any]:
    """The cpu tape step's nodes per kind and native calls (``module.run``) per phase."""
    module = gtensor.backend("cpu").module
    counter = _Phased(module.run)
    module.run = counter
    try:
        step = _tape_step_phases("cpu", counter)
    finally:
        module.run = counter.inner
    nodes = step["nodes"]
    return {"forward_nodes": len(nodes),
            "forward_consts": sum(n.op is CONST for n in nodes),
            "forward_ops": sum(n.op is not CONST and n.op is not PARAM for n in nodes),
            "calls": {p: counter.calls[p] for p in PHASES},
            "total_calls": sum(counter.calls[p] for p in PHASES),
            "backward": {k: step["stats"][k] for k in ("vjps", "reductions", "accumulations",
                                                       "param_copies") if k in step["stats"]},
            "params": step["params"]}


def _matmul_flops(a: Any, b: Any, *_: Any, **__: Any) -> int:
    """2 m k n (times the batch dims) for one matmul's operands."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    lead = 1
    for d in a.shape[:-2]:
        lead *= d
    return 2 * lead * m * k * n


def numpy_matmul_facts() -> dict[str, Any]:
    """The numpy tape step's serial matmuls per phase and their FLOPs."""
    op = gtensor.REGISTRY["matmul"]
    counter = _Phased(op.reference, _matmul_flops)
    object.__setattr__(op, "reference", counter)  # Op is frozen: patched for the count only
    try:
        _tape_step_phases("numpy", counter)
    finally:
        object.__setattr__(op, "reference", counter.inner)
    return {"calls": {p: counter.calls[p] for p in PHASES if counter.calls[p]},
            "total": sum(counter.calls[p] for p in PHASES), "flops": sum(counter.notes)}


def captured_facts() -> dict[str, Any]:
    """The captured cpu program's ``stats()`` and its native calls per step."""
    step = captured_step("cpu")("float64")
    for _ in range(WARM):
        step()
    module = gtensor.backend("cpu").module
    counter = _Phased(module.run)
    counter.phase = "step"
    module.run = counter
    try:
        step()
    finally:
        module.run = counter.inner
    return {**step.program.stats(), "calls_per_step": counter.calls["step"]}


def parallel_work() -> str:
    """The multiply-adds above which a cpu kernel splits its rows across threads, from the
    runtime header (e.g. "4M"), or "?" when the header does not say."""
    header = (_paths.ROOT / "packages" / "gtensor" / "src" / "gtensor" / "runtime"
              / "cpu_runtime.h")
    found = re.search(r"PARALLEL_WORK\s*=\s*1LL\s*<<\s*(\d+)", header.read_text()) \
        if header.exists() else None
    if not found:
        return "?"
    work = 1 << int(found.group(1))
    return f"{work >> 20}M" if work % (1 << 20) == 0 else f"{work:,}"


def all_facts() -> dict[str, Any]:
    """Every counted fact, by source."""
    return {"problem": problem_facts(), "cpu": cpu_tape_facts(),
            "matmul": numpy_matmul_facts(), "captured": captured_facts(),
            "parallel_work": parallel_work()}
