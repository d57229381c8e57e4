"""``gdist.Local`` and ``gdist.DataParallel``: one training definition, the same bits anywhere.

A step: the batch (B rows, or B row indices into data loaded with ``load_data``) is checked
and cut into k = B/m microbatches of m rows, in order; microbatch i of the step is the run's
microbatch number ``serial + i`` (its dropout keys follow that number); each microbatch's
(loss, gradient) is computed by a replica; the k results are summed along the fixed pairwise
tree over microbatch index (``tree``) with the backend's ``add``; every replica divides the
sums by k (``reduce="mean"``: one ``div``, as gtensor's mean) and steps its own optimizer on
them. Nothing in this depends on which replica ran which microbatch, or when.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gopt
import numpy as np
from gtensor import describe

from . import checkpoint, inputs, tree
from .definition import Definition, define
from .digest import params_digest
from .replica import Replica


class Trainer:
    """What ``Local`` and ``DataParallel`` share: the definition, the counters, the step."""

    def __init__(self, defn: Definition) -> None:
        self._defn = defn
        self._keys: tuple[str, ...] | None = None
        self._steps = 0
        self._serial = 0  # microbatches run so far: the next step's first serial
        self._lrs: list[float] | None = None  # set_lr's learning rates, for the next step
        self._rows: int | None = None  # rows of the resident data (load_data)
        self.last_step: dict[str, Any] = {}

    # ---------------------------------------------------------------- properties
    @property
    def steps(self) -> int:
        """Steps taken (a resumed trainer counts the saved ones)."""
        return self._steps

    @property
    def microbatch(self) -> int:
        """m: rows per microbatch."""
        return self._defn.microbatch

    @property
    def dtype(self) -> np.dtype:
        """float64 or float32."""
        return np.dtype(self._defn.dtype)

    @property
    def inner(self) -> str:
        """The inner-product contract of the replicas' tapes ("plain" or "fma")."""
        return self._defn.inner

    @property
    def backend(self) -> str:
        """The gtensor backend the replicas, the tree and the optimizers run on."""
        return self._defn.backend

    @property
    def seed(self) -> int:
        """The seed of the model tape's key stream (the factory's keys, dropout's)."""
        return self._defn.seed

    @property
    def definition(self) -> Definition:
        """The training definition every replica builds from."""
        return self._defn

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The current parameter values, {name: numpy array} (copies)."""
        return self._ask("values")

    @property
    def grads(self) -> dict[str, np.ndarray]:
        """The last step's batch gradient (tree-reduced and scaled), {name: numpy array}."""
        return self._ask("grads")

    def digest(self) -> str:
        """sha256 of the current params (``gdist.params_digest``)."""
        return self._ask("digest")

    def set_lr(self, lr: float | Sequence[float]) -> None:
        """Set the learning rate (one for every group, or one per group) from the next step
        on, on every replica (checked there, as gopt's ``param_groups[k]["lr"] = x``)."""
        lrs = [lr] if not isinstance(lr, Sequence) else list(lr)
        for x in lrs:
            if isinstance(x, bool) or not isinstance(x, (int, float, np.floating)) or \
                    not np.isfinite(x) or x < 0:
                raise ValueError(f"gdist.{type(self).__name__}.set_lr: lr is {describe(lr)}; "
                                 "expected a finite number >= 0 (or one per group)")
        n = len(self._defn.param_groups or [None])
        if len(lrs) not in (1, n):
            raise ValueError(f"gdist.{type(self).__name__}.set_lr: {len(lrs)} learning rates "
                             f"for {n} parameter groups; expected 1 or {n}")
        self._lrs = [float(x) for x in (lrs * n if len(lrs) == 1 else lrs)]

    def set_params(self, params: Mapping[str, np.ndarray]) -> None:
        """Overwrite every parameter (same names, shapes; converted to the dtype)."""
        got = inputs.same_params(f"gdist.{type(self).__name__}.set_params", "params", params,
                                 self._shapes())
        self._tell("set_values", {n: np.asarray(a, self.dtype) for n, a in got.items()})

    def load_data(self, data: Mapping[str, np.ndarray]) -> None:
        """Make ``data`` ({name: array of N rows}) resident on every replica: a step then takes
        B row indices (``step(indices)``) instead of the rows, so only indices travel."""
        where = f"gdist.{type(self).__name__}.load_data"
        checked = inputs.batch(where, data, self._keys, 1)
        self._load_data(checked)
        self._rows = next(iter(checked.values())).shape[0]
        self._keys = tuple(checked)

    # ---------------------------------------------------------------- the step
    def step(self, batch: Mapping[str, np.ndarray] | Sequence[int] | np.ndarray) -> float:
        """One training step; returns the batch loss. ``batch`` is {name: array of B rows},
        or B row indices into the resident data (``load_data``).

        Refused before any work is sent (ValueError/TypeError naming the problem): B % m != 0,
        keys other than the first step's, rows that differ in count, non-real data, indices
        out of range. A microbatch that raises surfaces its error and the step is not applied.
        """
        t0 = time.perf_counter()
        where = f"gdist.{type(self).__name__}.step"
        m = self._defn.microbatch
        if isinstance(batch, Mapping):
            data = inputs.batch(where, batch, self._keys, m)
            parts: list[Any] = inputs.cut(data, m)
            sent = sum(a.nbytes for a in data.values())
        else:
            idx = inputs.indices(where, batch, self._rows, m)
            parts = [idx[lo:lo + m] for lo in range(0, idx.size, m)]
            sent = idx.nbytes
        try:
            loss = self._run(parts)
        except Exception as e:
            i = getattr(e, "gdist_microbatch", None)
            which = f"microbatch {i} (rows {i * m}:{(i + 1) * m})" if i is not None else \
                "a microbatch"
            e.add_note(f"{where}: {which} raised; the step was not applied (params and "
                       f"optimizer state unchanged, step {self._steps})")
            raise
        if isinstance(batch, Mapping):
            self._keys = tuple(data)
        self._steps += 1
        self._serial += len(parts)
        self._lrs = None
        self.last_step = {"seconds": time.perf_counter() - t0, "microbatches": len(parts),
                          "tree_depth": tree.depth(len(parts)), "payload_sent_bytes": sent}
        return loss

    def _run(self, parts: list[Any]) -> float:
        """Apply one step of ``parts`` (the microbatches); the batch loss."""
        raise NotImplementedError

    def _ask(self, what: str) -> Any:
        """A replica's read-out (values, grads, digest, state_dict)."""
        raise NotImplementedError

    def _tell(self, what: str, *args: Any) -> None:
        """A change made on every replica (set_values, load_state_dict)."""
        raise NotImplementedError

    def _load_data(self, data: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, np.ndarray]:
        """Params, optimizer and schedule state, settings and counters as host arrays."""
        return checkpoint.with_keys(self._ask("state_dict"), self._keys)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output (also one written by another trainer of the same
        definition, with any number of workers); checked first, a refused state changes
        nothing."""
        where = f"gdist.{type(self).__name__}.load_state_dict"
        meta = checkpoint.read_meta(where, state)
        self._tell("load_state_dict", dict(state))
        keys = meta.get("batch_keys")
        self._steps = int(meta["steps"])
        self._serial = int(meta.get("microbatches", 0))
        self._keys = None if keys is None else tuple(keys)

    def save(self, path: Any) -> None:
        """Write ``state_dict()`` to ``path`` (.npz, no pickle; atomic)."""
        checkpoint.save(self.state_dict(), path)

    def load(self, path: Any) -> None:
        """Read a file written by ``save`` into this trainer (same definition)."""
        self.load_state_dict(checkpoint.load(path, f"gdist.{type(self).__name__}.load"))

    def __repr__(self) -> str:
        d = self._defn
        return (f"<gdist.{type(self).__name__} m={d.microbatch}, {d.backend}/{d.dtype}, "
                f"{d.optimizer.__name__}, steps={self._steps}>")


class Local(Trainer):
    """The training definition run in this process, no Dask: the same bits as ``DataParallel``.

    ``init_params`` is {name: array} (``loss_fn(tp, params, batch)`` gets {name: param Var})
    or a factory ``model(tp)`` returning an nn.Module or {name: param Var}, built on
    ``gtape.Tape(backend, dtype, inner=inner, seed=seed)`` (``loss_fn(tp, model, batch)``).

    >>> import numpy as np, gtape as g, gopt, gdist
    >>> def loss_fn(tp, params, batch):
    ...     return g.mse(batch["x"] @ params["w"], batch["y"])
    >>> t = gdist.Local(loss_fn, {"w": np.zeros((3, 1))}, gopt.SGD, {"lr": 0.1}, microbatch=2)
    >>> x = np.arange(12.0).reshape(4, 3) / 10
    >>> round(t.step({"x": x, "y": x.sum(1, keepdims=True)}), 6)
    3.735
    """

    def __init__(self, loss_fn: Callable[..., Any], init_params: Any,
                 optimizer: type[gopt.Optimizer] = gopt.Adam,
                 opt_kwargs: Mapping[str, Any] | None = None, *, microbatch: int,
                 backend: str = "numpy", dtype: str = "float64", reduce: str = "mean",
                 l2: float | Mapping[str, float] = 0.0, clip: float | None = None,
                 inner: str = "plain", seed: int = 0, capture: bool = False,
                 param_groups: Sequence[Mapping[str, Any]] | None = None,
                 clip_rule: str = "gopt", schedule: Callable[..., Any] | None = None) -> None:
        defn = define("gdist.Local", loss_fn, init_params, optimizer, opt_kwargs,
                      microbatch=microbatch, backend=backend, dtype=dtype, reduce=reduce,
                      l2=l2, clip=clip, clip_rule=clip_rule, inner=inner, seed=seed,
                      capture=capture, param_groups=param_groups, schedule=schedule)
        super().__init__(defn)
        self._rep = Replica(defn)

    @property
    def optimizer(self) -> gopt.Optimizer:
        """The replica's gopt optimizer (its groups, lr and state are the run's)."""
        return self._rep.opt

    @property
    def schedule(self) -> Any:
        """The replica's schedule (``schedule=``), or None."""
        return self._rep.sched

    @property
    def model(self) -> Any:
        """What the model factory built (or {name: param Var})."""
        return self._rep.model.obj

    def _run(self, parts: list[Any]) -> float:
        rep, serial = self._rep, self._serial
        leaves = []
        for i, part in enumerate(parts):
            try:
                leaves.append(rep.leaf(serial + i, part))
            except Exception as e:
                e.gdist_microbatch = i
                raise
        # the leaves are this step's own arrays: each node's sums go into its left operand
        return rep.apply(tree.reduce(leaves, lambda a, b: rep.add(a, b, a)), len(parts),
                         self._lrs)

    def _ask(self, what: str) -> Any:
        rep = self._rep
        return {"values": rep.model.values, "grads": rep.store.grads, "digest": rep.digest,
                "state_dict": rep.state_dict}[what]()

    def _tell(self, what: str, *args: Any) -> None:
        getattr(self._rep, what)(*args)

    def _load_data(self, data: dict[str, np.ndarray]) -> None:
        self._rep.data = data

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(v.shape) for n, v in self._rep.store.vars.items()}


class OptimizerView:
    """A read-only look at the replicas' optimizer (``DataParallel.optimizer``): ``t``, ``lr``
    (``lrs`` per group) and ``state_dict()``; change learning rates with ``set_lr``."""

    def __init__(self, got: dict[str, Any]) -> None:
        self.t: int = got["t"]
        self.lrs: list[float] = got["lrs"]
        self._state = got["state"]

    @property
    def lr(self) -> float:
        """The learning rate (of every group; read ``lrs`` when they differ)."""
        if any(x != self.lrs[0] for x in self.lrs):
            raise ValueError(f"gdist optimizer: the groups have different learning rates "
                             f"{self.lrs}; read lrs")
        return self.lrs[0]

    def state_dict(self) -> dict[str, np.ndarray]:
        """The optimizer's state (gopt's ``state_dict(params=False)``)."""
        return dict(self._state)


class DataParallel(Trainer):
    """The training definition with one replica per worker of a Dask cluster.

    ``client`` is a ``distributed.Client`` (or a scheduler address, connected within
    ``connect_timeout`` seconds). Each worker builds the model once, keeps it, its optimizer
    and any resident data (``load_data``); a step sends each replica its microbatches (or
    their row indices) and the plan, the replicas reduce the tree among themselves and each
    steps its own optimizer; the driver gets the loss back (and every ``check_every`` steps
    the replicas' digests, compared). The parameters never travel. See docs/distributed.md.

    ``placement(i, workers)`` pins microbatch i to a worker's replica (default: contiguous
    blocks); ``submit_seed`` shuffles the order each replica computes its microbatches in (a
    test that order cannot matter); ``tree_on="driver"`` adds the tree's cross-replica nodes
    on the driver instead (the same bits). ``workers`` restricts the replicas to these
    addresses. Lost workers: ``checkpoint_every`` sets how often replicas checkpoint their
    state (in memory) for rebuilding one elsewhere; ``replace_wait`` how long a step waits for
    the cluster to bring a lost worker back before going on with fewer replicas.
    ``transport``: how a step's messages travel: "auto" (direct TCP links, ``gdist.links``,
    when every worker is ``tcp://``, else Dask's comms), "direct" (links, or refused), "dask"
    (Dask's comms always; the same bits either way). ``reply_wait``: how the driver waits
    for a step's replies on the links (``gdist.waiting``): "auto" polls around the expected
    reply time where this machine has a core free beside the replicas on it, else sleeps;
    "poll", "sleep" (the same bits either way). ``shared_memory``: on the links, tree values
    between replicas of one machine go through shared memory (``gdist.shared``; False: over
    TCP like the others; the same bits either way).
    """

    def __init__(self, loss_fn: Callable[..., Any], init_params: Any,
                 optimizer: type[gopt.Optimizer] = gopt.Adam,
                 opt_kwargs: Mapping[str, Any] | None = None, *, microbatch: int,
                 client: Any, backend: str = "numpy", dtype: str = "float64",
                 reduce: str = "mean", l2: float | Mapping[str, float] = 0.0,
                 clip: float | None = None, submit_seed: int | None = None,
                 placement: Callable[[int, list[str]], str] | None = None,
                 tree_on: str = "workers", inner: str = "plain", seed: int = 0,
                 capture: bool = False, param_groups: Sequence[Mapping[str, Any]] | None = None,
                 clip_rule: str = "gopt", schedule: Callable[..., Any] | None = None,
                 workers: Sequence[str] | None = None, check_every: int = 10,
                 checkpoint_every: int = 10, timeout: float = 600.0,
                 replace_wait: float = 30.0, connect_timeout: float = 30.0,
                 transport: str = "auto", reply_wait: str = "auto",
                 shared_memory: bool = True) -> None:
        from .cluster import TRANSPORTS, TREE_ON, Replicas
        from .waiting import WAITS

        where = "gdist.DataParallel"
        own = isinstance(client, str)
        if not own and not callable(getattr(client, "submit", None)):
            raise TypeError(f"{where}: client is {describe(client)}; expected a "
                            "dask.distributed.Client or a scheduler address (or use gdist.Local "
                            "for one process)")
        if placement is not None and not callable(placement):
            raise TypeError(f"{where}: placement is {describe(placement)}; expected None or a "
                            "function (microbatch index, worker addresses) -> address")
        if tree_on not in TREE_ON:
            raise ValueError(f"{where}: tree_on is {tree_on!r}; expected one of {TREE_ON}")
        if transport not in TRANSPORTS:
            raise ValueError(f"{where}: transport is {transport!r}; expected one of "
                             f"{TRANSPORTS}")
        if reply_wait not in WAITS:
            raise ValueError(f"{where}: reply_wait is {reply_wait!r}; expected one of {WAITS}")
        if not isinstance(shared_memory, bool):
            raise TypeError(f"{where}: shared_memory is {describe(shared_memory)}; expected "
                            "True or False")
        for name, v in (("check_every", check_every), ("checkpoint_every", checkpoint_every)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{where}: {name} is {v!r}; expected an int >= 0 (0: never)")
        for name, v in (("timeout", timeout), ("replace_wait", replace_wait),
                        ("connect_timeout", connect_timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{where}: {name} is {v!r}; expected seconds >= 0")
        defn = define(where, loss_fn, init_params, optimizer, opt_kwargs,
                      microbatch=microbatch, backend=backend, dtype=dtype, reduce=reduce,
                      l2=l2, clip=clip, clip_rule=clip_rule, inner=inner, seed=seed,
                      capture=capture, param_groups=param_groups, schedule=schedule)
        super().__init__(defn)
        try:
            defn.remote()
        except Exception as e:
            raise TypeError(f"{where}: loss_fn {loss_fn!r} (or the factory / schedule) cannot "
                            f"be pickled (cloudpickle) to send to workers: {e}") from None
        if own:
            client = _connect(where, client, connect_timeout)
        self._client, self._own_client = client, own
        self._placement, self._submit_seed, self._tree_on = placement, submit_seed, tree_on
        try:
            self._replicas = Replicas(client, defn, workers=workers, check_every=check_every,
                                      checkpoint_every=checkpoint_every, timeout=timeout,
                                      replace_wait=replace_wait, transport=transport,
                                      reply_wait=reply_wait, shared_memory=shared_memory,
                                      connect_timeout=min(connect_timeout, 30.0) or 30.0)
        except BaseException:
            if own:
                client.close()
            raise
        self._finalizer = weakref.finalize(self, _close, self._replicas, client if own else None)
        self.replica_seconds: dict[str, Any] = {}  # the last step's time on each replica, by part

    @property
    def client(self) -> Any:
        """The Dask client the replicas were started with."""
        return self._client

    @property
    def workers(self) -> list[str]:
        """The addresses of the workers holding a replica, in rank order."""
        return list(self._replicas.addresses)

    @property
    def optimizer(self) -> OptimizerView:
        """A read-only view of the replicas' optimizer (t, lr, state)."""
        return OptimizerView(self._ask("optimizer"))

    def close(self) -> None:
        """Drop the replicas on the workers (and close the client gdist opened)."""
        self._finalizer()

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, parts: list[Any]) -> float:
        loss = self._replicas.step(self._steps, self._serial, parts, self._lrs,
                                   self._placement, self._tree_on, self._submit_seed)
        self.replica_seconds = dict(self._replicas.last)
        return loss

    def _ask(self, what: str) -> Any:
        return self._replicas.ask(what)

    def _tell(self, what: str, *args: Any) -> None:
        self._replicas.tell(what, *args)

    def _load_data(self, data: dict[str, np.ndarray]) -> None:
        self._replicas.tell("load_data", data)
        self._replicas.data = data

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(s) for n, s in self._replicas.params}


def _connect(where: str, address: str, timeout: float) -> Any:
    """A client of the scheduler at ``address``, or ConnectionError within ``timeout`` s."""
    import distributed

    try:
        return distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError) as e:
        raise ConnectionError(f"{where}: cannot reach the Dask scheduler at {address!r} "
                              f"within {timeout} s ({type(e).__name__}: {e}); is it running, "
                              "and is the address right?") from None


def _close(replicas: Any, client: Any) -> None:
    """Finalizer: drop the replicas; close a client gdist opened."""
    try:
        replicas.close()
    finally:
        if client is not None:
            client.close()


__all__ = ["DataParallel", "Local", "OptimizerView", "Trainer", "params_digest"]
