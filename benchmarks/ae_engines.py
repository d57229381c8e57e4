"""The engines of the AE-step benchmark: one step factory per column, and the table of them.

Each factory is ``make(dtype, hidden) -> step`` where ``step()`` runs one training step
(forward + backward + Adam, L2 on the weights) and returns the loss: our tape per backend, the
captured cpu step (``_common.captured_step``), hand-written numpy + BLAS, PyTorch eager,
torch.compile and JAX jit. An engine that cannot run here raises ImportError or Unavailable.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _paths  # noqa: F401 - first of ours: puts the repository's packages on sys.path
import gtape as g
import numpy as np
from _common import (
    ALPHA,
    B1,
    B2,
    EPS,
    LR,
    Make,
    Step,
    Unavailable,
    add_l2,
    captured_step,
    problem,
    tape_loop_step,
    torch_ae_loss,
)
from gdemos import model
from gopt import Adam

COMPILE_WARMUP = 3  # steps torch.compile's engine runs while it is made (compiling; untimed)


def tape_parts(backend: str, dtype: str, hidden: tuple[int, ...] = model.HIDDEN,
               inner: str = "plain") -> tuple[g.Tape, list[g.Var], Adam, Callable[[], g.Var]]:
    """The tape on ``backend`` (inner-product contract ``inner``), its parameters, its Adam and
    the loss of the next minibatch."""
    batches, init = problem(hidden)
    tp = g.Tape(backend, dtype, inner=inner)
    ps = [tp.param(a) for a in init]
    opt = add_l2(Adam(tp, lr=LR, betas=(B1, B2), eps=EPS), ps)
    xs = itertools.cycle(batches)

    def loss() -> g.Var:
        xb = tp.const(next(xs))
        return g.mse(model.forward(xb, ps), xb)
    return tp, ps, opt, loss


def tape_step(backend: str, inner: str = "plain") -> Make:
    """Our tape on ``backend``: the mark/reset minibatch loop body of rung 1."""
    def make(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
        tp, _, opt, loss = tape_parts(backend, dtype, hidden, inner)
        return tape_loop_step(tp, opt, loss)
    return make


def numpy_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """Hand-written numpy backprop + Adam (BLAS matmuls, in-place updates)."""
    batches, init = problem(hidden)
    dt = np.dtype(dtype)
    xs = itertools.cycle([b.astype(dt) for b in batches])
    ps = [a.astype(dt) for a in init]
    ms = [np.zeros_like(p) for p in ps]
    vs = [np.zeros_like(p) for p in ps]
    n = len(ps) // 2
    st = {"b1p": 1.0, "b2p": 1.0}

    def step() -> float:
        xb = next(xs)
        acts, pre = [xb], []
        for k in range(n):
            z = acts[-1] @ ps[2 * k] + ps[2 * k + 1]
            pre.append(z)
            acts.append(np.maximum(z, 0) if k < n - 1 else z)
        diff = acts[-1] - xb
        loss = float(np.mean(diff * diff))
        delta = diff * dt.type(2.0 / diff.size)
        grads = [None] * len(ps)
        for k in range(n - 1, -1, -1):
            grads[2 * k] = acts[k].T @ delta
            grads[2 * k + 1] = delta.sum(axis=0, keepdims=True)
            if k:
                delta = (delta @ ps[2 * k].T) * (pre[k - 1] > 0)
        st["b1p"] *= B1
        st["b2p"] *= B2
        lr_t = dt.type(LR * math.sqrt(1.0 - st["b2p"]) / (1.0 - st["b1p"]))
        for k, (p, gr, m, v) in enumerate(zip(ps, grads, ms, vs)):
            if k % 2 == 0:
                gr += dt.type(ALPHA) * p
            m *= dt.type(B1)
            m += dt.type(1 - B1) * gr
            v *= dt.type(B2)
            v += dt.type(1 - B2) * (gr * gr)
            p -= lr_t * m / (np.sqrt(v) + dt.type(EPS))
        return loss
    return step


def _torch_problem(dtype: str, hidden: tuple[int, ...]) -> tuple[Any, list[Any], Any]:
    """The minibatches (cycled), the parameters and torch.optim.Adam (L2 on the weights)."""
    import torch

    batches, init = problem(hidden)
    tdt = getattr(torch, dtype)
    xs = itertools.cycle([torch.tensor(b, dtype=tdt) for b in batches])
    ps = [torch.tensor(a, dtype=tdt, requires_grad=True) for a in init]
    groups = [{"params": ps[0::2], "weight_decay": ALPHA}, {"params": ps[1::2]}]
    return xs, ps, torch.optim.Adam(groups, lr=LR, betas=(B1, B2), eps=EPS)


def torch_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """PyTorch eager: nn-free modules, F.mse_loss, torch.optim.Adam with per-group weight decay."""
    xs, ps, opt = _torch_problem(dtype, hidden)

    def step() -> float:
        loss = torch_ae_loss(ps, next(xs))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def torch_step_1thread(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """PyTorch eager on one thread (``torch.set_num_threads(1)`` around each step, ~0.2 us)."""
    import torch

    inner = torch_step(dtype, hidden)

    def step() -> float:
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return inner()
        finally:
            torch.set_num_threads(n)
    return step


def torch_compile_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """torch.compile (inductor, CPU) of one function doing forward, loss, backward and Adam.

    Dynamo splits the function at ``loss.backward()``: the forward + loss graph (its backward
    compiled ahead by AOTAutograd) and the Adam update graph; the grads are set to None
    outside. It compiles during ``COMPILE_WARMUP`` steps run here (their seconds on
    ``step.compile_s``), so the timed steps never compile; a failure raises Unavailable.
    Adam's step counters are made float64 up front: eager Adam takes its bias corrections in
    Python floats, compiled Adam in the counter's dtype (float32 by default), which would
    drift from the eager trajectory by ~1e-7 in float64.
    """
    import torch

    xs, ps, opt = _torch_problem(dtype, hidden)
    for p in ps:
        opt.state[p] = {"step": torch.tensor(0.0, dtype=torch.float64),
                        "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}

    def train(xb: Any) -> Any:
        loss = torch_ae_loss(ps, xb)
        loss.backward()
        opt.step()
        return loss.detach()

    t0 = time.perf_counter()
    try:
        import torch._dynamo
        import torch._inductor.config

        torch._dynamo.reset()  # one compiled engine at a time: no stale cache entries
        torch._inductor.config.compile_threads = 1  # no compile worker pool on a small box
        compiled = torch.compile(train, dynamic=False)

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            return compiled(next(xs)).item()

        for _ in range(COMPILE_WARMUP):
            step()
    except Exception as err:  # noqa: BLE001 - no C++ compiler, an inductor bug: say so
        raise Unavailable(f"compile failed: {_short(err)}") from err
    step.compile_s = time.perf_counter() - t0  # type: ignore[attr-defined]
    return step


def jax_step(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
    """JAX: value_and_grad + Adam (same formulas as gopt) in one jitted function."""
    import jax
    import jax.numpy as jnp

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    batches, init = problem(hidden)
    xs = itertools.cycle([jnp.asarray(b, dtype=dtype) for b in batches])
    ps = [jnp.asarray(a, dtype=dtype) for a in init]
    ms = [jnp.zeros_like(p) for p in ps]
    vs = [jnp.zeros_like(p) for p in ps]
    n = len(ps) // 2

    def loss_fn(params, xb):
        h = xb
        for k in range(n):
            h = h @ params[2 * k] + params[2 * k + 1]
            if k < n - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - xb) ** 2)

    @jax.jit
    def update(params, ms, vs, xb, lr_t):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb)
        new_p, new_m, new_v = [], [], []
        for k, (p, gr, m, v) in enumerate(zip(params, grads, ms, vs)):
            if k % 2 == 0:
                gr = gr + ALPHA * p
            m = B1 * m + (1 - B1) * gr
            v = B2 * v + (1 - B2) * (gr * gr)
            new_p.append(p - lr_t * m / (jnp.sqrt(v) + EPS))
            new_m.append(m)
            new_v.append(v)
        return loss, new_p, new_m, new_v

    st = {"b1p": 1.0, "b2p": 1.0, "p": ps, "m": ms, "v": vs}

    def step() -> float:
        st["b1p"] *= B1
        st["b2p"] *= B2
        lr_t = LR * math.sqrt(1.0 - st["b2p"]) / (1.0 - st["b1p"])
        loss, st["p"], st["m"], st["v"] = update(st["p"], st["m"], st["v"], next(xs), lr_t)
        return float(loss)  # blocks until the step is done
    return step


def _short(err: BaseException, limit: int = 100) -> str:
    """The exception's type and the first line of its message, fit for a table cell."""
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    text = text.replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------- the engine table
@dataclass(frozen=True)
class Engine:
    """One column of the benchmark: a name, a step factory and whether it is exact."""

    name: str
    make: Make
    exact: bool = False  # bit-identical to the numpy tape
    slow: bool = False  # timed --sim-steps times (the sim tape)


TORCH = "PyTorch eager (CPU)"
TORCH_1 = "PyTorch eager (CPU), 1 thread"
COMPILED = "torch.compile (CPU)"
JAX = "JAX jit (CPU)"
TAPE_CPU = "tape, cpu backend"
CAPTURED = "tape, captured cpu step"
COMPILED_CPU = "tape, captured cpu step compiled (ggpu-fuse)"
ENGINES: list[Engine] = [
    Engine("tape, numpy backend", tape_step("numpy"), exact=True),
    Engine("tape, sim backend", tape_step("sim"), exact=True, slow=True),
    Engine(TAPE_CPU, tape_step("cpu"), exact=True),
    Engine(CAPTURED, captured_step("cpu"), exact=True),
    Engine(COMPILED_CPU, captured_step("cpu", fused=True), exact=True),
    Engine("numpy + BLAS, hand-written", numpy_step),
    Engine(TORCH, torch_step),
    Engine(TORCH_1, torch_step_1thread),
    Engine(COMPILED, torch_compile_step),
    Engine(JAX, jax_step),
]
TAPE_CPU_FMA = "tape, cpu backend, fma contract"
CAPTURED_FMA = "tape, captured cpu step, fma contract"
COMPILED_CPU_FMA = "tape, captured cpu step compiled (ggpu-fuse), fma contract"
# the width sweep's extra columns: the same exact engines under the fma inner-product contract
# (other bits than the plain engines' by definition, so not in ENGINES' bit-identity check)
SWEEP_ONLY: list[Engine] = [
    Engine(TAPE_CPU_FMA, tape_step("cpu", "fma")),
    Engine(CAPTURED_FMA, captured_step("cpu", inner="fma")),
    Engine(COMPILED_CPU_FMA, captured_step("cpu", fused=True, inner="fma")),
]
SWEEP = {"cpu": TAPE_CPU, "captured": CAPTURED, "compiled": COMPILED_CPU, "torch": TORCH,
         "torch1": TORCH_1, "jax": JAX, "cpu_fma": TAPE_CPU_FMA, "captured_fma": CAPTURED_FMA,
         "compiled_fma": COMPILED_CPU_FMA}


def make_steps(makers: dict[str, Make], dtype: str, hidden: tuple[int, ...] = model.HIDDEN
               ) -> tuple[dict[str, Step], dict[str, str]]:
    """Each engine's step function, or why it cannot run here (not installed, failed)."""
    steps, failed = {}, {}
    for name, make in makers.items():
        try:
            steps[name] = make(dtype, hidden)
        except ImportError as err:
            failed[name] = f"not installed ({err.name})"
        except Unavailable as err:
            failed[name] = str(err)
    return steps, failed


def check_exact(dtype: str, steps: int = 5) -> str:
    """Whether the exact engines' first ``steps`` losses are bit-identical (fresh engines)."""
    traces = {e.name: [e.make(dtype)() for _ in range(steps)] for e in ENGINES if e.exact}
    ref = next(iter(traces.values()))
    bad = [name for name, tr in traces.items() if np.array(tr).tobytes() != np.array(ref).tobytes()]
    return "bit-identical" if not bad else "DIFFER: " + ", ".join(bad)
