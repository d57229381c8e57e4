"""What runs on a worker (and, for ``gdist.Local``, in the driver): pure task functions.

A task is a pure function of its arguments, so a task that Dask reruns (its worker died) returns
the same bits. The model -- a tape with the params registered and a mark after them -- is built
once per worker process (per thread, for workers with several threads) and cached by the
model's key; each task then writes the step's params in, records the microbatch's loss, runs
backward, reads the gradients out and resets the tape to its mark.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import gtape
import gtensor
import numpy as np
from gtensor import describe

CACHE_SIZE = 8  # models kept per process (least recently used dropped)
_MODELS: OrderedDict[tuple[str, int], _Model] = OrderedDict()
_LOCK = threading.Lock()
_STATS = {"builds": 0, "microbatches": 0, "adds": 0}

Result = tuple[np.ndarray, dict[str, np.ndarray]]  # (0-d loss, {name: gradient})


@dataclass(frozen=True)
class ModelSpec:
    """Everything a worker needs to build the model: sent with every task (it is small)."""

    key: str  # identifies (loss_fn, backend, dtype, param names and shapes)
    backend: str
    dtype: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape), in the trainer's order
    code: bytes = b""  # loss_fn by cloudpickle (by value from __main__ or registered modules)
    loss_fn: Callable[..., Any] | None = None  # set in-process (Local): no pickling at all
    inner: str = "plain"  # the tapes' inner-product contract (gtape.Tape's inner)

    def remote(self) -> ModelSpec:
        """This spec as sent to workers: the function as cloudpickle bytes only.

        NOTE: Dask pickles a task with plain pickle when it can, which sends a function by
        reference to its module even where cloudpickle would send it by value; pickling the
        function here, with cloudpickle, gives workers what cloudpickle promises.
        """
        import cloudpickle

        return replace(self, code=cloudpickle.dumps(self.loss_fn), loss_fn=None)


class _Model:
    """A cached tape: params registered (values rewritten per task), a mark after them."""

    def __init__(self, spec: ModelSpec) -> None:
        if spec.loss_fn is not None:
            self.loss_fn = spec.loss_fn
        else:
            import cloudpickle

            self.loss_fn = cloudpickle.loads(spec.code)
        self.tape = gtape.Tape(spec.backend, spec.dtype, inner=spec.inner)
        self.vars = {name: self.tape.param(np.zeros(shape)) for name, shape in spec.shapes}
        self.mark = self.tape.mark()


def _model(spec: ModelSpec) -> _Model:
    """The cached model of ``spec`` for this thread, built on first use."""
    k = (spec.key, threading.get_ident())
    with _LOCK:
        m = _MODELS.get(k)
        if m is not None:
            _MODELS.move_to_end(k)
            return m
    m = _Model(spec)
    with _LOCK:
        _MODELS[k] = m
        _STATS["builds"] += 1
        while len(_MODELS) > CACHE_SIZE:
            _MODELS.popitem(last=False)[1].tape.close()
    return m


def microbatch_grad(spec: ModelSpec, params: Mapping[str, np.ndarray],
                    rows: Mapping[str, np.ndarray]) -> Result:
    """One microbatch's loss and gradient of every param at ``params`` (host arrays)."""
    m = _model(spec)
    tp = m.tape
    be = tp.backend
    tp.reset_to(m.mark)  # also after a loss_fn that raised half-way through the last task
    try:
        for name, v in m.vars.items():
            tp.set_value(v, params[name])
        batch = {k: tp.const(a) if a.dtype.kind == "f" else a for k, a in rows.items()}
        loss = m.loss_fn(tp, dict(m.vars), batch)
        if not isinstance(loss, gtape.Var) or loss.tape is not tp or loss.shape != ():
            got = loss.shape if isinstance(loss, gtape.Var) else describe(loss)
            raise TypeError(f"gdist: loss_fn returned {got}; expected a scalar (0-d) Var of "
                            "the tape it was given (e.g. g.cross_entropy(...) or g.mean(...))")
        tp.backward(loss)
        out = (be.to_numpy(tp.value(loss)).reshape(()),
               {name: be.to_numpy(tp.grad(v)) for name, v in m.vars.items()})
    finally:
        tp.reset_to(m.mark)
    with _LOCK:
        _STATS["microbatches"] += 1
    return out


def tree_add(backend: str, left: Result, right: Result) -> Result:
    """One node of the summation tree: ``left + right``, loss and every gradient, with the
    gtensor ``add`` op of ``backend`` (exact: one rounding per element)."""
    be = gtensor.backend(backend)

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return be.to_numpy(be.add(be.asarray(a), be.asarray(b)))

    loss = add(left[0], right[0])
    grads = {name: add(g, right[1][name]) for name, g in left[1].items()}
    with _LOCK:
        _STATS["adds"] += 1
    return loss, grads


def hold(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step's params as a task result: sent once, then moved between workers by Dask (and
    recomputed from the task itself if the worker holding it dies, unlike scattered data)."""
    return params


def stats() -> dict[str, int]:
    """This process's counters: models built, microbatches and tree additions run; its pid."""
    with _LOCK:
        return {**_STATS, "pid": os.getpid(), "cached_models": len(_MODELS)}
