"""The rung-1 autoencoder step (Adam + L2 + clip) trained per node, fused, and on the tape;
node-by-node comparisons of two runs of one captured graph."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
from ggpu_fuse import fuse
from ggpu_replay import capture
from gtensor.testing import bits_equal, first_difference

SIZES = [6, 32, 16, 32, 6]
BATCH = 40


def problem(seed: int = 0, batches: int = 5) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Initial [W1, b1, ...] and a cycle of minibatches (float64)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = np.sqrt(6.0 / (fan_in + fan_out)) * 0.5
        params += [rng.uniform(-bound, bound, (fan_in, fan_out)), np.zeros((1, fan_out))]
    return params, [rng.normal(size=(BATCH, SIZES[0])) for _ in range(batches)]


def model(x: g.Var, ps: list[g.Var]) -> g.Var:
    """relu hidden layers, linear output, mse against the input."""
    h = x
    for k in range(len(ps) // 2):
        h = h @ ps[2 * k] + ps[2 * k + 1]
        if k < len(ps) // 2 - 1:
            h = g.relu(h)
    return g.mse(h, x)


def register(opt, ps) -> None:
    for k, p in enumerate(ps):
        opt.add(p, alpha=1e-4 if k % 2 == 0 else 0.0)
    opt.set_clip(0.5)


def train(engine: str, device: str, episodes: int, dtype: str = "float64",
          inner: str = "plain"):
    """Loss trace and final parameters of ``episodes`` steps: engine tape / replay / fused."""
    init, data = problem()
    tp = g.Tape("numpy", dtype, inner=inner)
    ps = [tp.param(a) for a in init]
    if engine == "tape":
        opt = gopt.Adam(tp, lr=1e-2)
        register(opt, ps)
        mark = tp.mark()
        losses = []
        for e in range(episodes):
            loss = model(tp.const(data[e % len(data)]), ps)
            tp.backward(loss)
            opt.step()
            losses.append(loss.item())
            tp.reset_to(mark)
        return losses, [p.numpy() for p in ps], None
    x = tp.const(data[0])
    prog = capture(tp, model(x, ps), backend=device)
    if engine == "fused":
        prog = fuse(prog)
    opt = prog.adam(lr=1e-2)
    register(opt, ps)
    losses = []
    for e in range(episodes):
        prog.set_input(x, data[e % len(data)])
        prog.step(opt)
        losses.append(prog.loss())
    prog.sync_params(tp)
    return losses, [p.numpy() for p in ps], prog


def node_bits(run, count: int | None = None) -> list[tuple]:
    """(value, gradient or None) of each of the first ``count`` nodes (default: all) of a
    program or tape."""
    return [(run.value_at(i), run.grad_at(i)) for i in range(
        len(run.nodes) if count is None else count)]


def assert_same_nodes(want: list[tuple], got: list[tuple], label: str = "") -> None:
    """Each node's value and gradient (``node_bits``) in ``got`` has the bits of ``want``'s."""
    for i, ((a, ga), (b, gb)) in enumerate(zip(want, got, strict=True)):
        assert bits_equal(a, b), f"{label}node {i} value: {first_difference(a, b)}"
        assert (ga is None) == (gb is None), f"{label}node {i}: a gradient on one side only"
        if ga is not None:
            assert bits_equal(ga, gb), f"{label}node {i} grad: {first_difference(ga, gb)}"


def assert_fused_first_is_per_node(prog, fp, x, new: np.ndarray, label: str = "") -> None:
    """``fp`` (``fuse(prog)``) run on input ``new``, then ``prog``: every node's bits agree."""
    # the two share every buffer: the fused program runs FIRST on the new input, so a buffer
    # it fails to rewrite still holds capture-time data (the per-node run would refresh it)
    fp.set_input(x, new)
    fp.forward()
    fp.backward()
    got = node_bits(fp, len(prog.nodes))
    prog.forward()
    prog.backward()
    assert_same_nodes(node_bits(prog), got, label)
