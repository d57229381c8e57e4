"""Random graphs mixing fusable and non-fusable nodes: the fused forward and backward equal the
per-node replay bit for bit, node by node; the planner's segments on known graphs."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from fuse_testutil import assert_fused_first_is_per_node, assert_same_nodes, node_bits
from ggpu_fuse import fuse, worthwhile
from ggpu_replay import capture
from gtensor.testing import bits_equal
from hypothesis import given, settings
from hypothesis import strategies as st

R, D = 12, 5

# one step of a random graph: (name, builder(h, params, rng) -> new h of shape (R, D))
STEPS = {
    "relu_linear": lambda h, p: g.relu(h @ p["w"] + p["b"]),
    "tanh": lambda h, p: g.tanh(h),
    "sigmoid_mul": lambda h, p: g.sigmoid(h) * h,
    "exp_scaled": lambda h, p: g.exp(h * 0.1) - 1.0,
    "div_sqrt": lambda h, p: h / g.sqrt(h * h + 1.0),
    "softmax": lambda h, p: g.softmax(h, axis=-1),  # a rows kernel: per node
    "row_sum": lambda h, p: h - g.mean(h, axis=1, keepdims=True),  # row-local reduction
    "slice_concat": lambda h, p: g.concat([g.slice(h, 1, 2, D), g.slice(h, 1, 0, 2)], axis=1),
    "gram": lambda h, p: h + (h @ (g.transpose(h) @ h)) * 0.01,  # a transpose, rows mixed
    "row_param": lambda h, p: h * p["w2"],  # a leaf of the batch's shape
    "col_sum": lambda h, p: h + g.sum(h, axis=0, keepdims=True) * 0.1,  # reads every row
    "pad_slice": lambda h, p: g.slice(g.pad(h, 1, 1, 1), 1, 1, D + 1),
    # flagged products: op(b) = w^T read in place (row-local), h^T h read in place (rows mixed)
    "linear_tb": lambda h, p: g.relu(g.matmul(h, p["w"], tb=True) + p["b"]),
    "gram_ta": lambda h, p: h + g.matmul(h, g.matmul(h, h, ta=True)) * 0.01,
    # the generic Reduce form's folds (their backward: equal / where / sum / div) and softplus
    "row_amax": lambda h, p: h - g.amax(h, axis=1, keepdims=True),
    "col_amin": lambda h, p: h + g.amin(h, axis=0) * 0.5,
    "row_prod": lambda h, p: h + g.prod(h, axis=1, keepdims=True) * 0.1,
    "softplus": lambda h, p: g.softplus(h) - 0.5,
}


def _params(tp: g.Tape, rng: np.random.Generator) -> dict:
    return {"w": tp.param(rng.normal(0, 0.4, (D, D))), "b": tp.param(rng.normal(0, 0.1, (1, D))),
            "w2": tp.param(rng.normal(0, 0.4, (R, D)))}


def _build(steps: list[str], seed: int):
    rng = np.random.default_rng(seed)
    tp = g.Tape()
    p = _params(tp, rng)
    x = tp.const(rng.normal(size=(R, D)))
    h = x
    for name in steps:
        h = STEPS[name](h, p)
    loss = g.mean(h * h) + g.sum(p["w"] * p["w"]) * 1e-3
    return tp, x, loss, rng


def _compare(prog, fp) -> None:
    assert_same_nodes(node_bits(prog), node_bits(fp))


# NOTE: each example compiles and loads its own module (~35 MB of reserved fiber stacks on
# sim), so even the heavy profile stops at 60 distinct graphs per process
@settings(deadline=None, max_examples=min(settings.default.max_examples, 60))
@given(steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=5),
       seed=st.integers(0, 2**16))
def test_random_graphs_fuse_bitwise(device, steps, seed):
    _fused_is_per_node(device, steps, seed)


@pytest.mark.parametrize("steps", [["linear_tb", "gram_ta", "tanh"],
                                   ["gram_ta", "row_sum", "linear_tb", "relu_linear"]])
def test_flagged_matmuls_fuse_bitwise(device, steps):
    """matmuls reading an operand transposed under ta / tb (the forward's and every
    backward's): fused == per node, bit for bit."""
    _fused_is_per_node(device, steps, 7)


@pytest.mark.parametrize("steps", [["row_amax", "softplus", "row_prod"],
                                   ["relu_linear", "col_amin", "row_prod", "row_amax"]])
def test_folds_and_softplus_fuse_bitwise(device, steps):
    """amax / amin / prod (kernels of the generic Reduce form without a finish) and softplus
    (one map kernel calling exp and log1p): fused == per node, bit for bit."""
    _fused_is_per_node(device, steps, 11)


def _fused_is_per_node(device: str, steps: list[str], seed: int) -> None:
    tp, x, loss, rng = _build(steps, seed)
    prog = capture(tp, loss, backend=device)
    fp = fuse(prog)
    assert_fused_first_is_per_node(prog, fp, x, rng.normal(size=(R, D)), f"{steps} ")
    fwd = fp.fused("forward")
    # one unit per segment; the loss's scalar chain always fuses, so launches are saved
    assert len(fwd.units) == len(fwd.segments)
    assert any(seg.fused for seg in fwd.segments), fp.plan
    assert len(fwd.units) < len(prog.forward_launches), fp.plan


def test_a_graph_that_fuses_nothing_runs_as_before(device):
    tp = g.Tape()
    a = tp.param(np.random.default_rng(0).normal(size=(2, 3, 4)))
    b = tp.const(np.random.default_rng(1).normal(size=(2, 4, 3)))
    loss = g.sum(g.softmax(g.bmm(a, b), axis=-1))  # bmm, softmax: per-node kernels only
    prog = capture(tp, loss, backend=device)
    fp = fuse(prog)
    fwd = fp.fused("forward")
    assert not any(seg.fused for seg in fwd.segments)
    assert fwd.units == prog.forward_launches and fwd.module is None
    fp.forward()
    fp.backward()
    _compare(prog, fp)


@pytest.mark.default_plan
def test_planner_segments_on_a_known_graph(device):
    tp, x, loss, _ = _build(["relu_linear", "softmax", "relu_linear"], 0)
    prog = capture(tp, loss, backend=device)
    fp = fuse(prog)
    fwd = fp.fused("forward")
    classes = [s.cls if s.fused else "node:" + s.items[0].name for s in fwd.segments]
    # x@w + b, relu | softmax (per node) | x@w + b, relu, then the loss's row products
    assert classes[:3] == ["row", "node:k_softmax_f64", "row"], fp.plan
    assert fwd.rows == R
    assert "row" in fp.plan[0] and "k_softmax_f64" in fp.plan[1]
    fp.forward()
    prog.forward()
    _compare(prog, fp)


def test_worthwhile_only_on_cuda(device):
    tp, x, loss, _ = _build(["relu_linear", "tanh"], 0)
    prog = capture(tp, loss, backend=device)
    assert worthwhile(prog) is (device == "cuda")


@pytest.mark.default_plan
def test_the_tests_see_a_missing_barrier(device, monkeypatch):
    """Without the __syncthreads between launches of a row kernel, rows are read before they
    are written: the comparison with the per-node replay must fail (it does, on sim)."""
    if device != "sim":
            pytest.skip("a deliberately racy kernel is only run on the simulator")
    from ggpu_fuse import codegen

    real = codegen.generate

    def racy(seg, *a, **k):
        out = real(seg, *a, **k)
        body = out.kernel.body.replace("__syncthreads();", "")
        from dataclasses import replace

        out.kernel = replace(out.kernel, body=body)
        return out

    monkeypatch.setattr("ggpu_fuse.program.generate", racy)
    tp, x, loss, rng = _build(["relu_linear", "relu_linear"], 3)
    prog = capture(tp, loss, backend=device)
    fp = fuse(prog)
    fp.set_input(x, rng.normal(size=(R, D)))  # so that stale rows differ from fresh ones
    fp.forward()
    racy_values = [fp.value_at(i) for i in range(len(prog.nodes))]
    prog.forward()
    assert any(not bits_equal(prog.value_at(i), v) for i, v in enumerate(racy_values))


@pytest.mark.parametrize("what", ["str", "Var"])
def test_fuse_refuses_what_is_not_a_program(what):
    # (a cpu program compiles: test_fuse_cpu.py, in the cpu session)
    tp, x, loss, _ = _build(["tanh"], 0)
    with pytest.raises(TypeError, match=f"expected a ggpu_replay Program, got {what}"):
        fuse({"str": "prog", "Var": loss}[what])
