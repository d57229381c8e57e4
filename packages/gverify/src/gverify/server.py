"""The trainer service (``gverify serve RUN_DIR``): an aiohttp server answering the auditor's
queries about one committed run, every answer provable against the commitment.

Routes (GET; JSON unless marked "bytes": ``gverify.wire`` array messages):

- ``/v1/commitment``: the commitment (``commit.commitment``);
- ``/v1/steps/tree?lo=&hi=``: the two children of node ``[lo, hi)`` of the step-record tree;
- ``/v1/steps/leaves?ids=a,b``: records with their membership proofs (at most 64);
- ``/v1/steps/{k}/state`` (bytes): the state after step k (its digest: record k's ``state``);
- ``/v1/steps/{k}/batch`` (bytes): step k's batch (its digest: record k's ``batch``);
- ``/v1/steps/{k}/trace``: step k's node-trace root and leaf count (computed on first ask);
- ``/v1/steps/{k}/trace/tree?lo=&hi=``, ``/v1/steps/{k}/trace/leaves?ids=``: as above, over
  the trace's leaves;
- ``/v1/steps/{k}/trace/graph``: the step's graph (its digest: the trace's ``graph`` leaf);
- ``/v1/steps/{k}/trace/arrays/{j}`` (bytes): the array behind trace leaf j (a value, a
  gradient, an updated buffer).

Every number in a path or query is parsed as a bounded int (400 otherwise); files are read
only inside the run directory (``commit.confined``); request bodies are refused; the work of
a query (regenerating a state or a trace) runs on one worker thread, in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from . import commit, merkle, wire

MAX_IDS = 64
JSON = "application/json"


def _error(cls: type, message: str) -> web.HTTPException:
    return cls(text=json.dumps({"error": message}), content_type=JSON)


def _int(text: str | None, name: str, low: int, high: int) -> int:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 12:
        raise _error(web.HTTPBadRequest, f"{name} is {text!r}; expected an int in "
                                         f"[{low}, {high}]")
    v = int(text)
    if not low <= v <= high:
        raise _error(web.HTTPNotFound, f"{name} is {v}; expected an int in [{low}, {high}]")
    return v


def _ids(text: str | None, n: int) -> list[int]:
    parts = (text or "").split(",")
    if not text or len(parts) > MAX_IDS:
        raise _error(web.HTTPBadRequest, f"ids is {text!r}; expected 1 to {MAX_IDS} "
                                         "comma-separated leaf indices")
    return [_int(p, "ids[]", 0, n - 1) for p in parts]


def _children(tree: merkle.Tree, request: web.Request) -> dict:
    lo = _int(request.query.get("lo"), "lo", 0, tree.n)
    hi = _int(request.query.get("hi"), "hi", 0, tree.n)
    if hi - lo < 2 or not merkle.is_node(lo, hi, tree.n):
        raise _error(web.HTTPBadRequest, f"[{lo}, {hi}) is not an inner node of the tree of "
                                         f"{tree.n} leaves")
    (a, b, ha), (c, d, hb) = tree.children(lo, hi)
    return {"lo": lo, "hi": hi, "left": {"lo": a, "hi": b, "hash": ha.hex()},
            "right": {"lo": c, "hi": d, "hash": hb.hex()}}


def _leaves(tree: merkle.Tree, leaves: list[dict], ids: list[int],
            swap: Callable[[int], dict | None] | None = None) -> dict:
    items = []
    for i in ids:
        leaf = (swap(i) if swap is not None else None) or leaves[i]
        items.append({"index": i, "leaf": leaf, "path": [h.hex() for h in tree.path(i)]})
    return {"leaves": tree.n, "items": items}


class TrainerService:
    """The routes over one run directory (``make_app``)."""

    def __init__(self, run: commit.RunDir) -> None:
        self.run = run
        # one worker: the run's sessions are used from that thread only, queries in order
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gverify-serve")

    async def _work(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def _step(self, request: web.Request, low: int = 0) -> int:
        return _int(request.match_info["k"], "k", low, self.run.steps)

    async def commitment(self, request: web.Request) -> web.Response:
        """The commitment."""
        return web.json_response(self.run.commitment)

    async def steps_tree(self, request: web.Request) -> web.Response:
        """Children of a node of the step-record tree."""
        return web.json_response(_children(self.run.tree, request))

    async def steps_leaves(self, request: web.Request) -> web.Response:
        """Step records with proofs."""
        run = self.run
        ids = _ids(request.query.get("ids"), run.tree.n)
        swap = None
        if run.drill is not None and run.drill.kind == "inconsistent":
            lie = run.drill.step
            cached: dict[int, dict] = {}
            if lie in ids:
                cached[lie] = await self._work(run.honest_record, lie)
            swap = cached.get
        return web.json_response(_leaves(run.tree, run.records, ids, swap))

    async def state(self, request: web.Request) -> web.Response:
        """The state after step k (bytes)."""
        k = self._step(request)
        ents = await self._work(self.run.state_at, k)
        return web.Response(body=wire.pack(ents), content_type="application/octet-stream")

    async def batch(self, request: web.Request) -> web.Response:
        """Step k's batch (bytes)."""
        k = self._step(request, 1)
        ents = await self._work(self.run.batch_at, k)
        return web.Response(body=wire.pack(ents), content_type="application/octet-stream")

    async def _trace(self, request: web.Request) -> Any:
        return await self._work(self.run.trace_at, self._step(request, 1))

    async def trace(self, request: web.Request) -> web.Response:
        """Step k's trace root."""
        t = await self._trace(request)
        return web.json_response({"step": t.step, "root": t.root, "leaves": t.tree.n})

    async def trace_tree(self, request: web.Request) -> web.Response:
        """Children of a node of step k's trace tree."""
        t = await self._trace(request)
        return web.json_response(_children(t.tree, request))

    async def trace_leaves(self, request: web.Request) -> web.Response:
        """Trace leaves with proofs."""
        t = await self._trace(request)
        return web.json_response(_leaves(t.tree, t.leaves, _ids(request.query.get("ids"),
                                                                 t.tree.n)))

    async def trace_graph(self, request: web.Request) -> web.Response:
        """Step k's graph."""
        t = await self._trace(request)
        return web.json_response(t.graph)

    async def trace_array(self, request: web.Request) -> web.Response:
        """The array behind one trace leaf (bytes)."""
        t = await self._trace(request)
        j = _int(request.match_info["j"], "j", 0, t.tree.n - 1)
        if j not in t.arrays:
            raise _error(web.HTTPNotFound, f"trace leaf {j} ({t.leaves[j]['kind']}) has no "
                                           "array")
        return web.Response(body=wire.pack_array(t.arrays[j]),
                            content_type="application/octet-stream")


@web.middleware
async def _errors(request: web.Request, handler: Callable) -> web.StreamResponse:
    text = json.dumps({"error": "only GET without a body is served"})
    if request.method != "GET":
        raise web.HTTPMethodNotAllowed(request.method, ["GET"], text=text, content_type=JSON)
    if request.can_read_body:
        raise web.HTTPRequestEntityTooLarge(0, request.content_length or 0, text=text,
                                            content_type=JSON)
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (commit.RunDirError, OSError, ValueError) as e:
        raise _error(web.HTTPInternalServerError, f"{type(e).__name__}: {e}") from None


def make_app(run_dir: Any, middlewares: tuple = ()) -> web.Application:
    """The aiohttp application serving ``run_dir`` (a path or a ``commit.RunDir``);
    ``middlewares`` run outside the service's own (tests: a misbehaving trainer)."""
    run = run_dir if isinstance(run_dir, commit.RunDir) else commit.RunDir(run_dir)
    svc = TrainerService(run)
    app = web.Application(middlewares=[*middlewares, _errors], client_max_size=1024)
    app.router.add_get("/v1/commitment", svc.commitment)
    app.router.add_get("/v1/steps/tree", svc.steps_tree)
    app.router.add_get("/v1/steps/leaves", svc.steps_leaves)
    app.router.add_get("/v1/steps/{k}/state", svc.state)
    app.router.add_get("/v1/steps/{k}/batch", svc.batch)
    app.router.add_get("/v1/steps/{k}/trace", svc.trace)
    app.router.add_get("/v1/steps/{k}/trace/tree", svc.trace_tree)
    app.router.add_get("/v1/steps/{k}/trace/leaves", svc.trace_leaves)
    app.router.add_get("/v1/steps/{k}/trace/graph", svc.trace_graph)
    app.router.add_get("/v1/steps/{k}/trace/arrays/{j}", svc.trace_array)

    async def cleanup(app: web.Application) -> None:
        svc.pool.shutdown(wait=True)
        run.close()

    app.on_cleanup.append(cleanup)
    return app


class Server:
    """A trainer service on its own thread and event loop (tests, demos): ``start()`` binds
    ``host:port`` (0: an ephemeral port) and returns the URL; ``stop()`` closes it."""

    def __init__(self, run_dir: Any, host: str = "127.0.0.1", port: int = 0,
                 middlewares: tuple = ()) -> None:
        self.run_dir, self.host, self.port = run_dir, host, port
        self.middlewares = middlewares
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> str:
        """Start serving; the base URL (``http://host:port``)."""
        app = make_app(self.run_dir, self.middlewares)  # a bad run directory raises here
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                # a query still running at stop() (a trace being computed) gets 5 s
                self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
                loop.run_until_complete(self._runner.setup())
                site = web.TCPSite(self._runner, self.host, self.port)
                loop.run_until_complete(site.start())
                host, port = self._runner.addresses[0][:2]
                self.url = f"http://{host}:{port}"
            except BaseException as e:  # noqa: BLE001 - handed to start()
                failure.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, name="gverify-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"Server.start: not listening after {timeout} s")
        if failure:
            raise failure[0]
        return self.url

    def stop(self) -> None:
        """Stop serving and release the run directory."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop = self._thread = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _announce(line: str) -> None:
    print(line, flush=True)


def serve(run_dir: Any, host: str = "127.0.0.1", port: int = 8765,
          announce: Callable[[str], None] = _announce) -> None:
    """Serve ``run_dir`` in the foreground until interrupted (``gverify serve``); the
    trainer's engine runs one step first (a kernel backend compiles then, not during a
    query), and the URL is announced once the socket listens."""
    run = commit.RunDir(run_dir)
    s = run.task.session(run.backend)
    try:
        s.step()
    finally:
        s.close()
    app = make_app(run)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        h, p = runner.addresses[0][:2]
        announce(f"gverify serve: {run_dir} at http://{h}:{p} (Ctrl-C stops)")
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
