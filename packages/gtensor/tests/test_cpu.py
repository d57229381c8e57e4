"""The cpu backend beyond the parity table: threads, the plan cache, the kernel door, Recorder."""

from __future__ import annotations

import gtensor
import numpy as np
import pytest
from gtensor.dtypes import F32, F64
from gtensor.ops import elementwise, forms
from gtensor.ops.registry import REGISTRY
from gtensor.recording import Recorder
from gtensor.runtime import cpu as cpu_runtime
from gtensor.scalar.dsl import F64 as SF64
from gtensor.scalar.dsl import scalar_fn, widened_f32
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference, matmul_tile_forms


@pytest.fixture(scope="module")
def cpu():
    """The cpu backend (skips without a C++ compiler)."""
    try:
        be = gtensor.backend("cpu")
        be.module  # noqa: B018  (compile now)
    except RuntimeError as e:
        pytest.skip(f"cpu backend unavailable: {e}")
    return be


def _calls(rng, dtype):
    """One call of every kind of cpu kernel, with odd sizes (chunks end mid-tile)."""
    a = rng.standard_normal((301, 203)).astype(dtype)
    b = rng.standard_normal((203, 97)).astype(dtype)
    c = rng.standard_normal((5, 67, 80)).astype(dtype)
    d = rng.standard_normal((5, 80, 33)).astype(dtype)
    e = rng.standard_normal((60, 71)).astype(dtype)
    f = rng.standard_normal((3, 60, 7)).astype(dtype)
    h = rng.standard_normal((2, 3, 33, 70)).astype(dtype)  # tiled transposes end mid-tile
    # k past one k block (KC = 256) and rows past one row block (MC = 64 rows at k = 1100 f64)
    p = rng.standard_normal((70, 1100)).astype(dtype)
    q = rng.standard_normal((1100, 19)).astype(dtype)
    return [("matmul", (a, b), {}), ("bmm", (c, d), {}), ("exp", (e,), {}),
            ("matmul", (a[:21], b), {}),  # few rows, more panels than row tiles: panels split
            ("matmul", (a[:37], b), {"inner": "fma"}), ("bmm", (c, d), {"inner": "fma"}),
            ("matmul", (a[:21], b[:, :40]), {"inner": "fma"}),
            ("matmul", (p, q), {}), ("matmul", (p, q), {"inner": "fma"}),
            ("bmm", (p.reshape(2, 35, 1100), np.stack([q, q[::-1]])), {"inner": "fma"}),
            ("muls", (e,), {"s": 0.3}), ("add", (e, e[:1]), {}), ("mul", (e, e), {}),
            ("sum", (e,), {"axis": 0}), ("sum", (e,), {"axis": 1}), ("mean", (e,), {}),
            ("sum", (f,), {"axis": 1}), ("softmax", (e,), {"axis": 1}),
            ("sigmoid", (e,), {}), ("log_softmax", (e,), {"axis": 1}),
            ("log_softmax_grad", (e, e), {"axis": 1}), ("sigmoid_grad", (e, e), {}),
            ("softmax", (e,), {"axis": 0}), ("softmax_grad", (e, e), {"axis": 0}),
            ("transpose", (e,), {}), ("transpose", (h,), {"axes": (0, 1, 3, 2)}),
            ("transpose", (h,), {"axes": (1, 3, 2, 0)}),
            ("transpose", (h,), {"axes": (2, 0, 3, 1)}),
            ("transpose", (f,), {"axes": (1, 0, 2)}), ("sum_to", (e,), {"shape": (71,)}),
            ("pad", (e,), {"axis": 1, "before": 2, "after": 3}),
            ("fill", (), {"shape": (60, 71), "value": -0.0, "dtype": dtype})]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_thread_count_changes_no_bit(cpu, dtype):
    """Every kernel split across 1, 2 and 3 threads (split threshold lowered to 1)."""
    ref = gtensor.backend("numpy")
    with cpu_thread_runs(cpu, threads=("1", "2", "3")) as runs:
        for op, args, attrs in _calls(np.random.default_rng(3), dtype):
            want = ref.to_numpy(getattr(ref, op)(*[ref.asarray(x) for x in args], **attrs))
            for threads in runs:
                got = cpu.to_numpy(getattr(cpu, op)(*[cpu.asarray(x) for x in args], **attrs))
                assert bits_equal(want, got), f"{op} {dtype} threads={threads}: " \
                                              f"{first_difference(want, got)}"


def test_matmul_tile_forms_are_set_and_restored(cpu):
    """set_matmul_tiles takes "host", "tall" or "wide" (returning the previous one) and refuses
    anything else, naming it; matmul_tile_forms sets tall then wide for plain, one "host" pass
    for fma, and restores the setting after a failing block."""
    m = cpu.module
    with pytest.raises(ValueError, match=r"set_matmul_tiles: form is 'square'; expected one of"):
        m.set_matmul_tiles("square")
    assert m.set_matmul_tiles("wide") == "host"
    assert m.set_matmul_tiles("tall") == "wide"
    assert m.set_matmul_tiles("host") == "tall"
    with matmul_tile_forms(cpu, "fma") as forms:
        assert list(forms) == ["host"]
    seen = []
    with pytest.raises(ZeroDivisionError):
        with matmul_tile_forms(cpu, "plain") as forms:
            for form in forms:
                seen.append((form, m.set_matmul_tiles(form)))
                if form == "wide":
                    1 / 0  # noqa: B018 - a failing block
    assert seen == [("tall", "tall"), ("wide", "wide")]
    assert m.set_matmul_tiles("host") == "host"


def test_plans_tell_apart_what_compares_equal(cpu):
    """-0.0 vs 0.0 and 1 vs True in attrs, and an input passed twice, get their own plans."""
    x = cpu.asarray([-0.0, 1.0])
    assert np.signbit(cpu.to_numpy(cpu.adds(x, 0.0))[0]) == np.False_
    assert np.signbit(cpu.to_numpy(cpu.adds(x, -0.0))[0]) == np.True_
    a, b = cpu.asarray([1.0, 2.0]), cpu.asarray([10.0, 20.0])
    assert cpu.to_numpy(cpu.add(a, a)).tolist() == [2.0, 4.0]
    assert cpu.to_numpy(cpu.add(a, b)).tolist() == [11.0, 22.0]
    with pytest.raises(TypeError, match="adds: s must be a real"):
        cpu.adds(x, True)


def test_inputs_views_and_out(cpu):
    """Non-contiguous views are copied first; out= is written in place and returned."""
    base = np.arange(12.0).reshape(3, 4)
    x = cpu.asarray(base)
    got = cpu.to_numpy(cpu.matmul(x.T, x))
    assert bits_equal(got, base.T @ base)
    out = cpu.zeros((4, 4))
    assert cpu.matmul(x.T, x, out=out) is out
    assert bits_equal(cpu.to_numpy(out), got)
    with pytest.raises(TypeError, match="plain numpy.ndarray"):
        cpu.exp(np.ones(3))
    with pytest.raises(TypeError, match="an array of the cpu backend"):
        gtensor.backend("sim").exp(x)


def test_kernel_door_and_recorder(cpu):
    """The KernelTable door (checked launches) and a Recorder over the cpu backend."""
    x = cpu.asarray([0.5, -1.0, 2.0])
    y = cpu.empty((3,), np.float64)
    k_exp = gtensor.REGISTRY["exp"].kernel_set(F64, cpu=True).only
    cpu.launch(k_exp, 1, 1, (x, y, 3))
    assert bits_equal(cpu.to_numpy(y), cpu.to_numpy(cpu.exp(x)))
    with pytest.raises(TypeError, match="expects dtype float64"):
        cpu.launch(k_exp, 1, 1, (x.astype(np.float32), y, 3))
    rec = Recorder(cpu)
    with rec.recording() as launches:
        z = rec.tanh(x)
    assert [launch.kernel.name for launch in launches] == ["k_tanh_f64"]
    before = cpu.to_numpy(z)
    cpu.write(x, [1.0, 2.0, 3.0])
    launches[0].run()
    assert bits_equal(cpu.to_numpy(z), cpu.to_numpy(cpu.tanh(x)))
    assert not bits_equal(before, cpu.to_numpy(z))


def test_array_data_offset_found():
    """The fast door reads arrays' data pointers at an offset checked on several arrays."""
    off = cpu_runtime.data_offset()
    assert off is not None and off % 8 == 0


def test_cpu_source_calls_no_platform_math():
    """No FMA (but in the fma contract's matmul and conv kernels and the correctly rounded
    functions), no libm transcendental, no fast-math intrinsic in the cpu module's text."""
    import re

    from gtensor.ops.inner import fma_contract_text
    from gtensor.runtime.cpu_source import cpu_kernels, cpu_module_source

    src = cpu_module_source()
    allowed = fma_contract_text(cpu_kernels())
    # the fma contract: matmul's kernels and helpers, the three conv ops' kernels and the two
    # attention ops' (2 dtypes)
    assert len(allowed) == 14 and all("fma" in t for t in allowed)
    for text in allowed:
        assert text in src
        src = src.replace(text, "")
    # the correctly rounded functions' definitions use fma (gtensor.scalar.crmath)
    from gtensor.scalar import crmath
    from gtensor.scalar.dsl import COLD_MACRO

    for fn in crmath.closure():
        for text in [fn.device_source(), *(t.device_source() for t in fn.tables())]:
            src = src.replace(text, "")
    src = src.replace(COLD_MACRO, "")
    for banned in (r"\bfmaf?\b", r"__fmaf?_r", r"\bexpf?\(", r"\blogf?\(", r"\btanhf?\(",
                   r"__expf", r"__logf", r"\bstd::(exp|log|tanh|pow)\b"):
        assert not re.search(banned, src), f"cpu module source contains {banned}"
    assert "gt_exp_f64" in cpu_module_source() and "k_matmul_f32" in src


def test_scalar_fn_cost_counts_each_call_as_its_callee():
    """A scalar function's cost is its statements, each call weighing its callee's cost."""

    @scalar_fn("gt_test_sq_plus_f64", (SF64,), SF64)
    def sq_plus(m, x):
        return x * x + x  # two operations

    @scalar_fn("gt_test_twice_f64", (SF64,), SF64)
    def twice(m, x):
        return m.call(sq_plus, x) - m.call(sq_plus, x * 2.0)  # 2 calls, a product, a difference

    assert sq_plus.cost == 2
    assert twice.cost == 2 * 2 + 2
    from gtensor.scalar import transcendental as tr

    exp64, exp32 = tr.EXP_F64, tr.EXP_F32  # the pre-issue-38 exp, widened for float32
    assert exp32.cost == widened_f32(exp64).cost == exp64.cost + 2  # widen, exp, round
    assert elementwise.EXP[F64].cost > 50 and elementwise.ADD[F64].cost == 1


@pytest.mark.parametrize("ft", [F64, F32], ids=["float64", "float32"])
def test_cpu_loops_split_by_the_work_of_their_functions(ft):
    """A transcendental map or row kernel weighs its functions' cost per element in its thread
    split; an add or a product of sums keeps the floor (forms.split_cost)."""

    def body(op):
        (k,) = REGISTRY[op].kernel_set(ft, cpu=True).kernels
        return k.body

    sig = elementwise.SIGMOID[ft].cost
    assert f"parallel_for(n, {sig}," in body("sigmoid")
    assert f"parallel_for(n, {forms.ELEMENT_COST}," in body("muls")
    assert f"geom + 1 + 2 * rank, 0, {forms.ELEMENT_COST}," in body("add")
    softmax = forms.split_cost(REGISTRY["softmax"].kernel_set(ft).kernels[0].calls, 0)
    assert softmax > elementwise.EXP[ft].cost
    assert f"parallel_for(A * B, R * {softmax}," in body("softmax")
    assert f"parallel_for(A * B, R * {forms.ROW_ELEMENT_COST}," in body("softmax_grad")
    assert forms.split_cost([], forms.ELEMENT_COST) == forms.ELEMENT_COST
