"""The captured cpu step as one compiled function per phase: bitwise the per-node cpu replay and
the tape, over many episodes, on random graph mixes, and with its loops split across threads."""

from __future__ import annotations

import re

import gtape as g
import numpy as np
import pytest
from fuse_testutil import assert_fused_first_is_per_node, train
from ggpu_fuse import fuse
from ggpu_fuse.cpu_codegen import translation_unit
from ggpu_fuse.cpu_program import CompiledCpuProgram
from ggpu_replay import capture
from gtensor import testing
from gtensor.kernels import Kind
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference
from test_fuse_graphs import D, R, _build

EPISODES = 40

pytestmark = pytest.mark.skipif(
    testing.backend_name() != "cpu" and not testing.slow_runs(),
    reason="the compiled cpu step compiles a module per program: tested in the cpu session "
           "(and in nox -s oracle)")


def _same_run(want, got, name: str) -> None:
    (want_l, want_p), (got_l, got_p) = want, got
    assert bits_equal(np.array(got_l), np.array(want_l)), (
        f"{name} loss trace: {first_difference(np.array(want_l), np.array(got_l))}")
    for k, (a, b) in enumerate(zip(want_p, got_p)):
        assert bits_equal(a, b), f"{name} param {k}: {first_difference(a, b)}"


def _contract_args(inner: str) -> tuple:
    """``train``'s contract argument (none for plain); a skip where this tree has no fma
    contract (``gtape.Tape(inner=...)``)."""
    if inner == "plain":
        return ()
    try:
        g.Tape("numpy", "float64", inner=inner)
    except TypeError:
        pytest.skip(f"the {inner!r} inner-product contract is not in this tree")
    return (inner,)


# NOTE: each (dtype, contract) compiles its own three modules (a minute with an empty cache):
# CI runs two of the four, covering both dtypes and both contracts; nox -s oracle all four
@pytest.mark.default_plan
@pytest.mark.parametrize("dtype, inner", [
    ("float64", "plain"), ("float32", "fma"),
    pytest.param("float64", "fma", marks=pytest.mark.slow),
    pytest.param("float32", "plain", marks=pytest.mark.slow)])
def test_compiled_run_is_bitwise_the_per_node_replay_and_the_tape(dtype, inner):
    """40 AE episodes under each inner-product contract (the row tiles run the contract's
    chain: plain products and sums, or gtcpu::vfma from +0.0)."""
    c = _contract_args(inner)
    want_l, want_p, _ = train("tape", "cpu", EPISODES, dtype, *c)
    node_l, node_p, _ = train("replay", "cpu", EPISODES, dtype, *c)
    got_l, got_p, prog = train("fused", "cpu", EPISODES, dtype, *c)
    assert isinstance(prog, CompiledCpuProgram)
    _same_run((want_l, want_p), (node_l, node_p), "per-node replay")
    _same_run((want_l, want_p), (got_l, got_p), "compiled step")
    assert want_l[-1] < 0.5 * want_l[0]
    step = prog.fused("step")
    assert len(step.units) == 1 and step.launches_before > 70  # one native function
    # the first layer's matmul, its bias add and relu share one row loop (the tile's epilogue)
    row = next(s for s in step.segments if s.cls == "row")
    names = [i.name for i in row.items]
    sfx = "f" + dtype[5:]
    mm = f"k_matmul_{sfx}" if inner == "plain" else f"k_matmul_fma_{sfx}"
    assert names[:3] == [mm, f"k_add_{sfx}", f"k_relu_{sfx}"], prog.plan
    # the whole step calls forward's and backward's compiled functions (their libraries:
    # never compiled again), then runs the optimizer's loops
    fwd, bwd = prog.fused("forward").module, prog.fused("backward").module
    source = step.module.source
    assert fwd.name in source and bwd.name in source and f"int {fwd.name}(" not in source
    assert set(fwd.addresses() + bwd.addresses()) <= {int(v) for v in step.module.table}
    source = "\n".join([fwd.source, bwd.source, source])
    assert ("gtfuse::Fma" in source, "gtfuse::Plain" in source) == (
        (True, False) if inner == "fma" else (False, True))
    flat = [s for s in step.segments if s.cls == "flat" and s.fused]
    # every parameter's in-place Adam update (it writes m, v and p) in one flat loop
    updates = [i for s in step.segments for i in s.items if i.kind is Kind.UPDATE]
    assert len(updates) == 8 and any(all(i in s.items for i in updates) for s in flat), prog.plan


@pytest.mark.default_plan
def test_loops_split_across_threads_give_the_same_bits():
    want_l, want_p, _ = train("replay", "cpu", 6)
    _, _, prog = train("fused", "cpu", 2)  # compiles (and loads) the three phases
    modules = [prog.fused(p).module for p in ("forward", "backward", "step")]
    with cpu_thread_runs(*modules, threads=("2",)) as runs:  # every loop of 2+ blocks splits
        for _ in runs:
            got_l, got_p, _ = train("fused", "cpu", 6)
    _same_run((want_l, want_p), (got_l, got_p), "compiled step on 2 threads")


MIXES = [["gram", "row_sum", "tanh"], ["col_sum", "slice_concat", "sigmoid_mul"],
         ["row_amax", "softplus", "row_prod", "col_amin"],  # the generic Reduce's folds
         ["softmax", "relu_linear", "pad_slice"],
         ["row_param", "div_sqrt", "exp_scaled", "relu_linear"],
         ["linear_tb", "gram_ta", "row_sum"]]  # flagged matmuls: their per-node kernels


# NOTE: each graph compiles its own module (25-45 s with an empty cache on 2 cores): CI runs the
# first three mixes as planned, nox -s oracle every mix, and one of them also with every matmul
# alone in its segment (the test below)
@pytest.mark.default_plan
@pytest.mark.parametrize("steps", [m if i < 3 else pytest.param(m, marks=pytest.mark.slow)
                                   for i, m in enumerate(MIXES)],
                         ids=["-".join(m) for m in MIXES])
def test_graph_mixes_compile_bitwise(steps):
    _check_mix(steps)


@pytest.mark.slow
def test_a_graph_mix_with_and_without_matmuls_alone():
    _check_mix(["relu_linear", "gram", "relu_linear"])



def test_forward_and_backward_compile_side_by_side_in_one_line(tmp_path, monkeypatch, capfd):
    """``fuse`` builds a cpu program's forward and backward at once (a compiler process each,
    one line on stderr); the phases then load what was built, and run the per-node bits."""
    from gtensor.runtime.toolchain import usable_cpus

    folder = tmp_path / "cache" / "cpu"
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(tmp_path / "cache"))
    tp, x, loss, rng = _build(["tanh", "relu_linear"], 11)
    prog = capture(tp, loss, backend="cpu")
    before = set(folder.glob("*.so"))
    capfd.readouterr()
    fp = fuse(prog)
    err = capfd.readouterr().err.splitlines()
    assert err == [f"gtensor: compiling a captured cpu program as 2 functions (g++, "
                   f"{min(2, usable_cpus())} at a time; first use), cached in {folder}"], err
    assert len(set(folder.glob("*.so")) - before) == 2 and fp.compile_seconds > 0
    assert fp.fused("forward").module.name.startswith("gtfuse_forward_")
    assert fp.fused("backward").module.name.startswith("gtfuse_backward_")
    fp.plan  # noqa: B018 - planned and built: nothing more to compile
    assert capfd.readouterr().err == ""
    assert_fused_first_is_per_node(prog, fp, x, rng.normal(size=(R, D)), "side by side ")

def _check_mix(steps: list[str]) -> None:
    tp, x, loss, rng = _build(steps, 3)
    prog = capture(tp, loss, backend="cpu")
    fp = fuse(prog)
    assert_fused_first_is_per_node(prog, fp, x, rng.normal(size=(R, D)), f"{steps} ")
    assert len(fp.fused("forward").units) == 1


@pytest.mark.default_plan
def test_a_large_matmul_runs_as_its_per_node_kernel_inside_the_function():
    rng = np.random.default_rng(0)
    tp = g.Tape()
    w = tp.param(rng.normal(0, 0.1, (128, 128)))
    x = tp.const(rng.normal(size=(96, 128)))
    loss = g.mean(g.relu(x @ w + 1.0) * 2.0)
    prog = capture(tp, loss, backend="cpu")
    fp = fuse(prog)
    fwd = fp.fused("forward")
    assert "k_matmul_f64" in fwd.module.node_kernels  # 96*128*128 MACs >= SPLIT_MACS
    # called in its own kernel library (the code the per-node step runs), never recompiled:
    # the unit holds no kernel body, its pointer table the module's entry of the kernel
    assert "void k_matmul_f64(" not in translation_unit(fwd.module.source)
    kernel = next(x.kernel for x in prog.trace.forward if x.kernel.name == "k_matmul_f64")
    assert int(prog.backend.module.entry(kernel)) in {int(v) for v in fwd.module.table}
    fp.forward()
    fp.backward()
    got = fp.loss(), fp.grad(w)
    prog.forward()
    prog.backward()
    assert bits_equal(np.array(got[0]), np.array(prog.loss()))
    assert bits_equal(got[1], prog.grad(w))


@pytest.mark.default_plan
def test_typed_moves_compile_bitwise():
    """int64 / bool reshapes, transposes, slices, concats, broadcasts and copies (per-node
    kernels of kind INDEX inside the one compiled function): bitwise the eager tape."""
    from test_fuse_typed_moves import typed_moves_fuse_bitwise

    typed_moves_fuse_bitwise("cpu")


def test_a_unit_calling_a_first_stage_kernel_gets_its_flags():
    """A fused unit that calls a per-node map kernel of a correctly rounded function holds its
    first-stage loop: compiled with the stage's flags (else the loop stays scalar and runs
    slower than the plain one: the LoRA step's fused float32 step 38 -> 47 ms), any other unit
    with the runtime's."""
    from ggpu_fuse import cpu_codegen
    from gtensor import dtypes
    from gtensor.ops import registry
    from gtensor.runtime import cpu as cpurt

    exp = registry.get("exp").kernel_set(dtypes.F64, cpu=True).kernels[0]
    staged = exp.source().replace('extern "C" ', "static ", 1)
    _, _, _, flags = cpu_codegen._unit(staged)
    assert flags == (*cpurt.CXX_FLAGS, *cpurt.FIRST_STAGE_FLAGS, *cpurt.gather_flags())
    add = registry.get("add").kernel_set(dtypes.F64, cpu=True).kernels[0]
    _, _, _, flags = cpu_codegen._unit(add.source().replace('extern "C" ', "static ", 1))
    assert flags == cpurt.CXX_FLAGS


def test_fused_maps_run_the_first_stage_and_fall_back_on_undecided_lanes():
    """A fused elementwise loop over exp runs exp's first stage (as the per-node kernel does):
    on inputs the stage flags and gets wrong (results near and in the subnormal range), the
    fused step equals the per-node replay node for node; the unit holds the stage's loop."""
    from gtensor import dtypes
    from gtensor.ops.elementwise import EXP
    from gtensor.ops.forms import FIRST_STAGE_LOOP

    x0 = np.linspace(-745.0, -700.0, 4099)
    value, bad = EXP[dtypes.F64].first_numpy(x0)
    wrong = bad & ~bits_equal_each(value, EXP[dtypes.F64].numpy(x0))
    assert wrong.sum() >= 10  # the stage's value is wrong on these lanes: the fallback decides

    def graph(tp):
        w = tp.param(np.ones((1, x0.size)))
        x = tp.const(x0[None, :])
        return w, x, g.sum(g.exp(w * x) * x)

    fp = _fused_is_the_definition(graph, x0[None, :])
    assert FIRST_STAGE_LOOP in fp.fused("forward").module.source


def _fused_is_the_definition(graph, x_new: np.ndarray):
    """``graph(tp)`` -> (w, x, loss) fused on cpu: its first step node for node the per-node
    replay's (x set to ``x_new``), then the loss and w's gradient bitwise the numpy tape's;
    the fused program."""
    with g.Tape("numpy") as ref:  # the definition
        w, _, loss = graph(ref)
        ref.backward(loss)
        want = (loss.numpy(), ref.grad(w))
    tp = g.Tape("cpu")
    w, x, loss = graph(tp)
    prog = capture(tp, loss, backend="cpu")
    fp = fuse(prog)
    assert_fused_first_is_per_node(prog, fp, x, x_new)
    fp.forward()
    fp.backward()
    for a, b in zip(want, (fp.value_at(loss.index), fp.grad_at(w.index))):
        assert bits_equal(np.asarray(a), np.asarray(b)), first_difference(a, b)
    return fp


def test_fused_zips_run_the_first_stage_and_fall_back_on_undecided_lanes():
    """A fused two-input zip of a function with a first stage (gelu_gate_grad: exp inside) runs
    the stage over blocks of its rows, as the per-node kernel does (each element calling the
    whole correctly rounded function was the GPT's fused step's slowest loops); on inputs the
    stage flags and gets wrong (exp's results near and in the subnormal range) the fused step
    equals the per-node replay and the numpy tape."""
    from gtensor import dtypes
    from gtensor.ops.elementwise import GELU_GATE_GRAD
    from gtensor.ops.forms import FIRST_STAGE_LOOP

    fn = GELU_GATE_GRAD[dtypes.F64]
    x0 = np.linspace(37.0, 38.7, 4099)[None, :]
    q0 = np.full_like(x0, 1.5)
    value, bad = fn.first_numpy(q0, x0)
    assert (bad & ~bits_equal_each(value, fn.numpy(q0, x0))).sum() >= 10

    def graph(tp):
        w = tp.param(np.ones(x0.shape))
        x = tp.const(x0)
        return w, x, g.sum(g.gelu_gate_grad(tp.const(q0), w * x) * x)

    src = _fused_is_the_definition(graph, x0).fused("forward").module.source
    assert FIRST_STAGE_LOOP in src and f"{fn.first_cname}(ar[" in src


def bits_equal_each(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element by element: the same bits."""
    return a.view(np.uint64) == b.view(np.uint64)


@pytest.mark.default_plan
def test_rank_4_broadcasts_and_copies_run_as_rows_bitwise():
    """A per-channel affine on (N, C, H, W) (operands broadcast over N, H and W), a rank-3
    transpose copy and a rank-4 slice: fused loops over innermost rows (the outer index's
    digits decoded once a row, no per-element geometry decode), bitwise the per-node step."""
    rng = np.random.default_rng(3)
    tp = g.Tape("cpu")
    w = tp.param(rng.normal(size=(1, 3, 1, 1)))
    b = tp.param(rng.normal(size=(1, 3, 1, 5)))
    x = tp.const(rng.normal(size=(4, 3, 2, 5)))
    y = g.relu(x * w + b)
    t = g.transpose(g.reshape(y, (4, 6, 5)), (1, 0, 2))  # a rank-3 strided copy
    s = g.reshape(y, (4, 3, 2, 5))[:, 1:, :, 2:]
    loss = g.sum(t * 1.5) + g.sum(s * s)
    prog = capture(tp, loss, backend="cpu")
    fp = fuse(prog)
    src = fp.fused("forward").module.source
    body = src[src.index('extern "C" int gtfuse_forward'):]
    # each fused launch's text: from its comment to the next launch's
    marks = [(m.start(), int(m.group(1))) for m in re.finditer(r"// k_\w+ \(launch (\d+)", body)]
    text = {i: body[a:b] for (a, i), (b, _) in zip(marks, [*marks[1:], (len(body), -1)])}
    ranked = [i for seg in fp.fused("forward").segments if seg.fused for i in seg.items
              if i.name in ("k_mul_f64", "k_add_f64", "k_copy_f64")
              and int(np.asarray(i.args["geom"]).ravel()[0]) >= 3]
    assert len(ranked) >= 3, fp.plan  # the broadcasts and copies above run in fused loops
    for i in ranked:  # rows of the innermost dimension: no element decodes its offsets
        assert "rem %" not in text[i.index] and "const long long c1 = " in text[i.index], \
            text[i.index]
    assert_fused_first_is_per_node(prog, fp, x, rng.normal(size=(4, 3, 2, 5)))
    for run in range(2):
        fp.forward()
        fp.backward()
        prog.forward()
        prog.backward()
        for v in (w, b):
            assert bits_equal(fp.grad(v), prog.grad(v)), (run, first_difference(
                prog.grad(v), fp.grad(v)))


def test_a_compiled_step_splits_work_on_the_runtimes_one_pool():
    """The compiled step's library is bound to the cpu runtime's state (no pool of its own,
    whose workers would spin beside the runtime's): its split threshold is the runtime's."""
    import ctypes

    from gtensor.runtime import cpu as cpurt

    rng = np.random.default_rng(0)
    tp = g.Tape("cpu")
    w = tp.param(rng.normal(size=(8, 4)))
    x = tp.const(rng.normal(size=(6, 8)))
    fp = fuse(capture(tp, g.sum(g.relu(x @ w)), backend="cpu"))
    fp.forward()
    lib = fp.fused("forward").module.lib
    runtime, _ = cpurt._runtime()
    runtime.gtcpu_shared.restype = ctypes.c_void_p
    lib.gtcpu_bound.restype = ctypes.c_void_p
    assert lib.gtcpu_bound() == runtime.gtcpu_shared()
    module = tp.backend.module
    old = fp.fused("forward").module.set_parallel_work(4321)
    try:
        assert module.set_parallel_work(old) == 4321
    finally:
        module.set_parallel_work(old)
