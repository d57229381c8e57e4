"""The driver side of ``DataParallel``: start the replicas, run steps, check them, recover.

``Replicas`` holds one replica per worker of a Dask cluster (``gdist.service`` on the worker).
It checks every worker's identity against the driver's (Python, numpy, Dask, the exact package
sources, the kernel source), builds the replicas and compares their first digests (a factory
that is not deterministic is refused), then runs steps: one request per replica carrying its
microbatches (rows, or row indices into the resident data) and the step's plan; the replicas
do the rest between themselves. Every ``check_every`` steps the replicas return their params'
digest; a mismatch stops the run, naming the step and the worker.

A worker lost during a step (its request fails, or a peer could not reach it) aborts the step
on the others. The survivors are brought to the same committed step (a survivor that did not
apply a root another applied becomes that one: its checkpoint, then its log), a replica is
rebuilt on each worker that joined since (the same way), and the step is run again if no
replica had applied it -- with another placement, which changes no bit.
"""

from __future__ import annotations

import asyncio
import pickle
import selectors
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from distributed.core import ConnectionPool

from . import identity as ident
from . import links, messages, tree, waiting
from .definition import Definition
from .replica import add
from .service import Plan, Service, StepAborted, UnknownRun

TREE_ON = ("workers", "driver")
TRANSPORTS = ("auto", "direct", "dask")


class ReplicaMismatch(RuntimeError):
    """Replicas that applied the same steps hold different parameters (a perturbed replica,
    or workers that do not compute alike)."""


class WorkerRefused(RuntimeError):
    """A worker whose environment differs from the driver's (package sources, versions)."""


def _reply(msg: dict) -> Any:
    """A replica's answer on a link: its result, or the exception it raised."""
    if "ok" in msg:
        return msg["ok"]
    try:
        e = pickle.loads(msg["error"])
    except Exception as bad:  # noqa: BLE001
        e = RuntimeError(f"gdist: a replica failed and its exception cannot be read: {bad}")
    if not isinstance(e, BaseException):
        e = RuntimeError(repr(e))
    if msg.get("traceback"):
        e.add_note("the replica's traceback:\n" + msg["traceback"].rstrip())
    return e


def _lost(e: BaseException) -> bool:
    """Whether a request failed because its worker is gone (not because of the request)."""
    return isinstance(e, (OSError, UnknownRun)) and not isinstance(e, TimeoutError)


class Replicas:
    """One replica of ``defn`` per worker of ``client``'s cluster (see the module docstring)."""

    def __init__(self, client: Any, defn: Definition, *, workers: Sequence[str] | None,
                 check_every: int, checkpoint_every: int, timeout: float,
                 replace_wait: float, connect_timeout: float, data: dict | None = None,
                 transport: str = "auto", reply_wait: str = "auto",
                 shared_memory: bool = True) -> None:
        self.client, self.defn, self.blob = client, defn, defn.remote()
        self.connect_timeout = connect_timeout
        self.transport = transport
        self.shared_memory = shared_memory
        self._pool: ConnectionPool | None = None
        self.links: dict[str, tuple[str, int] | None] = {}  # worker -> its link server
        self.hosts: dict[str, tuple[str, int]] = {}  # worker -> (machine, compute threads)
        self._wait = waiting.ReplyWait(reply_wait)
        self._links = links.Links(connect_timeout)
        self.run = uuid.uuid4().hex[:16]
        self.check_every, self.checkpoint_every = check_every, checkpoint_every
        self.timeout, self.replace_wait = timeout, replace_wait
        self.data = data
        self.tag = 0  # attempts so far (each step attempt's mailbox id)
        self.last: dict[str, Any] = {}  # per worker: the last step's seconds by part
        self.failed: str | None = None  # why the run stopped (a digest mismatch)
        client.register_plugin(Service(), name=Service.name)
        known = sorted(client.nthreads())
        addrs = list(workers) if workers is not None else known
        unknown = [a for a in addrs if a not in known]
        if not addrs or unknown:
            raise ValueError(f"gdist.DataParallel: workers {unknown or addrs!r} are not "
                             f"workers of the cluster; expected addresses among {known}")
        self._check_identities(addrs)
        self.addresses: list[str] = []
        built = self.sync(self._build_all, addrs)
        pids: dict[int, str] = {}
        for a, b in zip(addrs, built):
            if b["pid"] in pids:  # one replica per process: they would share its state
                self.addresses = addrs
                self.close()
                raise ValueError(f"gdist.DataParallel: the workers {pids[b['pid']]} and {a} "
                                 f"are one process (pid {b['pid']}); a replica needs a process "
                                 "of its own (LocalCluster(processes=True), or dask worker "
                                 "processes)")
            pids[b["pid"]] = a
        digests = {a: b["digest"] for a, b in zip(addrs, built)}
        if len(set(digests.values())) > 1:
            self.addresses = addrs
            self.close()
            first = addrs[0]
            other = next(a for a in addrs if digests[a] != digests[first])
            raise ValueError(
                "gdist.DataParallel: the replicas' first digests differ (replica on "
                f"{first}: {digests[first][:16]}, on {other}: {digests[other][:16]}): the "
                "model factory is not deterministic (draw from the tape's keys, or a seeded "
                "generator, not from global random state)")
        self.addresses = addrs
        self.params = built[0]["params"]
        if transport == "direct" and not self.direct:
            self.close()
            raise ValueError("gdist.DataParallel: transport='direct' needs tcp:// workers "
                             f"(direct links); the workers are {addrs}")

    # ---------------------------------------------------------------- plumbing
    def sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run coroutine function ``fn(*args, **kwargs)`` on the client's event loop."""
        return self.client.sync(fn, *args, **kwargs)

    async def call(self, addr: str, call: str, **payload: Any) -> Any:
        """One request to the gdist service of the worker at ``addr`` (direct, not through
        the scheduler; a worker that does not answer the connection within
        ``connect_timeout`` seconds counts as lost)."""
        if self._pool is None:
            self._pool = ConnectionPool(limit=256, deserialize=True, timeout=self.connect_timeout,
                                        connection_args=self.client.connection_args)
            await self._pool.start()
        return await self._pool(addr).gdist(call=call, run=self.run,
                                            payload=messages.wrap(payload))

    def ping(self, addr: str, n: int, to: str | None = None, payload: Any = None
             ) -> list[float]:
        """Round-trip seconds on the way a step's messages travel (links when ``direct``,
        else Dask's comms): ``n`` empty ones from the driver to the replica at ``addr``, or
        with ``to``, ``n`` from that replica to the one at ``to`` carrying ``payload``."""
        if not self.direct:
            if to is not None:
                return self.sync(self.call, addr, "ping", to=to, n=n, payload=payload)
            return [self._timed(lambda: self.sync(self.call, addr, "ping")) for _ in range(n)]
        link = self._links.get(self.links[addr])
        if to is not None:
            link.send({"op": "ping", "to": list(self.links[to]), "n": n, "payload": payload})
            return list(link.recv()["times"])
        return [self._timed(lambda: link.send({"op": "ping"}) or link.recv()) for _ in range(n)]

    @staticmethod
    def _timed(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def ask(self, what: str, *args: Any, rank: int = 0) -> Any:
        """A replica method's result (digest, values, state_dict, ...) from replica ``rank``."""
        return self.sync(self.call, self.addresses[rank], "do", what=what, args=args)

    def tell(self, what: str, *args: Any) -> None:
        """A replica method run on every replica (load_state_dict, set_values, load_data)."""

        async def all_() -> None:
            await asyncio.gather(*(self.call(a, "do", what=what, args=args)
                                   for a in self.addresses))

        self.sync(all_)

    @property
    def direct(self) -> bool:
        """Whether steps travel on direct links (every replica has one, transport allows)."""
        return self.transport != "dask" and all(self.links.get(a) for a in self.addresses)

    def close(self) -> None:
        """Drop the replicas on their workers (best effort)."""
        self._links.close()

        async def drop() -> None:
            await asyncio.gather(*(self.call(a, "drop") for a in self.addresses),
                                 return_exceptions=True)
            if self._pool is not None:
                await self._pool.close()
                self._pool = None

        if getattr(self.client, "status", "") == "running":
            self.sync(drop)
        self.addresses = []

    # ---------------------------------------------------------------- start
    def _check_identities(self, addrs: list[str]) -> None:
        """Every worker's identity equal to the driver's, or WorkerRefused naming them."""
        mine = ident.identity(self.defn.backend)

        async def all_() -> list:
            return await asyncio.gather(*(self.call(a, "identity", backend=self.defn.backend)
                                          for a in addrs))

        for addr, theirs in zip(addrs, self.sync(all_)):
            diff = ident.differences(mine, theirs)
            if diff:
                raise WorkerRefused(f"gdist.DataParallel: the worker at {addr} does not run "
                                    f"what the driver runs ({'; '.join(diff)}); install the "
                                    "same packages there (or leave it out: workers=[...])")

    async def _build_all(self, addrs: list[str]) -> list[dict]:
        return await asyncio.gather(*(self._build(a) for a in addrs))

    async def _build(self, addr: str, history_from: str | None = None) -> dict:
        got = await self.call(addr, "build", definition=self.blob,
                              checkpoint_every=self.checkpoint_every, data=self.data,
                              history_from=history_from)
        link = got.get("link")
        self.links[addr] = None if link is None else (str(link[0]), int(link[1]))
        self.hosts[addr] = (str(got.get("machine", "")), int(got.get("threads", 1)))
        return got

    # ---------------------------------------------------------------- steps
    def step(self, step: int, serial: int, parts: list[Any], lrs: Sequence[float] | None,
             placement: Callable[[int, list[str]], str] | None, tree_on: str,
             order_seed: int | None) -> float:
        """Run step ``step`` (microbatches ``parts``, the first of serial ``serial``) on the
        replicas; the batch loss. Lost workers are recovered from (see the module docstring);
        a loss_fn that raises surfaces here, the step not applied."""
        if self.failed:
            raise ReplicaMismatch(f"gdist.DataParallel: the run stopped: {self.failed}")
        k = len(parts)
        check = bool(self.check_every) and (step + 1) % self.check_every == 0
        for _ in range(4):  # attempts: each recovery may lose another worker
            holders = self._holders(k, placement)
            self.tag += 1
            direct = self.direct and tree_on == "workers"
            plan = Plan(step, self.tag, serial, k, tuple(holders), tuple(self.addresses),
                        tree_on, check, None if lrs is None else tuple(lrs), order_seed,
                        self.timeout,
                        tuple(self.links[a] for a in self.addresses) if direct else None,
                        self._machines() if direct else None,
                        direct and self.shared_memory)
            results = (self._attempt_on_links(plan, parts) if direct
                       else self.sync(self._attempt, plan, parts))
            errors = {r: e for r, e in results.items() if isinstance(e, BaseException)}
            lost = [r for r, e in errors.items() if _lost(e)]
            user = [e for e in errors.values()
                    if not _lost(e) and not isinstance(e, StepAborted)]
            if user and not lost:
                raise user[0]
            if not errors:
                out = results[holders[0] if tree_on == "workers" else 0]
                if check:
                    self._compare(step, {r: v["digest"] for r, v in results.items()})
                self.last = {self.addresses[r]: v.get("seconds") for r, v in results.items()}
                return out["loss"]
            loss = self.sync(self._recover, step, lost)
            if loss is not None:
                return loss
        raise RuntimeError(f"gdist.DataParallel.step: step {step} failed 4 times in a row "
                           "(workers kept getting lost); the step was not applied")

    def _holders(self, k: int, placement: Callable[[int, list[str]], str] | None
                 ) -> list[int]:
        """Leaf i's replica rank: ``placement``'s choice, or contiguous blocks."""
        if placement is None:
            return tree.contiguous(k, len(self.addresses))
        ws = sorted(self.addresses)
        out = []
        for i in range(k):
            addr = placement(i, ws)
            if addr not in self.addresses:
                raise ValueError(f"gdist.DataParallel.step: placement({i}, workers) returned "
                                 f"{addr!r}; expected one of {ws}")
            out.append(self.addresses.index(addr))
        return out

    async def _attempt(self, plan: Plan, parts: list[Any]) -> dict[int, Any]:
        """One attempt of a step: every replica's result or exception, by rank; the first
        failure aborts the step on the others."""
        n = len(plan.addresses)
        mine: dict[int, dict[int, Any]] = {r: {} for r in range(n)}
        for i, r in enumerate(plan.holders):
            mine[r][i] = parts[i]
        wire = plan.plain()
        tasks = {asyncio.ensure_future(self.call(a, "step", plan=wire, me=r,
                                                 parts=messages.encode_parts(mine[r]))): r
                 for r, a in enumerate(plan.addresses)}
        results: dict[int, Any] = {}
        aborted = False
        pending = set(tasks)
        deadline = time.monotonic() + plan.timeout + 60
        while pending:
            done, pending = await asyncio.wait(pending, timeout=max(0.0, deadline -
                                                                    time.monotonic()),
                                               return_when=asyncio.FIRST_EXCEPTION)
            if not done:  # nothing came back in time: give up on the others
                for t in pending:
                    t.cancel()
                    results[tasks[t]] = TimeoutError(
                        f"gdist: step {plan.step}: no answer from {plan.addresses[tasks[t]]} "
                        f"within {plan.timeout + 60:.0f} s")
                break
            for t in done:
                e = t.exception()
                results[tasks[t]] = e if e is not None else t.result()
            if not aborted and any(isinstance(v, BaseException) for v in results.values()):
                aborted = True
                await self._abort(plan, [plan.addresses[tasks[t]] for t in pending])
        if plan.tree_on == "driver" and len(results) == n and not any(
                isinstance(v, BaseException) for v in results.values()):
            return await self._driver_tree(plan, results)
        return results

    def _machines(self) -> tuple[str, ...]:
        """Each replica's machine (``waiting.machine``): values between replicas of one
        machine go through shared memory (``gdist.shared``), and a replica's waits poll where
        its machine has a core for each."""
        return tuple(self.hosts.get(a, ("", 1))[0] for a in self.addresses)

    def _attempt_on_links(self, plan: Plan, parts: list[Any]) -> dict[int, Any]:
        """``_attempt`` over the direct links: every request sent, the replies read as they
        come (a closed link: its worker lost); the first failure aborts the step on the
        others (through Dask's comms, which reach a replica busy in its step)."""
        n = len(plan.addresses)
        mine: dict[int, dict[int, Any]] = {r: {} for r in range(n)}
        for i, r in enumerate(plan.holders):
            mine[r][i] = parts[i]
        wire_plan = plan.plain()
        results: dict[int, Any] = {}
        asked: dict[Any, tuple[int, Any]] = {}
        self._wait.place(self.hosts.get(a, ("", 1)) for a in plan.addresses)
        sent = time.perf_counter()
        for r, a in enumerate(plan.addresses):
            try:
                link = self._links.get(self.links[a])
                link.send({"op": "step", "run": self.run, "plan": wire_plan, "me": r,
                           "parts": mine[r]})
                asked[link.sock] = (r, link)
            except OSError as e:
                self._links.drop(self.links[a])
                results[r] = e
        deadline = time.monotonic() + plan.timeout + 60
        aborted = False
        with selectors.DefaultSelector() as sel:
            for sock, (r, link) in asked.items():
                sel.register(sock, selectors.EVENT_READ, (r, link))
            while len(results) < n:
                if not aborted and any(isinstance(v, BaseException) for v in results.values()):
                    # a failure: the others stop waiting on it
                    aborted = True
                    others = [plan.addresses[r] for r, _ in asked.values() if r not in results]
                    self.sync(self._abort, plan, others)
                events = self._wait.select(sel, sent, deadline)
                if not events:  # nothing came back in time: give up on the others
                    for r, link in asked.values():
                        if r not in results:
                            self._links.drop(link.address)  # a late reply must not stay
                            results[r] = TimeoutError(
                                f"gdist: step {plan.step}: no answer from "
                                f"{plan.addresses[r]} within {plan.timeout + 60:.0f} s")
                    break
                for key, _ in events:
                    r, link = key.data
                    sel.unregister(key.fileobj)
                    try:
                        results[r] = _reply(link.recv())
                    except OSError as e:
                        self._links.drop(link.address)
                        results[r] = e
        if not any(isinstance(v, BaseException) for v in results.values()):
            self._wait.took(time.perf_counter() - sent)
        return results

    async def _abort(self, plan: Plan, addrs: list[str]) -> None:
        """Abort ``plan``'s attempt on the replicas at ``addrs`` (failures ignored)."""
        await asyncio.gather(*(self.call(a, "abort", step=plan.tag) for a in addrs),
                             return_exceptions=True)

    async def _driver_tree(self, plan: Plan, results: dict[int, Any]) -> dict[int, Any]:
        """With the tree on the driver: add what the replicas left, send every one the root."""
        vals: dict[int, Any] = {}
        for r in results.values():
            vals.update(r["leaves"])
        k = plan.k
        for node, left, right in tree.plan(k):
            if node not in vals:
                vals[node] = add(vals.pop(left), vals.pop(right))
            else:
                vals.pop(left, None)
                vals.pop(right, None)
        root = vals[tree.root(k)]
        calls = [self.call(a, "apply", step=plan.step, root=root, k=k, lrs=plan.lrs,
                           check=plan.check) for a in plan.addresses]
        got = await asyncio.gather(*calls, return_exceptions=True)
        return dict(enumerate(got))

    def _compare(self, step: int, digests: dict[int, str]) -> None:
        """Every replica's digest equal, or the run stops (ReplicaMismatch naming them)."""
        ref = digests[0]
        bad = [r for r, d in digests.items() if d != ref]
        if bad:
            self.failed = (f"at step {step} the replica on {self.addresses[bad[0]]} has params "
                           f"digest {digests[bad[0]][:16]}, the replica on "
                           f"{self.addresses[0]} {ref[:16]}: the replicas diverged")
            raise ReplicaMismatch(f"gdist.DataParallel: {self.failed}")

    # ---------------------------------------------------------------- recovery
    async def _recover(self, step: int, lost: list[int]) -> float | None:
        """After a failed attempt: the survivors made equal, lost replicas replaced where the
        cluster has new workers; the step's loss if it had committed, else None (run again)."""
        if not self.checkpoint_every:
            raise RuntimeError(f"gdist.DataParallel.step: a worker was lost in step {step} and "
                               "the replicas keep no history (checkpoint_every=0): resume from "
                               "a checkpoint (trainer.load) with a new trainer")
        gone = {self.addresses[r] for r in lost}
        alive = [a for a in self.addresses if a not in gone]
        steps = {}
        for a in alive:  # a survivor may have been lost too: ask each
            try:
                steps[a] = (await self.call(a, "abort", step=self.tag))["steps"]
            except Exception as e:  # noqa: BLE001 (any failure: treat it as lost)
                if not _lost(e):
                    raise
        alive = [a for a in alive if steps.get(a) is not None]
        if not alive:
            raise RuntimeError(f"gdist.DataParallel.step: every replica was lost in step "
                               f"{step}; resume from a checkpoint (trainer.load) with a new "
                               "trainer")
        top = max(steps[a] for a in alive)
        source = next(a for a in alive if steps[a] == top)
        want = (await self.call(source, "do", what="digest"))
        for a in alive:
            if steps[a] < top:
                got = await self.call(a, "catch_up", source=source)
                if got["digest"] != want:
                    raise ReplicaMismatch(f"gdist.DataParallel: the replica on {a}, brought "
                                          f"to step {top} from {source}'s history, does not "
                                          "have its digest")
        self.addresses = alive + await self._replacements(alive, source, want, len(gone))
        if top > step:  # the step committed: its loss is in the source's history
            return await self.call(source, "do", what="last_loss")
        return None

    async def _replacements(self, alive: list[str], source: str, want: str, n: int
                            ) -> list[str]:
        """Up to ``n`` new replicas on workers without one (waiting up to ``replace_wait`` s for
        the cluster to bring workers back), each rebuilt from ``source``'s history."""
        deadline = time.monotonic() + self.replace_wait
        new: list[str] = []
        while True:
            free = [a for a in sorted(await self.client.scheduler.ncores())
                    if a not in alive and a not in new]
            for a in free[:n - len(new)]:
                try:
                    got = await self._build(a, history_from=source)
                except Exception as e:  # noqa: BLE001
                    if _lost(e):
                        continue
                    raise
                if got["digest"] != want:
                    raise ReplicaMismatch(f"gdist.DataParallel: the replica rebuilt on {a} "
                                          f"from {source}'s history does not have its digest")
                new.append(a)
            if len(new) >= n or time.monotonic() > deadline:
                return new
            await asyncio.sleep(0.2)
