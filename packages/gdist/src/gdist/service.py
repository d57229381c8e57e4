"""The worker side of ``DataParallel``: resident replicas, and the tree all-reduce between them.

A Dask worker plugin (``Service``) adds one handler, ``gdist``, to every worker of the cluster
(and to workers that join later). The driver and the replicas talk to it directly over Dask's
comms (``rpc``): the driver asks a worker to build a replica, to run a step, for a digest or a
state; during a step the replicas send each other partial sums and the root, worker to worker.
The scheduler sees none of it: no task per step, no parameters through the driver.

A step on one replica (``_step``) is its share of the plan the driver sent (who holds which
microbatch): ``gdist.allreduce.share``, run in the worker's compute thread in one piece (the
event loop keeps serving messages). Values for other replicas go out through the event loop as
soon as they are made; a value from another replica is waited for in the mailbox, which a
peer's ``deliver`` fills and the driver's ``abort`` (a peer was lost) empties with an error;
a wait gives up after ``timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from dataclasses import dataclass
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from . import allreduce, heap, messages
from .replica import Replica

_RUNS: dict[str, Replica] = {}
_BOXES: dict[str, Mailbox] = {}
_EXEC: concurrent.futures.ThreadPoolExecutor | None = None  # the compute thread


def held() -> int:
    """Replicas this process holds."""
    return len(_RUNS)


class StepAborted(RuntimeError):
    """The driver aborted the step this replica was waiting in (a peer was lost)."""


class UnknownRun(RuntimeError):
    """This worker holds no replica of the run (it was restarted, or never had one)."""


class Mailbox:
    """Values sent to one replica during steps, keyed by (step, node); aborts per step."""

    def __init__(self) -> None:
        self._futs: dict[tuple[int, Any], asyncio.Future] = {}
        self._aborted: set[int] = set()

    def _fut(self, key: tuple[int, Any]) -> asyncio.Future:
        fut = self._futs.get(key)
        if fut is None:
            fut = self._futs[key] = asyncio.get_running_loop().create_future()
            if key[0] in self._aborted:
                fut.set_exception(StepAborted(f"gdist: step {key[0]} was aborted"))
        return fut

    def put(self, step: int, node: Any, value: Any) -> None:
        """A value for (step, node) arrived."""
        fut = self._fut((step, node))
        if not fut.done():
            fut.set_result(value)

    async def get(self, step: int, node: Any, timeout: float) -> Any:
        """The value for (step, node), when it arrives (StepAborted, TimeoutError)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._fut((step, node))), timeout)
        except TimeoutError:
            raise TimeoutError(f"gdist: step {step}: no value for tree node {node} within "
                               f"{timeout} s (its owner is stalled or lost)") from None

    def aborted(self, step: int) -> bool:
        """Whether the driver aborted ``step``."""
        return step in self._aborted

    def abort(self, step: int) -> None:
        """Fail every wait of ``step`` (present and future)."""
        self._aborted.add(step)
        for key, fut in self._futs.items():
            if key[0] == step and not fut.done():
                fut.set_exception(StepAborted(f"gdist: step {step} was aborted"))

    def forget(self, before: int) -> None:
        """Drop values and aborts of steps before ``before``."""
        for key in [k for k in self._futs if k[0] < before]:
            fut = self._futs.pop(key)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: no "never retrieved" warnings
        self._aborted = {s for s in self._aborted if s >= before}


@dataclass(frozen=True)
class Plan:
    """One step as the driver sends it to every replica."""

    step: int  # the step's number (the driver's count; a retry keeps it)
    tag: int  # this attempt's id (mailbox keys, aborts): a retry gets a new one
    serial: int  # the run's microbatch serial of the step's leaf 0
    k: int  # microbatches
    holders: tuple[int, ...]  # leaf i's replica rank
    addresses: tuple[str, ...]  # rank -> worker address
    tree_on: str  # "workers": the replicas add the tree; "driver": the driver does
    check: bool  # return the params' digest after applying
    lrs: tuple[float, ...] | None  # per-group learning rates to set first (set_lr)
    order_seed: int | None  # shuffle the order a replica computes its leaves in (a test)
    timeout: float

    def plain(self) -> list:
        """The fields as plain data (``gdist.messages``: msgpack, not pickle)."""
        return [self.step, self.tag, self.serial, self.k, list(self.holders),
                list(self.addresses), self.tree_on, self.check,
                None if self.lrs is None else list(self.lrs), self.order_seed, self.timeout]

    @classmethod
    def of(cls, x: Plan | list | tuple) -> Plan:
        """A plan from itself or from its ``plain()`` form (a list, or the tuple Dask's msgpack
        reads it back as)."""
        if isinstance(x, Plan):
            return x
        step, tag, serial, k, holders, addresses, tree_on, check, lrs, order_seed, timeout = x
        return cls(step, tag, serial, k, tuple(holders), tuple(addresses), tree_on, check,
                   None if lrs is None else tuple(lrs), order_seed, timeout)


class Service(WorkerPlugin):
    """The Dask worker plugin that serves gdist's replicas (see the module docstring)."""

    name = "gdist-replicas"
    idempotent = True  # registered once per cluster, whatever the number of trainers

    def setup(self, worker: Any) -> None:
        """Install the ``gdist`` handler on ``worker`` (and keep freed arrays for reuse:
        ``gdist.heap``)."""
        global _EXEC
        self.worker = worker
        worker.handlers["gdist"] = self.gdist
        if _EXEC is None:
            heap.keep_freed_memory()
            _EXEC = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gdist")

    async def gdist(self, call: str = "", run: str = "", payload: Any = None) -> Any:
        """Dispatch one request of the driver or a peer replica."""
        fn = _CALLS.get(call)
        if fn is None:
            raise ValueError(f"gdist: unknown request {call!r}")
        out = await fn(self.worker, run, **(payload or {}))
        return None if out is None else messages.wrap(out)


async def _compute(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in the compute thread (the event loop keeps serving messages)."""
    return await asyncio.get_running_loop().run_in_executor(_EXEC, fn, *args)


def _replica(run: str) -> Replica:
    rep = _RUNS.get(run)
    if rep is None:
        raise UnknownRun(f"gdist: this worker (pid {os.getpid()}) holds no replica of run "
                         f"{run!r}")
    return rep


# ---------------------------------------------------------------- requests
async def _identity(worker: Any, run: str, backend: str) -> dict:
    from .identity import identity

    return await _compute(identity, backend)


async def _build(worker: Any, run: str, definition: bytes, checkpoint_every: int,
                 data: Any = None, history_from: str | None = None) -> dict:
    """Build the run's replica here (or rebuild one from a peer's history)."""
    import cloudpickle

    defn = cloudpickle.loads(definition)
    rep = await _compute(Replica, defn, checkpoint_every)
    if data is not None:
        rep.data = data
    if history_from is not None:
        saved, log = await worker.rpc(history_from).gdist(call="history", run=run)
        await _compute(rep.replay, saved, log)
    _RUNS[run] = rep
    _BOXES[run] = Mailbox()
    return {"digest": await _compute(rep.digest), "steps": rep.steps,
            "params": [[n, list(v.shape)] for n, v in rep.store.vars.items()],
            "pid": os.getpid()}


async def _history(worker: Any, run: str) -> Any:
    rep = _replica(run)
    return await _compute(rep.history)


async def _deliver(worker: Any, run: str, step: int, node: Any, value: Any) -> None:
    box = _BOXES.get(run)
    if box is not None:
        box.put(step, node, value)


async def _abort(worker: Any, run: str, step: int) -> dict:
    box = _BOXES.get(run)
    if box is not None:
        box.abort(step)
    rep = _RUNS.get(run)
    return {"steps": None if rep is None else rep.steps}


async def _ping(worker: Any, run: str, to: str | None = None, n: int = 0,
                payload: Any = None) -> list[float]:
    """Latency probe: with ``to``, ``n`` round trips to that worker's service carrying
    ``payload`` (seconds each); without, nothing (the round trip from the caller)."""
    out = []
    for _ in range(n if to else 0):
        t0 = time.perf_counter()
        await worker.rpc(to).gdist(call="ping", payload=to_serialize({"payload": payload}))
        out.append(time.perf_counter() - t0)
    return out


async def _drop(worker: Any, run: str) -> None:
    _RUNS.pop(run, None)
    _BOXES.pop(run, None)


async def _do(worker: Any, run: str, what: str, args: tuple = ()) -> Any:
    """A replica method run in the compute thread (digest, state_dict, load_state_dict, ...)."""
    rep = _replica(run)
    if what == "load_data":
        rep.data = args[0]
        return None
    if what == "last_loss":
        return rep.last_loss
    if what not in ("digest", "state_dict", "load_state_dict", "set_values", "values",
                    "grads", "optimizer"):
        raise ValueError(f"gdist: unknown replica request {what!r}")
    if what == "values":
        return await _compute(rep.model.values)
    if what == "grads":
        return await _compute(rep.store.grads)
    if what == "optimizer":
        return await _compute(lambda: {"t": rep.opt.t, "lrs": [
            g["lr"] for g in rep.opt.param_groups], "state": rep.opt.state_dict(params=False)})
    return await _compute(getattr(rep, what), *args)


async def _catch_up(worker: Any, run: str, source: str) -> dict:
    """Become the peer at ``source``: its last checkpoint, then the roots it applied since."""
    rep = _replica(run)
    saved, log = await worker.rpc(source).gdist(call="history", run=run)
    await _compute(rep.replay, saved, log)
    return {"steps": rep.steps, "digest": await _compute(rep.digest)}


async def _step(worker: Any, run: str, plan: Plan | list, me: int, parts: Any) -> dict:
    """This replica's share of one step (``gdist.allreduce``), run in the compute thread in
    one piece: sends leave through the event loop as soon as a value is made, waits block
    the compute thread until the event loop has the value (or the driver's abort)."""
    rep, box = _replica(run), _BOXES[run]
    plan, parts = Plan.of(plan), messages.decode_parts(parts)
    if box.aborted(plan.tag):
        raise StepAborted(f"gdist: step {plan.step} was aborted")
    loop = asyncio.get_running_loop()

    def post(node: Any, to: int, value: Any) -> None:  # on the event loop
        msg = {"step": plan.tag, "node": node, "value": value}
        task = asyncio.ensure_future(worker.rpc(plan.addresses[to]).gdist(
            call="deliver", run=run, payload=to_serialize(msg)))
        task.add_done_callback(_retrieved)  # a lost peer is the driver's to find

    def send(node: Any, to: int, value: Any) -> None:  # from the compute thread
        loop.call_soon_threadsafe(post, node, to, value)

    def wait(node: Any) -> Any:  # from the compute thread
        return asyncio.run_coroutine_threadsafe(box.get(plan.tag, node, plan.timeout),
                                                loop).result()

    try:
        if plan.tree_on == "driver":
            return {"leaves": await _compute(allreduce.partial, rep, plan, me, parts)}
        return await _compute(allreduce.share, rep, plan, me, parts, send, wait)
    finally:
        box.forget(plan.tag)


def _retrieved(task: asyncio.Future) -> None:
    """Done callback of a send: its exception retrieved (the driver handles lost peers)."""
    if not task.cancelled():
        task.exception()


async def _apply(worker: Any, run: str, step: int, root: Any, k: int, lrs: Any,
                 check: bool) -> dict:
    """With the tree on the driver: apply the root it sends."""
    rep = _replica(run)
    def apply() -> dict:
        out = {"loss": rep.apply(root, k, lrs)}
        if check:
            out["digest"] = rep.digest()
        out["steps"] = rep.steps
        return out

    return await _compute(apply)


_CALLS = {"ping": _ping, "identity": _identity, "build": _build, "history": _history,
          "deliver": _deliver, "abort": _abort, "drop": _drop, "do": _do, "catch_up": _catch_up,
          "step": _step, "apply": _apply}
