"""What the step benchmarks share: the rung-1 AE problem, the tape's training-step loop body,
the captured (replayed) AE step and the AE loss in PyTorch.

Imported by ae_engines.py, ae_facts.py, bench_replay_step.py and bench_lora_step.py (each puts the
packages on ``sys.path`` before importing this module).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import gtape as g
import numpy as np
from gdemos import data, model

BATCH, LR, ALPHA, B1, B2, EPS = 200, 1e-3, 1e-5, 0.9, 0.999, 1e-8
Step = Callable[[], float]
Make = Callable[..., Step]  # make(dtype, hidden=model.HIDDEN) -> a step function


class Unavailable(Exception):
    """An engine that cannot run here; its message goes into the table cell."""


def problem(hidden: tuple[int, ...] = model.HIDDEN) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Ten minibatches of the rung-1 data and the initial parameters [W1, b1, ...]."""
    x = data.manifold(0)
    _, init_rng, order_rng = data.rngs(0)
    params = model.init_params(init_rng, model.layer_sizes(x.shape[1], tuple(hidden)))
    return [x[i] for i in data.batch_order(order_rng, len(x), BATCH)], params


def add_l2(opt: Any, ps: list[Any]) -> Any:
    """Register ``ps`` ([W1, b1, ...]) with ``opt``: L2 ALPHA on the weights, none on biases."""
    for k, p in enumerate(ps):
        opt.add(p, alpha=ALPHA if k % 2 == 0 else 0.0)
    return opt


def tape_loop_step(tp: g.Tape, opt: Any, loss_of: Callable[[], g.Var]) -> Step:
    """The mark/reset loop body: record ``loss_of()``, backward, step, read the loss, reset.

    The mark is taken here, after the parameters and the optimizer are set up.
    """
    mark = tp.mark()

    def step() -> float:
        loss = loss_of()
        tp.backward(loss)
        opt.step()
        value = float(tp.backend.to_numpy(tp.value(loss)))
        tp.reset_to(mark)
        return value
    return step


def captured_step(device: str, whole: bool = True, fused: bool = False,
                  inner: str = "plain") -> Make:
    """The AE step captured once from a numpy tape (``ggpu_replay.capture``) and replayed on
    ``device``: each step sets the minibatch, runs forward, backward and the program's Adam
    (as one ``prog.step`` when ``whole``, else node by node), and reads the loss back; with
    ``fused`` the program is first fused by ggpu-fuse; ``inner`` is the tape's inner-product
    contract. The program is ``step.program``."""
    def make(dtype: str, hidden: tuple[int, ...] = model.HIDDEN) -> Step:
        from ggpu_replay import capture

        batches, init = problem(hidden)
        tp = g.Tape("numpy", dtype, inner=inner)
        ps = [tp.param(a) for a in init]
        x = tp.const(batches[0])
        prog = capture(tp, g.mse(model.forward(x, ps), x), backend=device)
        if fused:
            from ggpu_fuse import fuse

            prog = fuse(prog)
        opt = add_l2(prog.adam(lr=LR, betas=(B1, B2), eps=EPS), ps)
        xs = itertools.cycle(batches)

        def step() -> float:
            prog.set_input(x, next(xs))
            if whole:
                prog.step(opt)
            else:
                prog.forward()
                prog.backward()
                opt.step()
            return prog.loss()
        step.program = prog  # type: ignore[attr-defined]  # for the reports' counts
        return step
    return make


def torch_ae_loss(ps: list[Any], xb: Any) -> Any:
    """The AE forward (addmm, relu on the hidden layers) and its MSE loss in PyTorch."""
    import torch

    h, n = xb, len(ps) // 2
    for k in range(n):
        h = torch.addmm(ps[2 * k + 1], h, ps[2 * k])
        if k < n - 1:
            h = torch.relu(h)
    return torch.nn.functional.mse_loss(h, xb)
