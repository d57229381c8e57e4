"""The Tape: eager recording through gtensor, backward entry, mark/reset, zeroing replay.

It composes, each by its job: the leaves (``tape_leaves``: params, consts, the parameter-store
writes), the recording of op calls (``tape_recording``), the node table (``nodes``: the
parallel lists), the freshness checks (``freshness``: parameter clocks, stale Var errors, the
growth warning) and the states (``states``), mixed in so the recording hot path reads the
lists directly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import gtensor
import numpy as np
from gtensor import describe
from gtensor.ops.inner import INNER
from gtensor.recording import record, recordable

from . import backward as _backward
from . import rng
from .freshness import GROWTH_WARNING_AFTER, Freshness, TapeGrowthWarning
from .leaves import PARAM
from .nodes import Node, NodeTable
from .passes import BackwardPasses
from .recording import Recording
from .states import States
from .tape_leaves import TapeLeaves
from .tape_recording import TapeRecording
from .var import Var

__all__ = ["GROWTH_WARNING_AFTER", "Mark", "Node", "Tape", "TapeGrowthWarning"]

_tape_ids = itertools.count(1)


@dataclass(frozen=True)
class Mark:
    """A position on a tape (see ``Tape.mark``)."""

    tape_id: int
    length: int
    serial: int  # serial number of node length-1 (-1 for an empty tape)


class Tape(TapeLeaves, TapeRecording, NodeTable, Freshness, States):
    """A define-by-run tape: every op runs eagerly on a gtensor backend and appends one node.

    ``inner`` is the inner-product contract of every matmul / bmm / conv2d (and conv2d's
    gradient ops) recorded on it (forward, backward, higher order): ``"plain"`` or ``"fma"``
    (docs/semantics.md, "Inner products").

    ``seed`` (an int in [0, 2**128), default 0) starts the tape's key stream
    (``gtape.rng.KeyStream``): every module or initialiser made without an explicit key takes
    ``next_key()``, in construction order, so two default layers never share weights or dropout
    masks and a re-run gets the same bits. Part of a run's identity, as ``inner`` is.
    """

    def __init__(self, backend: str | gtensor.Backend = "numpy", dtype: Any = "float64",
                 inner: str = "plain", seed: int = 0) -> None:
        if not isinstance(inner, str) or inner not in INNER:
            raise ValueError(f"Tape: inner is {inner!r}; expected one of {INNER} (the "
                             "inner-product contract of matmul, bmm and conv2d: docs/semantics.md)")
        if isinstance(backend, str):
            self._be = gtensor.backend(backend)
        elif all(callable(getattr(backend, m, None)) for m in ("apply", "asarray", "is_array")):
            self._be = backend  # a gtensor Backend (or a proxy of one)
        else:
            raise TypeError(f"Tape: backend is {describe(backend)}; expected a backend name "
                            f"{gtensor.BACKENDS} or a gtensor Backend")
        dt = np.dtype(dtype) if dtype is not None and _is_dtype(dtype) else None
        if dt is None or dt.name not in ("float64", "float32") or not dt.isnative:
            raise TypeError(f"Tape: dtype {dtype!r} is not supported; expected float64 or float32 "
                            "(native byte order)")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
                not 0 <= int(seed) < rng.SEED_LIMIT:
            raise TypeError(f"Tape: seed is {describe(seed)}; expected an int in [0, 2**128) "
                            "(the start of the tape's key stream)")
        self._dtype = dt
        self._inner = inner
        self._keys = rng.KeyStream(int(seed))
        self._id = next(_tape_ids)
        self._closed = False
        self._init_table()
        self._init_freshness()
        self._init_states()
        self._gcache: dict[int, Any] = {}  # persistent gradient buffers of params
        self._passes = BackwardPasses(self._be)  # backward passes (replayed when repeated)
        self._zeroing = Recording("reset_to's gradient zeroing")  # keyed by the buffers
        self._last_backward = {"vjps": 0, "reductions": 0, "accumulations": 0, "param_copies": 0}
        self._backwards = 0  # successful backward calls (optimizers refuse stale gradients)
        self._next_adjust: Any = None  # adjust_next_backward's hook, for the next pass only
        self._grad_loss: int | None = None  # the loss of the last backward (None after reset)
        self._grad_vars: tuple[int, dict] | None = None  # create_graph backward's gradient Vars
        self._names: dict[int, tuple[int, str]] = {}  # const node -> (serial, name): ``const``
        self._calls: dict[tuple, tuple] = {}  # _record's shape work, by call (CALL_CACHE)
        self._no_grad = 0  # depth of ``no_grad`` blocks: > 0 records nothing for backward
        self._no_grad_start = 0
        self._no_grad_block: tuple[int, int] | None = None  # the last block: (start, last serial)

    # ---------------------------------------------------------------- properties
    @property
    def backend(self) -> gtensor.Backend:
        """The gtensor Backend every value and gradient lives on."""
        return self._be

    @property
    def dtype(self) -> np.dtype:
        """The dtype of every value and gradient (float64 or float32)."""
        return self._dtype

    @property
    def inner(self) -> str:
        """The inner-product contract of every matmul / bmm / conv on this tape, forward and
        backward: ``"plain"`` (each product and sum rounded) or ``"fma"`` (one fused
        multiply-add per term, from +0.0). Part of a run's identity (checkpoints, digests)."""
        return self._inner

    @property
    def seed(self) -> int:
        """The seed of the tape's key stream (``Tape(seed=...)``); part of a run's identity."""
        return self._keys.seed

    @property
    def keys_drawn(self) -> int:
        """How many keys ``next_key`` has handed out (modules made with default keys)."""
        return self._keys.drawn

    def next_key(self) -> rng.Key:
        """The next key of the tape's stream (``gtape.rng.KeyStream``): what every module and
        initialiser made without an explicit key uses, in construction order."""
        self._check_open("next_key")
        return self._keys.next()

    @property
    def closed(self) -> bool:
        """True once ``close`` released every buffer."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} nodes"
        inner = "" if self._inner == "plain" else f" inner={self._inner}"
        seed = "" if self._keys.seed == 0 else f" seed={self._keys.seed}"
        return f"<Tape {self._be.name} {self._dtype.name}{inner}{seed}, {state}>"

    def __enter__(self) -> Tape:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- reading
    def value(self, v: Var) -> Any:
        """A read-only view of ``v``'s value (valid until a reset past ``v`` or close)."""
        self._check_var(v, "value")
        return _read_only(self._values[v.index])

    def grad(self, v: Var) -> Any:
        """A read-only view of dloss/dv from the last backward; zeros where none was computed."""
        self._check_var(v, "grad")
        g = self._grads[v.index]
        if g is None:  # no parameter upstream, or not reached: fresh zeros, not stored
            g = self._be.zeros(self._shape[v.index], self._dtype)
        return _read_only(g)

    def var_at(self, i: int) -> Var:
        """A Var of node ``i`` of the current episode."""
        return self._var(self._check_index(i, "var_at"))

    def value_at(self, i: int) -> Any:
        """A read-only view of node ``i``'s value (as ``value``, by index)."""
        return _read_only(self._values[self._check_index(i, "value_at")])

    def grad_at(self, i: int) -> Any | None:
        """A read-only view of node ``i``'s stored gradient, or None where none is stored."""
        g = self._grads[self._check_index(i, "grad_at")]
        return None if g is None else _read_only(g)

    def node(self, v: Var | int) -> Node:
        """The description of one node (by Var or index)."""
        if isinstance(v, Var):
            self._check_var(v, "node")
            i = v.index
        else:
            i = self._check_index(v, "node")
        return self._node_at(i)

    def nodes(self) -> list[Node]:
        """Descriptions of every node, in tape order."""
        self._check_open("nodes")
        return [self.node(i) for i in range(len(self))]

    def stats(self) -> dict:
        """Counts: nodes, params, stored gradients, and the work of the last backward."""
        self._check_open("stats")
        return {"nodes": len(self), "params": sum(op is PARAM for op in self._op),
                "grad_buffers": sum(g is not None for g in self._grads),
                "requires_grad": sum(self._req), **self._last_backward}

    # ---------------------------------------------------------------- backward / episodes
    def backward(self, loss: Var, create_graph: bool = False) -> list[Var] | None:
        """Compute d loss / d node for every node with a parameter upstream (one reverse walk).

        ``create_graph=True`` records the backward pass on the tape instead (``gtape.higher``):
        the gradients are Vars that can be differentiated again; returns them, one per param.
        """
        if create_graph is not False:
            from . import higher
            return higher.backward(self, loss, create_graph)
        if not isinstance(loss, Var):
            raise TypeError(f"backward: loss is {describe(loss)}; expected a scalar Var")
        if self._no_grad:
            raise RuntimeError("backward: called inside tp.no_grad(), where nothing is "
                               "recorded for backward; call it after the block")
        if loss.tape is not self:
            raise ValueError(f"backward: loss {loss!r} belongs to another tape; expected a Var "
                             "of this tape")
        self._check_var(loss, "backward")
        shape = self._shape[loss.index]
        if math.prod(shape) != 1:
            raise ValueError(f"backward: loss has shape {shape}; expected a scalar (one element), "
                             "e.g. g.sum(...) or g.mean(...)")
        if not self._req[loss.index]:
            raise ValueError(f"backward: no parameter reaches the loss (node {loss.index}, "
                             f"{self._op[loss.index].name}): every gradient would be zero; "
                             "build the loss from tp.param(...) Vars")
        self._check_fresh(loss.index)
        graph = _backward.Graph(self._op, self._inputs, self._attrs, self._shape, self._req,
                                self._values, self._grads)
        adjust, self._next_adjust = self._next_adjust, None
        if adjust is None:
            self._last_backward = self._passes.run(graph, loss.index, self._dtype)
        else:  # op by op on the backend itself: never recorded, never replayed
            self._last_backward = _backward.run(self._be, graph, loss.index, self._dtype,
                                                adjust=adjust)
        self._backwards += 1
        self._grad_loss = loss.index
        self._note_growth()
        return None

    def no_grad(self) -> Any:
        """``with tp.no_grad():`` -- nothing recorded inside needs a gradient (torch's
        ``no_grad``): no backward work or memory; the block's results stay readable until
        the next ``no_grad`` block drops them (``gtape.nograd``)."""
        from .nograd import NoGrad
        return NoGrad(self)

    inference_mode = no_grad  # torch's other name for it

    def adjust_next_backward(self, fn: Any) -> None:
        """Hook the next ``backward`` only: ``fn(i, g)`` gets each visited node's total gradient
        ``g`` (an array of the tape's backend) and returns the array used in its place (same
        shape and dtype), which then flows on to the node's inputs.

        A fault-drill and debugging hook (``gverify.faults`` moves one gradient by some ulps):
        that pass runs op by op, never recorded or replayed; ``None`` removes a pending hook.
        """
        if fn is not None and not callable(fn):
            raise TypeError(f"adjust_next_backward: fn is {describe(fn)}; expected a callable "
                            "fn(node_index, grad) -> grad, or None")
        self._check_open("adjust_next_backward")
        self._next_adjust = fn

    def overwrite_value_at(self, i: int, x: Any) -> None:
        """Overwrite node ``i``'s recorded value in place with host data ``x`` (its shape).

        A fault-drill and debugging hook (``gverify.faults``): later reads and the next
        ``backward`` see the new bits as what the node computed; nodes already computed from
        it keep their values, and no staleness clock ticks (use ``set_value`` to update a
        parameter).
        """
        i = self._check_index(i, "overwrite_value_at")
        buf = self._values[i]
        host = np.asarray(x)
        if tuple(host.shape) != self._shape[i] or host.dtype != self._dtype:
            raise ValueError(f"overwrite_value_at: node {i} holds shape {self._shape[i]} and "
                             f"dtype {self._dtype}; got {describe(x)}; expected the same shape "
                             "and dtype (host data)")
        self._be.write(buf, host)

    @property
    def backward_count(self) -> int:
        """Successful ``backward`` calls so far (an optimizer refuses a step without a new one)."""
        return self._backwards

    def mark(self) -> Mark:
        """The current position; ``reset_to`` it drops every later node."""
        self._check_open("mark")
        return Mark(self._id, len(self), self._serial[-1] if self._serial else -1)

    def reset_to(self, mark: Mark) -> None:
        """Drop nodes after ``mark``, zero gradients, keep buffers for reuse (no re-allocation)."""
        self._check_open("reset_to")
        if not isinstance(mark, Mark) or mark.tape_id != self._id:
            raise ValueError(f"reset_to: {mark!r} is not a mark of this tape")
        n = mark.length
        if (isinstance(n, bool) or not isinstance(n, int) or n < 0
                or (n == 0) != (mark.serial == -1)):
            raise ValueError(f"reset_to: {mark!r} is not a mark this tape made (take marks "
                             "with tp.mark())")
        if n > len(self) or (n and self._serial[n - 1] != mark.serial):
            raise ValueError(f"reset_to: {mark!r} points past nodes already dropped by an "
                             "earlier reset_to; take a new mark")
        self._note_dropped_params(n)
        self._commit_states(n)
        self._truncate(n)
        self._no_grad_block = None
        self._grad_loss = self._grad_vars = None
        grads, ops, params = self._grads, self._op, []
        for i in range(n):
            if ops[i] is PARAM:
                params.append(grads[i])
            else:
                grads[i] = None
        self._zero_all(params)
        self._growth = []

    def episode(self) -> Any:
        """``with tp.episode():`` -- a mark on entry (after the params), ``reset_to`` on exit."""
        from .episode import Episode
        return Episode(self)

    def close(self) -> None:
        """Release every value and gradient buffer (device memory included); idempotent."""
        self._clear_table()
        self._gcache.clear()
        self._passes.clear()
        self._zeroing.clear()
        self._closed = True

    # ---------------------------------------------------------------- checks (internal)
    def _node_field(self, v: Var, field: str) -> Any:
        self._check_var(v, field)
        return self._field_at(v.index, field)

    def _check_index(self, i: Any, where: str) -> int:
        self._check_open(where)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{where}: expected a node index (int), got {describe(i)}")
        if not 0 <= i < len(self):
            raise IndexError(f"{where}: node {i} does not exist; the tape has {len(self)} "
                             f"nodes (expected 0 <= index < {len(self)})")
        return int(i)

    def _zero_all(self, bufs: list[Any]) -> None:
        """``_zero`` each buffer; on a kernel backend the fills are recorded the first time
        and replayed while the buffers are the same (on cpu: one native call)."""
        key = tuple(map(id, bufs))  # the recording keeps the buffers alive: ids stay unique
        held = self._zeroing.current(key)
        if held is not None:
            held[0]()
            return
        if not bufs or not recordable(self._be):
            for buf in bufs:
                self._zero(buf)
            return

        def fills(rec: Any) -> None:
            for buf in bufs:
                rec.fill(tuple(buf.shape), 0.0, self._dtype, out=buf)

        self._zeroing.keep((record(self._be, fills)[1], tuple(bufs)), key)

    def _zero(self, buf: Any) -> None:
        """Set a buffer to +0.0 in place (the gtensor fill op, a kernel on sim and cuda)."""
        self._be.fill(tuple(buf.shape), 0.0, self._dtype, out=buf)


def _is_dtype(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def _read_only(a: Any) -> Any:
    """A view of ``a`` that cannot be written (numpy and sim; cupy has no such flag)."""
    view = a.view()
    if hasattr(view, "flags") and isinstance(a, np.ndarray):
        view.flags.writeable = False
    return view

