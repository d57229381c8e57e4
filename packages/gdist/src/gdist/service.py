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
import pickle
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from . import allreduce, heap, links, messages, shared, stats, waiting
from .replica import Replica

_RUNS: dict[str, Replica] = {}
_BOXES: dict[str, Mailbox] = {}
_EXEC: concurrent.futures.ThreadPoolExecutor | None = None  # the compute thread
_COMPUTE = threading.Lock()  # one replica computation at a time (the executor's, a link's)
_SERVER: links.Server | None = None  # this worker's link server (tcp:// workers)
_PEERS = links.Links(timeout=30.0)  # links to the other replicas' servers
_OUTBOX = shared.Outbox()  # this process's shared-memory values for peers on its machine
_INBOX = shared.Inbox()  # its mappings of theirs


def held() -> int:
    """Replicas this process holds."""
    return len(_RUNS)


class StepAborted(RuntimeError):
    """The driver aborted the step this replica was waiting in (a peer was lost)."""


class UnknownRun(RuntimeError):
    """This worker holds no replica of the run (it was restarted, or never had one)."""


class Mailbox:
    """Values sent to one replica during steps, keyed by (step, node); aborts per step.
    Filled from the event loop (Dask's comms) or a link's thread, waited on by the step's."""

    def __init__(self) -> None:
        self._vals: dict[tuple[int, Any], Any] = {}
        self._aborted: set[int] = set()
        self._cv = threading.Condition()

    def put(self, step: int, node: Any, value: Any) -> None:
        """A value for (step, node) arrived."""
        with self._cv:
            self._vals.setdefault((step, node), value)
            self._cv.notify_all()

    def wait(self, step: int, node: Any, timeout: float, spin: float = 0.0) -> Any:
        """The value for (step, node), once it arrives (StepAborted when the driver aborts
        the step first, TimeoutError after ``timeout`` seconds; an exception put in its place
        -- a value that could not be read -- is raised). ``spin``: seconds to poll for it
        first (the GIL let go between looks) before sleeping until it is put."""
        deadline = time.monotonic() + timeout
        stop = time.monotonic() + min(spin, timeout)
        while (step, node) not in self._vals and step not in self._aborted and \
                time.monotonic() < stop:
            time.sleep(0)  # lets the link thread that brings the value run
        with self._cv:
            while True:
                if (step, node) in self._vals:
                    value = self._vals.pop((step, node))
                    if isinstance(value, BaseException):
                        raise value
                    return value
                if step in self._aborted:
                    raise StepAborted(f"gdist: step {step} was aborted")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"gdist: step {step}: no value for tree node {node} "
                                       f"within {timeout} s (its owner is stalled or lost)")
                self._cv.wait(left)

    def aborted(self, step: int) -> bool:
        """Whether the driver aborted ``step``."""
        with self._cv:
            return step in self._aborted

    def abort(self, step: int) -> None:
        """Fail every wait of ``step`` (present and future)."""
        with self._cv:
            self._aborted.add(step)
            self._cv.notify_all()

    def forget(self, before: int) -> None:
        """Drop values and aborts of steps before ``before``."""
        with self._cv:
            self._vals = {k: v for k, v in self._vals.items() if k[0] >= before}
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
    links: tuple[tuple[str, int], ...] | None = None  # rank -> link address (None: Dask's)
    machines: tuple[str, ...] | None = None  # rank -> machine (``waiting.machine``), on links
    shared: bool = False  # values between replicas of one machine through shared memory

    def plain(self) -> list:
        """The fields as plain data (``gdist.messages``: msgpack, not pickle)."""
        return [self.step, self.tag, self.serial, self.k, list(self.holders),
                list(self.addresses), self.tree_on, self.check,
                None if self.lrs is None else list(self.lrs), self.order_seed, self.timeout,
                None if self.links is None else [list(a) for a in self.links],
                None if self.machines is None else list(self.machines), self.shared]

    @classmethod
    def of(cls, x: Plan | list | tuple) -> Plan:
        """A plan from itself or from its ``plain()`` form (a list, or the tuple Dask's msgpack
        reads it back as)."""
        if isinstance(x, Plan):
            return x
        (step, tag, serial, k, holders, addresses, tree_on, check, lrs, order_seed, timeout,
         links, machines, shared_) = x
        return cls(step, tag, serial, k, tuple(holders), tuple(addresses), tree_on, check,
                   None if lrs is None else tuple(lrs), order_seed, timeout,
                   None if links is None else tuple((str(h), int(p)) for h, p in links),
                   None if machines is None else tuple(str(m) for m in machines), bool(shared_))


class Service(WorkerPlugin):
    """The Dask worker plugin that serves gdist's replicas (see the module docstring)."""

    name = "gdist-replicas"
    idempotent = True  # registered once per cluster, whatever the number of trainers

    def setup(self, worker: Any) -> None:
        """Install the ``gdist`` handler on ``worker``, open its link server (``tcp://``
        workers: ``gdist.links``) and keep freed arrays for reuse (``gdist.heap``)."""
        global _EXEC, _SERVER
        self.worker = worker
        worker.handlers["gdist"] = self.gdist
        if _EXEC is None:
            heap.keep_freed_memory()
            shared.sweep()  # segments left by processes that died (killed workers)
            _EXEC = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gdist")
        host = links.tcp_host(getattr(worker, "address", None))
        if _SERVER is None and host is not None:
            _SERVER = links.Server(host, _on_link)

    def teardown(self, worker: Any) -> None:
        """Close the link server and the links to peers."""
        global _SERVER
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None
        _PEERS.close()
        _OUTBOX.close()
        _INBOX.close()

    async def gdist(self, call: str = "", run: str = "", payload: Any = None) -> Any:
        """Dispatch one request of the driver or a peer replica."""
        fn = _CALLS.get(call)
        if fn is None:
            raise ValueError(f"gdist: unknown request {call!r}")
        out = await fn(self.worker, run, **(payload or {}))
        return None if out is None else messages.wrap(out)


async def _compute(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in the compute thread (the event loop keeps serving messages), one
    replica computation at a time (``_COMPUTE``, shared with the links' steps)."""
    return await asyncio.get_running_loop().run_in_executor(_EXEC, _computing, fn, *args)


def _computing(fn: Any, *args: Any) -> Any:
    with _COMPUTE:
        return fn(*args)


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
            "pid": os.getpid(), "machine": waiting.machine(),
            "threads": waiting.compute_threads(defn.backend),
            "link": None if _SERVER is None else list(_SERVER.address)}


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
    _OUTBOX.drop(run)
    _INBOX.drop(run)


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
    """This replica's share of one step on Dask's comms (``_share``), run in the compute
    thread in one piece: sends leave through the event loop as soon as a value is made."""
    plan, parts = Plan.of(plan), messages.decode_parts(parts)
    loop = asyncio.get_running_loop()

    def post(node: Any, to: int, value: Any) -> None:  # on the event loop
        msg = {"step": plan.tag, "node": node, "value": value}
        task = asyncio.ensure_future(worker.rpc(plan.addresses[to]).gdist(
            call="deliver", run=run, payload=to_serialize(msg)))
        task.add_done_callback(_retrieved)  # a lost peer is the driver's to find

    def send(node: Any, to: int, value: Any) -> bool:  # from the compute thread
        loop.call_soon_threadsafe(post, node, to, value)
        return False  # the event loop serializes it later

    return await _compute(_share, run, plan, me, parts, send)


def _spin_for(plan: Plan, run: str, here: str) -> float:
    """Seconds a wait for a peer's value polls before it sleeps: ``waiting.SPAN`` where this
    machine's CPUs are at least the compute threads of the replicas on it (each one's core is
    its own; a wake-up from sleep costs 0.1-0.2 ms on the 2-core KVM host), else 0."""
    rep = _RUNS.get(run)
    if plan.machines is None or rep is None:
        return 0.0
    threads = waiting.compute_threads(rep.defn.backend)
    return waiting.SPAN if plan.machines.count(here) * threads <= waiting.cpus() else 0.0


def _share(run: str, plan: Plan, me: int, parts: dict, send: allreduce.Send,
           spin: float = 0.0) -> dict:
    """This replica's share of one step (``gdist.allreduce``; with the tree on the driver,
    its partial sums), whichever transport brought it: ``send`` carries values to peers,
    waits block on the mailbox until the value arrives (or the driver's abort); the mailbox
    forgets the step after. Runs with the compute lock held."""
    rep, box = _replica(run), _BOXES[run]
    if box.aborted(plan.tag):
        raise StepAborted(f"gdist: step {plan.step} was aborted")
    try:
        if plan.tree_on == "driver":
            return {"leaves": allreduce.partial(rep, plan, me, parts)}
        return allreduce.share(rep, plan, me, parts, send,
                               lambda node: box.wait(plan.tag, node, plan.timeout, spin))
    finally:
        box.forget(plan.tag)


def _on_link(msg: dict, reply: Any) -> None:
    """A message on a link (``gdist.links``, the link's own thread): a peer's tree value
    (into the mailbox), or the driver's step request, run here and answered on the link."""
    op, run = msg.get("op"), msg.get("run")
    if op == "deliver":
        box = _BOXES.get(run)
        if box is not None:
            if "shared" in msg:  # a peer on this machine: the value is in its segment
                try:
                    value = _INBOX.take(msg["shared"], copy=msg["node"] == "root")
                except shared.SharedValueLost as e:
                    value = e  # raised by the wait for it
            else:
                value = msg["value"]
            box.put(msg["step"], msg["node"], value)
        return
    if op == "ping":
        reply({"times": _link_pings(msg.get("to"), int(msg.get("n", 0)), msg.get("payload"))})
        return
    if op != "step":
        raise ValueError(f"gdist: unknown link message {op!r}")
    try:
        out: dict = {"ok": _step_on_link(run, Plan.of(msg["plan"]), msg["me"], msg["parts"])}
    except Exception as e:  # noqa: BLE001 (the driver decides: lost worker, abort, user error)
        out = {"error": _exception_bytes(e),
               "traceback": "".join(traceback.format_exception(e))}
    reply(out)


def _step_on_link(run: str, plan: Plan, me: int, parts: dict) -> dict:
    """This replica's share of one step (``_share``) in the link's thread: values for peers
    sent on links to their servers."""
    assert plan.links is not None
    here = waiting.machine()

    def send(node: Any, to: int, value: Any) -> bool:
        msg = {"op": "deliver", "run": run, "step": plan.tag, "node": node}
        try:
            if plan.shared and plan.machines is not None and plan.machines[to] == here and \
                    shared.available():
                try:
                    msg["shared"] = _OUTBOX.put(run, to, node, plan.tag, value)
                except OSError:  # /dev/shm too small for it: this value goes on the socket
                    msg["value"] = value
            else:
                msg["value"] = value
            _PEERS.send(plan.links[to], msg)
            stats.count("shared_values" if "shared" in msg else "socket_values")
        except OSError:
            pass  # a lost peer is the driver's to find
        return True  # copied into the segment or the socket before returning

    with _COMPUTE:
        return _share(run, plan, me, parts, send, _spin_for(plan, run, here))


def _link_pings(to: Any, n: int, payload: Any) -> list[float]:
    """Latency probe on links: ``n`` round trips to the link server at ``to`` carrying
    ``payload`` (seconds each); none without ``to`` (the round trip from the caller)."""
    out: list[float] = []
    if to is None or n <= 0:
        return out
    link = links.Link((str(to[0]), int(to[1])), 30.0)
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            link.send({"op": "ping", "payload": payload})
            link.recv()
            out.append(time.perf_counter() - t0)
    finally:
        link.close()
    return out


def _exception_bytes(e: BaseException) -> bytes:
    """``e`` pickled for the driver (as Dask sends a task's exception), or a RuntimeError
    with its text when it cannot be."""
    try:
        return pickle.dumps(e)
    except Exception:  # noqa: BLE001
        return pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))


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
