"""``gdist.Local`` and ``gdist.DataParallel``: one training definition, the same bits anywhere.

A step: the batch (B rows) is checked and cut into k = B/m microbatches of m rows, in order;
each microbatch's (loss, gradient) is computed by a tape (``worker.microbatch_grad``); the k
results are summed along the fixed pairwise tree over microbatch index (``tree``), with the
backend's ``add``; the sums are divided by k (``reduce="mean"``, the default: one ``div`` by
k rounded to the dtype, as gtensor's ``mean``) or kept (``reduce="sum"``); the optimizer then
steps once on that gradient, on the driver, which owns the params and the optimizer state.
Nothing in this depends on which process ran which microbatch, or when.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import gopt
import gtensor
import numpy as np
from gtensor import describe
from gtensor.ops.linalg import INNER

from . import checkpoint, inputs, tree, worker
from .digest import params_digest
from .store import GradStore

REDUCE = ("mean", "sum")
TREE_ON = ("workers", "driver")  # where DataParallel adds the tree's nodes (same bits)


class Trainer:
    """What ``Local`` and ``DataParallel`` share: the definition, the driver state, the step."""

    def __init__(self, loss_fn: Callable[..., Any], init_params: Mapping[str, np.ndarray],
                 optimizer: type[gopt.Optimizer] = gopt.Adam,
                 opt_kwargs: Mapping[str, Any] | None = None, *, microbatch: int,
                 backend: str = "numpy", dtype: str = "float64", reduce: str = "mean",
                 l2: float | Mapping[str, float] = 0.0, clip: float | None = None,
                 inner: str = "plain") -> None:
        where = f"gdist.{type(self).__name__}"
        if not callable(loss_fn):
            raise TypeError(f"{where}: loss_fn is {describe(loss_fn)}; expected a function "
                            "loss_fn(tp, params, batch) -> scalar Var")
        if not (isinstance(optimizer, type) and issubclass(optimizer, gopt.Optimizer)):
            raise TypeError(f"{where}: optimizer is {describe(optimizer)}; expected a gopt "
                            "optimizer class (gopt.Adam, gopt.SGD, ...)")
        if opt_kwargs is not None and not isinstance(opt_kwargs, Mapping):
            raise TypeError(f"{where}: opt_kwargs is {describe(opt_kwargs)}; expected a dict of "
                            f"{optimizer.__name__}'s keyword arguments (or None)")
        if not isinstance(backend, str) or backend not in gtensor.BACKENDS:
            raise ValueError(f"{where}: backend is {backend!r}; expected one of "
                             f"{gtensor.BACKENDS} (a name: workers build their own)")
        if str(dtype) not in ("float64", "float32"):
            raise TypeError(f"{where}: dtype is {dtype!r}; expected 'float64' or 'float32'")
        if reduce not in REDUCE:
            raise ValueError(f"{where}: reduce is {reduce!r}; expected one of {REDUCE}")
        if not isinstance(inner, str) or inner not in INNER:
            raise ValueError(f"{where}: inner is {inner!r}; expected one of {INNER} (the "
                             "workers' tapes' inner-product contract)")
        self._m = inputs.positive_int(where, "microbatch", microbatch)
        dt = np.dtype(str(dtype))
        values = inputs.params(where, init_params, dt)
        alphas = _alphas(where, l2, values)
        self._store = GradStore(backend, dt, values)
        try:
            self._opt = optimizer(self._store, **dict(opt_kwargs or {}))
        except TypeError as e:
            raise TypeError(f"{where}: {optimizer.__name__}(**opt_kwargs) refused "
                            f"{dict(opt_kwargs or {})!r}: {e}") from None
        for name, h in self._store.handles.items():
            self._opt.add(h, alphas[name])
        if clip is not None:
            self._opt.set_clip(clip)
        self._reduce_mode, self._backend, self._dtype = reduce, backend, dt
        self._inner = inner
        shapes = tuple((n, tuple(v.shape)) for n, v in values.items())
        key = _model_key(loss_fn, backend, dt.name, shapes) + (
            "" if inner == "plain" else f"/inner={inner}")
        self._spec = worker.ModelSpec(key, backend, dt.name, shapes, loss_fn=loss_fn,
                                      inner=inner)
        self._keys: tuple[str, ...] | None = None
        self._steps = 0
        self.last_step: dict[str, Any] = {}

    # ---------------------------------------------------------------- properties
    @property
    def params(self) -> dict[str, np.ndarray]:
        """The current parameter values, {name: numpy array} (copies)."""
        return self._store.values()

    @property
    def grads(self) -> dict[str, np.ndarray]:
        """The last step's batch gradient (tree-reduced and scaled), {name: numpy array}."""
        return self._store.grads()

    @property
    def optimizer(self) -> gopt.Optimizer:
        """The gopt optimizer that steps the params (on the driver)."""
        return self._opt

    @property
    def steps(self) -> int:
        """Steps taken (a resumed trainer counts the saved ones)."""
        return self._steps

    @property
    def microbatch(self) -> int:
        """m: rows per microbatch."""
        return self._m

    @property
    def dtype(self) -> np.dtype:
        """float64 or float32."""
        return self._dtype

    @property
    def inner(self) -> str:
        """The inner-product contract of the workers' tapes ("plain" or "fma")."""
        return self._inner

    @property
    def backend(self) -> str:
        """The gtensor backend name the tapes, the tree and the optimizer run on."""
        return self._backend

    def digest(self) -> str:
        """sha256 of the current params (``gdist.params_digest``)."""
        return params_digest(self.params)

    def set_params(self, params: Mapping[str, np.ndarray]) -> None:
        """Overwrite every parameter (same names, shapes; converted to the dtype)."""
        got = inputs.same_params(f"gdist.{type(self).__name__}.set_params", "params", params,
                                 {n: h.shape for n, h in self._store.handles.items()})
        for name, h in self._store.handles.items():
            self._store.set_value(h, np.asarray(got[name], dtype=self._dtype))

    # ---------------------------------------------------------------- the step
    def step(self, batch: Mapping[str, np.ndarray]) -> float:
        """One training step on ``batch`` ({name: array of B rows}); returns the batch loss.

        Refused before any work is sent (ValueError/TypeError naming the problem): B % m != 0,
        keys other than the first step's, rows that differ in count, non-real data. A
        microbatch that raises surfaces its error and the step is not applied.
        """
        t0 = time.perf_counter()
        where = f"gdist.{type(self).__name__}.step"
        data = inputs.batch(where, batch, self._keys, self._m)
        parts = inputs.cut(data, self._m)
        params = self._store.values()
        loss, grads = self._run(params, parts)
        be = self._store.backend
        loss_b = be.asarray(loss, dtype=self._dtype)
        grads_b = {n: be.asarray(g, dtype=self._dtype) for n, g in grads.items()}
        if self._reduce_mode == "mean":  # one division by k, as gtensor's mean
            k = be.asarray(np.asarray(len(parts), self._dtype))
            loss_b = be.div(loss_b, k)
            grads_b = {n: be.div(g, k) for n, g in grads_b.items()}
        self._store.set_grads(grads_b)
        self._opt.step()
        self._keys = tuple(data)
        self._steps += 1
        sent = sum(a.nbytes for a in params.values()) + sum(a.nbytes for a in data.values())
        back = loss.nbytes + sum(g.nbytes for g in grads.values())
        self.last_step = {"seconds": time.perf_counter() - t0, "microbatches": len(parts),
                          "tree_depth": tree.depth(len(parts)), "payload_sent_bytes": sent,
                          "payload_received_bytes": back}
        return float(be.to_numpy(loss_b))

    def _run(self, params: dict[str, np.ndarray],
             parts: list[dict[str, np.ndarray]]) -> worker.Result:
        """The tree-reduced (loss, gradients) of the microbatches at ``params``."""
        raise NotImplementedError

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, np.ndarray]:
        """Params, optimizer state and the trainer's settings as host arrays (no objects)."""
        return checkpoint.state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output; checked first, a refused state changes nothing."""
        checkpoint.load_state_dict(self, state)

    def save(self, path: Any) -> None:
        """Write ``state_dict()`` to ``path`` (.npz, no pickle; atomic)."""
        checkpoint.save(self, path)

    def load(self, path: Any) -> None:
        """Read a file written by ``save`` into this trainer (same definition)."""
        checkpoint.load(self, path)

    def __repr__(self) -> str:
        return (f"<gdist.{type(self).__name__} {len(self._store.handles)} params, m="
                f"{self._m}, {self._backend}/{self._dtype.name}, {self._opt!r}, "
                f"steps={self._steps}>")


class Local(Trainer):
    """The training definition run in this process, no Dask: the same bits as ``DataParallel``.

    >>> import numpy as np, gtape as g, gopt, gdist
    >>> def loss_fn(tp, params, batch):
    ...     return g.mse(batch["x"] @ params["w"], batch["y"])
    >>> t = gdist.Local(loss_fn, {"w": np.zeros((3, 1))}, gopt.SGD, {"lr": 0.1}, microbatch=2)
    >>> x = np.arange(12.0).reshape(4, 3) / 10
    >>> round(t.step({"x": x, "y": x.sum(1, keepdims=True)}), 6)
    3.735
    """

    def _run(self, params: dict[str, np.ndarray],
             parts: list[dict[str, np.ndarray]]) -> worker.Result:
        results = [worker.microbatch_grad(self._spec, params, p) for p in parts]
        return tree.reduce(results, lambda a, b: worker.tree_add(self._backend, a, b))


class DataParallel(Trainer):
    """The training definition with the microbatches as tasks on a Dask cluster.

    ``client`` is a ``dask.distributed.Client``. Per step: one task holding the params (sent
    once, moved between workers by Dask), one task per microbatch, one task per tree node;
    the driver gathers the root only. Worker processes need gdist (and whatever ``loss_fn``
    imports) installed. ``submit_seed`` shuffles the order the microbatch tasks are submitted
    in (a test of the claim that order cannot matter); ``placement(i, workers)`` pins
    microbatch i to a worker address (others may still take it if that worker dies).
    """

    def __init__(self, loss_fn: Callable[..., Any], init_params: Mapping[str, np.ndarray],
                 optimizer: type[gopt.Optimizer] = gopt.Adam,
                 opt_kwargs: Mapping[str, Any] | None = None, *, microbatch: int,
                 client: Any, backend: str = "numpy", dtype: str = "float64",
                 reduce: str = "mean", l2: float | Mapping[str, float] = 0.0,
                 clip: float | None = None, submit_seed: int | None = None,
                 placement: Callable[[int, list[str]], str] | None = None,
                 tree_on: str = "workers") -> None:
        if not callable(getattr(client, "submit", None)):
            raise TypeError(f"gdist.DataParallel: client is {describe(client)}; expected a "
                            "dask.distributed.Client (or use gdist.Local for one process)")
        if placement is not None and not callable(placement):
            raise TypeError(f"gdist.DataParallel: placement is {describe(placement)}; expected "
                            "None or a function (microbatch index, worker addresses) -> address")
        if tree_on not in TREE_ON:
            raise ValueError(f"gdist.DataParallel: tree_on is {tree_on!r}; expected one of "
                             f"{TREE_ON}")
        super().__init__(loss_fn, init_params, optimizer, opt_kwargs, microbatch=microbatch,
                         backend=backend, dtype=dtype, reduce=reduce, l2=l2, clip=clip)
        self._client = client
        self._tree_on = tree_on
        try:
            self._remote = self._spec.remote()
        except Exception as e:
            raise TypeError(f"gdist.DataParallel: loss_fn {loss_fn!r} cannot be pickled "
                            f"(cloudpickle) to send to workers: {e}") from None
        self._submit_seed = submit_seed
        self._placement = placement
        self._run_id = uuid.uuid4().hex[:12]

    @property
    def client(self) -> Any:
        """The Dask client the tasks go to."""
        return self._client

    def _run(self, params: dict[str, np.ndarray],
             parts: list[dict[str, np.ndarray]]) -> worker.Result:
        c, k = self._client, len(parts)
        tag = f"gdist-{self._run_id}-{self._steps}-{uuid.uuid4().hex[:8]}"
        order = list(range(k))
        if self._submit_seed is not None:
            np.random.default_rng([self._submit_seed, self._steps]).shuffle(order)
        pinned: dict[int, dict] = {i: {} for i in order}
        if self._placement is not None:  # every address checked before anything is sent
            workers = sorted(c.nthreads())
            for i in order:
                addr = self._placement(i, workers)
                if addr not in workers:
                    raise ValueError(f"gdist.DataParallel.step: placement({i}, workers) "
                                     f"returned {addr!r}; expected one of {workers}")
                pinned[i] = {"workers": [addr], "allow_other_workers": True}
        held = c.submit(worker.hold, params, key=f"{tag}-params", pure=False)
        futs: dict[int, Any] = {}
        for i in order:
            futs[i] = c.submit(worker.microbatch_grad, self._remote, held, parts[i],
                               key=f"{tag}-mb-{i}", pure=False, **pinned[i])
        if self._tree_on == "workers":
            for node, left, right in tree.plan(k):
                futs[node] = c.submit(worker.tree_add, self._backend, futs[left], futs[right],
                                      key=f"{tag}-add-{node}", pure=False)
        try:
            if self._tree_on == "workers":
                return futs[tree.root(k)].result()
            leaves = c.gather([futs[i] for i in range(k)])
            return tree.reduce(leaves, lambda a, b: worker.tree_add(self._backend, a, b))
        except BaseException as e:
            failed = [i for i in range(k) if futs[i].status == "error"]
            c.cancel([held, *futs.values()])
            if isinstance(e, Exception):
                which = (f"microbatch {failed[0]} (rows {failed[0] * self._m}:"
                         f"{(failed[0] + 1) * self._m})" if failed else "a task")
                e.add_note(f"gdist.DataParallel.step: {which} raised on a worker; the step "
                           f"was not applied (params and optimizer state unchanged, step "
                           f"{self._steps})")
            raise


def _alphas(where: str, l2: Any, values: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Per-parameter L2 weights from ``l2`` (one float for all, or {name: float})."""
    if isinstance(l2, Mapping):
        unknown = [n for n in l2 if n not in values]
        if unknown:
            raise ValueError(f"{where}: l2 names {unknown}, which are not params; expected "
                             f"names from {sorted(values)}")
        return {n: l2.get(n, 0.0) for n in values}
    return {n: l2 for n in values}


def _model_key(loss_fn: Any, backend: str, dtype: str, shapes: tuple) -> str:
    """Identifies the model on the workers: the pickled loss_fn and the param layout."""
    try:
        import cloudpickle

        code = cloudpickle.dumps(loss_fn)
    except Exception:  # an unpicklable loss_fn fails at submit; Local still works
        code = uuid.uuid4().bytes
    h = hashlib.sha256(code)
    h.update(repr((backend, dtype, shapes)).encode())
    return h.hexdigest()[:32]
