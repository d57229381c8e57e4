"""The captured program: device buffers allocated once and the launch lists that fill them.

``capture`` re-runs one recorded episode on the device (``gtape.trace``): the forward as one
launch per op node, the backward as the tape's own backward engine (one launch per gtensor op
it calls), each launch prepared once. A device optimizer made with ``adam``/``sgd`` is gopt's
optimizer over the program's parameter buffers; its step is recorded the first time it runs.
Replaying re-runs the prepared launches: whatever ``set_input`` wrote into an input buffer
since is what they read. On cuda the whole training step (forward, backward, optimizer) runs
as one CUDA graph.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import gopt
import gtape
import gtensor
import numpy as np
from gtape import const_roles
from gtape.trace import CaptureError, Trace, trace
from gtensor.dtypes import INDEX as TYPED_DTYPES_INT
from gtensor.dtypes import TYPED_DTYPES
from gtensor.recording import Launch

from .device import Device, device_for
from .optim import DeviceOptimizer


class Program:
    """One training episode of a tape as a static program on a device (see ``capture``)."""

    def __init__(self, tape: gtape.Tape, tr: Trace, model: Any = None) -> None:
        self._tape = tape
        self._tr = tr
        self._serials = [tape.var_at(n.index).serial for n in tr.nodes]
        self._device: Device = device_for(tr.rec)
        self._store = ParamStore(self)
        self._whole: dict[int, Any] = {}  # id(dopt) -> the whole step, built for that optimizer
        self._backwards = 0  # backward replays (a device optimizer refuses stale gradients)
        self._fresh = InputClock(self, model)  # the inputs by kind and name; their refreshes
        # input node -> the captured nodes that read it through an op with an input check
        # (set_input runs those checks on fresh data; listed once: the nodes are fixed)
        self._checked_readers: dict[int, list] = {}
        for n in tr.nodes:
            if not isinstance(n.op, gtape.Leaf) and n.op.check is not None:
                for j in dict.fromkeys(n.inputs):
                    self._checked_readers.setdefault(j, []).append(n)

    # ---------------------------------------------------------------- description
    @property
    def backend(self) -> gtensor.Backend:
        """The backend the program runs on (a recorder over sim or cuda)."""
        return self._tr.rec

    @property
    def dtype(self) -> np.dtype:
        """The dtype of every device buffer."""
        return self._tr.dtype

    @property
    def tape(self) -> gtape.Tape:
        """The tape the episode was recorded on."""
        return self._tape

    @property
    def inner(self) -> str:
        """The inner-product contract of every matmul / bmm launch (the tape's)."""
        return self._tape.inner

    @property
    def trace(self) -> Trace:
        """The traced episode: its nodes, device buffers and recorded launches."""
        return self._tr

    @property
    def device(self) -> Device:
        """Where the launches run (the simulator, or a CUDA stream and its graphs)."""
        return self._device

    def units(self, phase: str, launches: list[Launch]) -> list[Launch]:
        """What runs for ``phase`` ("forward", "backward" or "step": forward + backward + the
        optimizer): the recorded launches themselves. A fusing engine (ggpu-fuse) overrides
        this to return its generated kernels instead; everything else stays the same."""
        return launches

    @property
    def nodes(self) -> list[gtape.Node]:
        """The captured nodes (the episode up to the loss)."""
        return list(self._tr.nodes)

    @property
    def forward_launches(self) -> list[Launch]:
        """The recorded forward launches, in order."""
        return list(self._tr.forward)

    @property
    def backward_launches(self) -> list[Launch]:
        """The recorded backward launches, in order."""
        return list(self._tr.backward)

    @property
    def inputs(self) -> dict[str, gtape.Var]:
        """The refreshable inputs (data and random keys), by name, in node order.

        A data input's name is the one given to ``tp.const(x, name=...)`` (``cross_entropy``'s
        int64 labels are ``"labels"``, ``nn.Embedding``'s ids ``"ids"``), else ``"const<i>"``
        for node ``i``; a key a module drew is named by the module's path in ``capture``'s
        ``model`` (``"blocks.0.attn.dropout"``; ``"<path>#<j>"`` for its j-th draw of a step
        when it draws several), other keys ``"rng_key"``. A name given twice gets ``"#<i>"``
        appended from its second use on. Per-shape constants are in ``constants``.
        """
        return {k: v for k, v in self._fresh.names.items() if v.index not in self._fresh.consts}

    @property
    def constants(self) -> dict[str, gtape.Var]:
        """The per-shape constants the program holds without being asked (causal masks, fill
        values, a ported forward's position ids: ``gtape.const_roles``), by name."""
        return {k: v for k, v in self._fresh.names.items() if v.index in self._fresh.consts}

    @property
    def key_inputs(self) -> dict[str, tuple[Any, int] | None]:
        """The key inputs by name: (owner module, its draw in the captured step) for those a
        module drew (``advance_keys`` refreshes them), None for keys given as plain Keys."""
        return {self._fresh.label(i): self._fresh.owned.get(i) for i in sorted(self._fresh.keys)}

    def stats(self) -> dict:
        """Counts: nodes, launches per phase, stored gradients and device bytes."""
        grads = [g for g in self._tr.grads if g is not None]
        return {"nodes": len(self._tr.nodes), "forward_launches": len(self._tr.forward),
                "backward_launches": len(self._tr.backward), "grad_buffers": len(grads),
                "value_bytes": sum(int(v.nbytes) for v in self._tr.values),
                "grad_bytes": sum(int(g.nbytes) for g in grads)}

    # ---------------------------------------------------------------- running
    def set_input(self, x: gtape.Var | str, data: Any) -> None:
        """Copy fresh data into input ``x``'s device buffer (shape fixed at capture).

        ``x`` is the const's Var or its name in ``inputs``. ``data`` is host data of float32 or
        float64 (converted once to the program's dtype), or an array of the program's device
        with its exact dtype; an int64 input (ids, labels) takes host integers, checked against
        the range of every op that reads it, a bool input host bools; a key input of the random
        ops (``"rng_key"``: dropout's mask, ``g.rng`` draws) takes a ``gtape.rng.Key``, e.g.
        ``base.fold(step)`` for fresh masks each step. Once inputs are refreshed
        step after step, the next step refuses to run if some were refreshed for the previous
        step but not for this one (see ``hold_input``).
        """
        if isinstance(x, str):
            x = self._fresh.by_name("set_input", x)
        i = self._check_var("set_input", x)
        node = self._tr.nodes[i]
        if node.op is not gtape.CONST:
            raise CaptureError(f"set_input: node {i} ({node.name}) is not an input of the "
                               "program; inputs are its const leaves: "
                               f"{ {k: v.index for k, v in self.inputs.items()} }")
        if i in self._fresh.owned:
            owner, _ = self._fresh.owned[i]
            where = self._fresh.paths.get(id(owner))
            raise ValueError(
                f"set_input: key input {self.name_of(i)!r} belongs to the "
                f"{type(owner).__name__} {'at ' + repr(where) if where else 'module'}: "
                "prog.advance_keys() refreshes it with the key that module's next training "
                "forward draws (the eager run's); a key set by hand would silently make "
                "another run. To reuse the captured key on purpose: "
                f"hold_input({self.name_of(i)!r})")
        buf = self._tr.values[i]
        be = self._tr.rec
        if be.is_array(data) and buf.dtype in TYPED_DTYPES:
            data = be.to_numpy(data)  # ids / masks: checked on the host like host data
        if be.is_array(data):
            if data.dtype != self.dtype or tuple(data.shape) != node.shape:
                raise ValueError(f"set_input: input node {i} holds shape {node.shape} and "
                                 f"dtype {self.dtype}; got a device array of shape "
                                 f"{tuple(data.shape)} and dtype {data.dtype}")
            with self._device.ordered():
                be.copy(data, out=buf)
            return
        if type(data).__module__.split(".")[0] == "cupy":
            raise TypeError("set_input: got a cupy array but the program runs on "
                            f"{be.name}; pass host data")
        if isinstance(data, gtape.rng.Key):  # a random op's key input: the Key's two words
            data = data.array()
        host = np.asarray(data)
        if buf.dtype in TYPED_DTYPES:
            host = self._typed_input(i, node, buf.dtype, host)
            with self._device.ordered():
                be.write(buf, host)
            self._fresh.refreshed(i)
            return
        if host.dtype.kind != "f" or host.dtype.itemsize not in (4, 8):
            raise TypeError(f"set_input: data for input node {i} has dtype {host.dtype}; "
                            "expected float32 or float64 (converted once to the program's "
                            f"{self.dtype})")
        if tuple(host.shape) != node.shape:
            raise ValueError(f"set_input: input node {i} has shape {node.shape} (fixed at "
                             f"capture); got data of shape {tuple(host.shape)}")
        with self._device.ordered():
            be.write(buf, host)
        self._fresh.refreshed(i)

    def _typed_input(self, i: int, node: Any, dtype: np.dtype, host: np.ndarray) -> np.ndarray:
        """Check fresh int64 ids / bool mask data for input node ``i`` (dtype, shape, and the
        range every op reading it demands), before anything is written."""
        want = "int64 ids" if dtype == TYPED_DTYPES_INT else "a bool mask"
        ok = host.dtype.kind in "iu" if dtype == TYPED_DTYPES_INT else host.dtype == np.bool_
        if not ok:
            raise TypeError(f"set_input: input node {i} ({self.name_of(i)}) holds {want}; got "
                            f"data of dtype {host.dtype}")
        shape = node.shape
        if tuple(host.shape) != shape and shape[-1:] == (1,) and tuple(host.shape) == shape[:-1]:
            host = host.reshape(shape)  # labels (N,) for their (N, 1) const
        if tuple(host.shape) != shape:
            raise ValueError(f"set_input: input node {i} has shape {shape} (fixed at capture); "
                             f"got data of shape {tuple(host.shape)}")
        host = host.astype(dtype)
        values = self._tr.values
        for n in self._checked_readers.get(i, ()):
            ins = [host if j == i else values[j] for j in n.inputs]
            try:  # the op's own check: what the eager call refuses, with its message
                n.op.check(ins, n.attrs)
            except (IndexError, ValueError) as e:
                raise type(e)(f"set_input: input node {i} ({self.name_of(i)}): {e}") from None
        return host

    def advance_keys(self) -> dict[str, gtape.rng.Key]:
        """Refresh every key input a module drew with the key that module's next training
        forward draws: per module, as many keys as it drew in the captured step, taken from
        the module itself (``next_keys``: ``Dropout.calls``, ``MultiheadAttention.calls``, a
        ported module's functional counter move on), so the program's steps and the eager
        loop draw from one counter and the keys equal the eager run's by construction. Call it
        before each step after the first (the first reuses the captured keys, which the
        captured forward drew); returns {input name: key written}.
        """
        plan = self._fresh.key_plan()
        if not plan:
            return {}
        writes = []
        for owner, uses in plan:
            base = min(t for _, t in uses)
            n = max(t for _, t in uses) - base + 1
            keys = owner.next_keys(n)
            if len(keys) != n or not all(isinstance(k, gtape.rng.Key) for k in keys):
                raise TypeError(f"advance_keys: {type(owner).__name__}.next_keys({n}) returned "
                                f"{keys!r}; expected {n} gtape.rng.Key")
            writes += [(i, keys[t - base]) for i, t in uses]
        be = self._tr.rec
        with self._device.ordered():
            for i, k in writes:
                be.write(self._tr.values[i], k.array())
        for i, _ in writes:
            self._fresh.refreshed(i)
        return {self.name_of(i): gtape.rng.Key(*k.words) for i, k in writes}

    def name_of(self, i: int) -> str:
        """The name of input node ``i`` in ``inputs`` (or ``constants``)."""
        return self._fresh.label(i)

    def hold_input(self, x: gtape.Var | str) -> None:
        """Declare input ``x`` (a Var or a name) meant to keep its data across steps: it is
        never reported stale (a table written once, say)."""
        if isinstance(x, str):
            x = self._fresh.by_name("hold_input", x)
        i = self._check_var("hold_input", x)
        if self._tr.nodes[i].op is not gtape.CONST:
            raise CaptureError(f"hold_input: node {i} ({self._tr.nodes[i].name}) is not an "
                               f"input of the program; inputs are {list(self.inputs)}")
        self._fresh.held.add(i)
        self._fresh.owned.pop(i, None)  # a held key keeps its captured value: advance skips it

    def forward(self) -> None:
        """Replay the forward launches (one per op node)."""
        self._fresh.check("forward")
        self._device.run(self.units("forward", self._tr.forward))

    def backward(self) -> None:
        """Replay the backward launches (the gradient of the loss; frozen nodes get none)."""
        self._device.run(self.units("backward", self._tr.backward))
        self._backwards += 1

    def step(self, dopt: DeviceOptimizer) -> None:
        """The whole training step: forward, backward and ``dopt``'s update.

        On cuda the three run as ONE CUDA graph (built once ``dopt``'s step is recorded).
        """
        self._check_optimizer("step", dopt)
        if not dopt.recorded:
            self.forward()
            self.backward()
            dopt.step()
            return
        self._fresh.check("step")
        self._backwards += 1  # the graph's backward, before the optimizer's checks
        dopt.advance()
        whole = self._whole.get(id(dopt))
        if whole is None or whole[0] is not dopt.segment:
            launches = self.units("step", self._tr.forward + self._tr.backward + dopt.segment)
            whole = self._whole[id(dopt)] = (dopt.segment, self._device.graph(launches))
        self._device.launch_graph(whole[1])

    def loss(self) -> float:
        """The loss of the last forward (a device-to-host read of one scalar)."""
        with self._device.ordered():
            return float(self._tr.rec.to_numpy(self._tr.values[self._tr.loss]).reshape(()))

    def value(self, v: gtape.Var) -> np.ndarray:
        """A host copy of node ``v``'s value on the device."""
        i = self._check_var("value", v)
        with self._device.ordered():
            return self._tr.value(i)

    def grad(self, v: gtape.Var) -> np.ndarray:
        """A host copy of d loss / d ``v`` from the last backward (zeros where none is stored)."""
        i = self._check_var("grad", v)
        with self._device.ordered():
            g = self._tr.grad(i)
        return np.zeros(self._tr.nodes[i].shape, self.dtype) if g is None else g

    def value_at(self, i: int) -> np.ndarray:
        """A host copy of captured node ``i``'s value (by index, like ``Tape.value_at``)."""
        with self._device.ordered():
            return self._tr.value(self._check_index("value_at", i))

    def grad_at(self, i: int) -> np.ndarray | None:
        """A host copy of captured node ``i``'s gradient buffer, or None where none is stored."""
        with self._device.ordered():
            return self._tr.grad(self._check_index("grad_at", i))

    def sync_params(self, tp: gtape.Tape) -> None:
        """Copy the device's parameter values back into ``tp`` (the tape captured from), and
        its states (``Tape.state``: running statistics the steps updated)."""
        if tp is not self._tape:
            raise CaptureError("sync_params: tp is not the tape this program was captured "
                               "from; expected that tape")
        if tp.closed:
            raise CaptureError("sync_params: the tape is closed")
        hosts = []
        states = [n.index for n in self._tr.nodes if n.op is gtape.STATE]
        for i in (*self._tr.params, *states):
            v = self._var(i, "sync_params")
            with self._device.ordered():
                hosts.append((v, self._tr.value(i)))
        for v, host in hosts:
            (tp.set_state if v.op == "state" else tp.set_value)(v, host)

    # ---------------------------------------------------------------- optimizers
    def adam(self, params: Any = None, lr: float | None = None,
             betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
             weight_decay: float = 0.0) -> DeviceOptimizer:
        """gopt's Adam, exactly, with its state on the device.

        ``params``: the captured tape's parameters or param-group dicts (torch's, as
        ``gopt.Adam``), or None to register parameters with ``add``; a number in its place is
        the learning rate (``prog.adam(0.1)``, as before groups).
        """
        params, lr = _params_lr("adam", params, lr, 1e-3)
        return self._device_opt(gopt.Adam, params, lr=lr, betas=betas, eps=eps,
                                weight_decay=weight_decay)

    def adamw(self, params: Any = None, lr: float | None = None,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 1e-2) -> DeviceOptimizer:
        """gopt's AdamW, exactly, with its state on the device (``params`` as for ``adam``:
        ``prog.adamw([{"params": decay, "weight_decay": 0.1}, ...], lr=3e-4)``)."""
        params, lr = _params_lr("adamw", params, lr, 1e-3)
        return self._device_opt(gopt.AdamW, params, lr=lr, betas=betas, eps=eps,
                                weight_decay=weight_decay)

    def sgd(self, params: Any = None, lr: float | None = None,
            weight_decay: float = 0.0) -> DeviceOptimizer:
        """gopt's SGD, exactly, on the device (``params`` as for ``adam``; ``prog.sgd(0.1)``
        is the learning rate, parameters registered with ``add``)."""
        params, lr = _params_lr("sgd", params, lr, None)
        return self._device_opt(gopt.SGD, params, lr=lr, weight_decay=weight_decay)

    def _device_opt(self, kind: type[gopt.Optimizer], params: Any, **kw: Any
                    ) -> DeviceOptimizer:
        """``kind`` over the program's parameter store: with the given parameters / groups
        (checked to be parameters of the captured episode), or none yet."""
        if params is None:
            return DeviceOptimizer(self, kind(self._store, **kw))
        return DeviceOptimizer(self, kind(params, store=self._store, **kw))

    # ---------------------------------------------------------------- checks (internal)
    def _var(self, i: int, where: str) -> gtape.Var:
        """The tape's live Var of captured node ``i``."""
        tp = self._tape
        if tp.closed or i >= len(tp) or tp.var_at(i).serial != self._serials[i]:
            raise CaptureError(f"{where}: node {i} of the captured episode is no longer on the "
                               "tape (it was reset or closed)")
        return tp.var_at(i)

    def _check_var(self, where: str, v: Any) -> int:
        if not isinstance(v, gtape.Var):
            raise TypeError(f"{where}: expected a Var of the captured tape, got "
                            f"{type(v).__name__}")
        if v.tape is not self._tape:
            raise CaptureError(f"{where}: {v!r} belongs to another tape; expected a Var of the "
                               "tape this program was captured from")
        i = v.index
        if i >= len(self._serials) or v.serial != self._serials[i]:
            raise CaptureError(f"{where}: the Var of node {i} is not a node of the captured "
                               f"episode (nodes 0..{len(self._serials) - 1})")
        return i

    def _check_index(self, where: str, i: Any) -> int:
        n = len(self._serials)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
            raise IndexError(f"{where}: expected a node index 0 <= i < {n}, got {i!r}")
        return int(i)

    def _check_optimizer(self, where: str, dopt: Any) -> None:
        if not isinstance(dopt, DeviceOptimizer) or dopt.program is not self:
            raise TypeError(f"{where}: expected an optimizer made by this program's adam() or "
                            "sgd()")

    def __repr__(self) -> str:
        s = self.stats()
        return (f"<Program {self._tr.rec.name} {self.dtype.name}: {s['nodes']} nodes, "
                f"{s['forward_launches']} + {s['backward_launches']} launches>")


class StaleInputError(RuntimeError):
    """A step would read an input that ``set_input`` refreshed for the previous step but not
    for this one, while other inputs were refreshed (a stale minibatch half)."""


class InputClock:
    """The program's inputs by name, and which ones ``set_input`` refreshed since the last step.

    The rule (``check``, at the start of every forward): let R be the inputs refreshed since
    the previous step and P those refreshed for the previous step. If R is not empty, every
    input of P must be in R (unless held): otherwise the step raises ``StaleInputError``
    naming the stale ones, before anything runs. A step with no refresh at all (full-batch
    training) is fine, and so is a first refresh of only some inputs.

    A key input of the random ops (an input that an op reads as its ``key``: dropout's mask,
    ``g.rng`` draws) is stricter: after the program's first step, every step must refresh it
    (unless held), since a step on the previous key redraws the previous step's random numbers.

    Per-shape constants (``gtape.const_roles``: causal masks, fill values, a ported forward's
    position ids) are held from the start: never reported, listed apart (``constants``).
    Keys a module drew (``gtape.rng.OwnedKey``) are named by the module's path in ``model``
    and refreshed by ``Program.advance_keys``.
    """

    def __init__(self, prog: Program, model: Any = None) -> None:
        tape, nodes = prog._tape, prog._tr.nodes
        consts = [n.index for n in nodes if n.op is gtape.CONST]
        keys = {n.inputs[n.op.inputs.index("key")] for n in nodes
                if not isinstance(n.op, gtape.Leaf) and "key" in n.op.inputs}
        self.keys = keys & set(consts)  # keys made by ops (rng_fold of an input) follow theirs
        self.owned: dict[int, tuple[Any, int]] = {}
        self._plan: tuple[tuple, list] | None = None  # (owned's nodes, key_plan's groups)
        for i in sorted(self.keys):
            got = gtape.rng.key_owner(tape.var_at(i))
            if got is not None and isinstance(got[0], gtape.rng.KeyOwner):
                self.owned[i] = got
        self.paths = _module_paths(model)
        own = _owned_names(self.owned, self.paths)
        names: dict[str, gtape.Var] = {}
        for i in consts:
            v = tape.var_at(i)
            name = own.get(i) or tape.name_of(v) or f"const{i}"
            names[name if name not in names else f"{name}#{i}"] = v
        self.names = names
        self._label = {v.index: k for k, v in names.items()}
        self.consts = {i for i in consts if i not in self.keys and
                       const_roles.role_of(tape.var_at(i)) == const_roles.CONSTANT}
        self.steps = 0
        self.now: set[int] = set()
        self.before: set[int] = set()
        self.held: set[int] = set(self.consts)

    def label(self, i: int) -> str:
        """The name of const node ``i``."""
        return self._label.get(i, f"node {i}")

    def key_plan(self) -> list[tuple[Any, list[tuple[int, int]]]]:
        """The owned key inputs grouped by owner, in node order: (owner, [(node, draw t)])
        (kept until ``owned`` changes: ``hold_input`` drops a key from it)."""
        stamp = tuple(self.owned)
        if self._plan is None or self._plan[0] != stamp:
            groups: dict[int, tuple[Any, list]] = {}
            for i, (owner, t) in sorted(self.owned.items()):
                groups.setdefault(id(owner), (owner, []))[1].append((i, t))
            self._plan = (stamp, list(groups.values()))
        return self._plan[1]

    def by_name(self, where: str, name: str) -> gtape.Var:
        """The input called ``name`` (CaptureError listing the names otherwise)."""
        if name not in self.names:
            raise CaptureError(f"{where}: the program has no input {name!r}; its inputs are "
                           f"{list(self.names)}")
        return self.names[name]

    def refreshed(self, i: int) -> None:
        """Input node ``i`` got fresh data."""
        self.now.add(i)

    def check(self, where: str) -> None:
        """Refuse a step that mixes fresh and stale inputs, or that would reuse the previous
        step's random key; then start the next step's count."""
        stale_keys = sorted(self.keys - self.now - self.held) if self.steps else []
        if stale_keys:
            name = self._label[stale_keys[0]]
            how = ("call prog.advance_keys() before each step (the keys the modules' next "
                   "training forward draws)" if stale_keys[0] in self.owned else
                   f"call set_input({name!r}, key) with a fresh key each step (e.g. "
                   "base.fold(step))")
            raise StaleInputError(
                f"{where}: random key input(s) {[self._label[i] for i in stale_keys]} were not "
                "refreshed for this step: it would redraw the previous step's random numbers "
                f"(dropout masks); {how}, or hold_input({name!r}) to reuse them on purpose")
        if self.now:
            stale = sorted(self.before - self.now - self.held)
            if stale:
                names = [self._label[i] for i in stale]
                fresh = [self._label[i] for i in sorted(self.now)]
                raise StaleInputError(
                    f"{where}: input(s) {names} were refreshed by set_input for the previous "
                    f"step but not for this one, while {fresh} were: the step would read stale "
                    f"{names[0]!r} data; call set_input for every input each step (or "
                    f"hold_input({names[0]!r}) if it is meant to keep its data)")
            self.before, self.now = self.now, set()
        self.steps += 1


def _module_paths(model: Any) -> dict[int, str]:
    """id(module) -> its dotted path in ``model`` (a gtape Module; the root is its class name),
    or {} without a model."""
    if model is None:
        return {}
    if not isinstance(model, gtape.nn.Module):
        raise TypeError(f"capture: model is {type(model).__name__}; expected the gtape "
                        "nn.Module whose paths name the program's key inputs (or None)")
    return {id(m): path or type(m).__name__ for path, m in model.named_modules()}


def _owned_names(owned: dict[int, tuple[Any, int]], paths: dict[int, str]) -> dict[int, str]:
    """Names of the owned key inputs found in the model: the module's path, or
    ``<path>#<j>`` for its j-th draw of the step when it draws several."""
    by_owner: dict[int, list[tuple[int, int]]] = {}
    for i, (owner, t) in owned.items():
        by_owner.setdefault(id(owner), []).append((i, t))
    out = {}
    for oid, uses in by_owner.items():
        path = paths.get(oid)
        if path is None:
            continue
        base = min(t for _, t in uses)
        for i, t in uses:
            out[i] = path if len(uses) == 1 else f"{path}#{t - base}"
    return out


class ParamStore:
    """The program's parameters as gopt's optimizers see them (a gopt parameter store)."""

    def __init__(self, prog: Program) -> None:
        self._prog = prog
        self._params: dict[int, gtape.Var] = {}  # id -> the Var check_param accepted

    @property
    def backend(self) -> gtensor.Backend:
        """The program's (recording) backend."""
        return self._prog._tr.rec

    @property
    def dtype(self) -> np.dtype:
        """The program's dtype."""
        return self._prog._tr.dtype

    @property
    def backward_count(self) -> int:
        """Backward replays so far (gopt refuses a step without a new one)."""
        return self._prog._backwards

    def check_param(self, where: str, p: Any) -> gtape.Var:
        """``p`` checked to be a parameter node of the captured episode (a Var found once
        stays one: its tape, index and serial never change, nor do the episode's nodes)."""
        if self._params.get(id(p)) is p:
            return p
        i = self._prog._check_var(where, p)
        node = self._prog._tr.nodes[i]
        if node.op is not gtape.PARAM:
            raise ValueError(f"{where}: {p!r} is a {node.name!r} node; expected a parameter "
                             "made by tp.param(...) (only parameters are updated)")
        self._params[id(p)] = p  # the Var itself kept: its id is never another object's
        return p

    def value(self, p: gtape.Var) -> Any:
        """The parameter's device value buffer."""
        return self._prog._tr.values[p.index]

    def grad(self, p: gtape.Var) -> Any:
        """The parameter's device gradient buffer."""
        return self._prog._tr.grads[p.index]

    def param_buffer(self, p: gtape.Var) -> Any:
        """The parameter's device value buffer, for an in-place update (gopt's step)."""
        return self._prog._tr.values[p.index]

    def note_updated(self, p: gtape.Var) -> None:
        """An in-place update of the parameter's buffer happened (nothing to track here: the
        program's steps read the buffers where they are)."""

    def set_value(self, p: gtape.Var, x: Any) -> None:
        """Copy ``x`` into the parameter's buffer: a device array by the copy op, host data
        (numpy, of the program's dtype and the parameter's shape) by a transfer."""
        buf, be = self._prog._tr.values[p.index], self.backend
        if be.is_array(x):
            be.copy(x, out=buf)
            return
        host = np.asarray(x)
        if host.dtype != self.dtype or tuple(host.shape) != tuple(buf.shape):
            raise ValueError(f"set_value: parameter node {p.index} holds shape "
                             f"{tuple(buf.shape)} and dtype {self.dtype}; got host data of "
                             f"shape {tuple(host.shape)} and dtype {host.dtype}")
        be.write(buf, host)


def _params_lr(where: str, params: Any, lr: Any, default: float | None) -> tuple[Any, Any]:
    """A device optimizer's (params, lr): a real number in the params place is the learning
    rate (the call as it was before groups)."""
    if isinstance(params, Real) and not isinstance(params, bool):
        if lr is not None:
            raise TypeError(f"{where}: the learning rate is given twice ({params!r} in the "
                            f"params place and lr={lr!r}); expected params=parameters or "
                            "groups, lr=a number")
        return None, params
    if lr is None:
        if default is None:
            raise TypeError(f"{where}: lr is missing; expected the learning rate")
        lr = default
    return params, lr


def capture(tp: gtape.Tape, loss: gtape.Var, backend: str = "cuda",
            dtype: Any = None, model: Any = None) -> Program:
    """Turn the episode of ``tp`` ending at ``loss`` into a static program on ``backend``.

    ``backend`` is "sim" or "cuda" (a device), or "cpu": the compiled host kernels, the whole
    step then one native call; ``dtype="float32"`` on a float64 tape gives float32 buffers (a
    tolerance contract, not bits: see docs/replay.md). ``model`` (optional, the gtape module
    the loss came from) names each key input a module drew by that module's path
    (``prog.advance_keys()`` refreshes them with or without it). Refuses, naming the
    node and why: a non-scalar loss, a Var of another tape, an op without a kernel, a gradient
    path through an op without a backward rule, a closed tape. The episode's values are
    recomputed on the device during capture (so the program starts at the tape's state).
    """
    if model is not None:
        _module_paths(model)  # checked before anything is allocated
    tr = trace(tp, loss, backend, dtype, where="capture")
    return Program(tp, tr, model)
