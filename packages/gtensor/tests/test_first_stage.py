"""First stages: a correctly rounded function's fast path as one vectorized loop over a block.

``ScalarFn.first_stage`` (gtensor.scalar.dsl): the function's body with every ``rare`` replaced
by a flag, f2i and table reads without branches; a cpu map over the function (``Map.cpu_body``)
runs the stage over blocks of ``FIRST_BLOCK`` elements, then the whole function on the lanes the
stage flagged. Where no lane is flagged the stage's value is the function's (the same
operations); the cpu kernels must equal the numpy reference on every input, flagged or not.
"""

from __future__ import annotations

import platform
import re
import subprocess
from functools import cache

import gtensor
import numpy as np
import pytest
from gtensor.ops import elementwise as E
from gtensor.ops import registry
from gtensor.ops.forms import FIRST_BLOCK, FIRST_STAGE_LOOP
from gtensor.runtime import cpu as cpurt
from gtensor.runtime import toolchain
from gtensor.scalar import crmath
from test_crmath import DTYPES, IDS, NAMES, _parity_inputs, _same

FAMILIES = {"exp": E.EXP, "log": E.LOG, "tanh": E.TANH, "sigmoid": E.SIGMOID, "erf": E.ERF,
            "log1p": E.LOG1P, "expm1": E.EXPM1, "sin": E.SIN, "cos": E.COS}


def _fn(name, dtype):
    f = crmath.BY_NAME[name]
    return f.f64 if dtype == np.float64 else f.f32


@cache
def _staged(name, dtype):
    """(inputs, the stage's value, its flags, the function's value) on the parity inputs."""
    fn = _fn(name, dtype)
    x = _parity_inputs(name, dtype)
    value, bad = fn.first_numpy(x)
    return x, value, bad, fn.numpy(x)


def test_every_correctly_rounded_function_has_a_first_stage():
    assert sorted(FAMILIES) == NAMES
    for name in NAMES:
        for dtype in DTYPES:
            assert _fn(name, dtype).first_stage, (name, dtype)
    f = crmath.BY_NAME["exp"]
    assert not f.acc_f64.first_stage  # cold: no stage
    assert not E.ADD[gtensor.dtypes.F64].first_stage  # no rare path
    with pytest.raises(ValueError, match="no first stage"):
        f.acc_f64.first_numpy(np.ones(2))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_unflagged_lanes_are_the_function(name, dtype):
    """numpy, under the stage's rules: wherever the stage flags nothing its value is the
    function's, bit for bit."""
    x, value, bad, want = _staged(name, dtype)
    same = _same(value, want)
    assert same[~bad].all(), x[~bad & ~same][:4]


@pytest.mark.parametrize("name", NAMES)
def test_flagged_lanes_exist_whose_stage_value_is_wrong(name):
    """The float64 inputs below hold lanes the stage flags and gets wrong, so a kernel that
    used the stage's value there would fail ``test_cpu_map_equals_numpy``."""
    _, value, bad, want = _staged(name, np.float64)
    assert (bad & ~_same(value, want)).sum() >= 10


def _placed(name, dtype, n):
    """``n`` inputs with the flagged, wrongly staged lanes at block edges and both ends (and a
    run of them from the fourth block on), the rest lanes the stage decides."""
    x, value, bad, want = _staged(name, dtype)
    wrong = x[bad & ~_same(value, want)]
    out = np.resize(x[~bad], n).astype(dtype)
    if len(wrong):
        spots = [s for s in (0, FIRST_BLOCK - 1, FIRST_BLOCK, 2 * FIRST_BLOCK - 1, n // 2, n - 1)
                 if s < n]
        out[spots] = np.resize(wrong, len(spots))
        run = wrong[: max(0, n - 3 * FIRST_BLOCK)]
        out[3 * FIRST_BLOCK: 3 * FIRST_BLOCK + len(run)] = run
    return out


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_cpu_map_equals_numpy(be, name, dtype, threads, monkeypatch):
    """The op on the backend under test (the cpu kernels run the stage) equals numpy on every
    lane -- flagged lanes at block edges, lengths off the block, threads splitting blocks."""
    monkeypatch.setenv("GTENSOR_CPU_THREADS", threads)
    ref = gtensor.backend("numpy")
    for n in (7, FIRST_BLOCK + 3, 5 * FIRST_BLOCK + 77):
        x = _placed(name, dtype, n)
        want = ref.to_numpy(getattr(ref, name)(x))
        got = be.to_numpy(getattr(be, name)(be.asarray(x)))
        assert _same(got, want).all(), (n, x[~_same(got, want)][:4])


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("name", NAMES)
def test_cpu_kernels_run_the_stage_and_cuda_kernels_do_not(name, dtype):
    """The cpu map kernel loops over the stage, and its library gets FIRST_STAGE_FLAGS; the
    CUDA / sim kernel text does not name the stage, and the stage's definition is compiled
    only where cpu_runtime.h defines GTCPU_FIRST_STAGES."""
    fn = _fn(name, dtype)
    ft = gtensor.dtypes.F64 if dtype == np.float64 else gtensor.dtypes.F32
    op = registry.get(name)
    (k,) = op.kernel_set(ft, cpu=True).kernels
    source = cpurt.kernel_source(k)
    assert FIRST_STAGE_LOOP in k.source() and f"{fn.first_cname}(" in k.source()
    assert cpurt.kernel_flags(source) == (*cpurt.CXX_FLAGS, *cpurt.FIRST_STAGE_FLAGS,
                                          *cpurt.gather_flags())
    (cuda,) = op.kernel_set(ft).kernels
    assert fn.first_cname not in cuda.source()
    text = fn.device_source()
    stage = text[text.index("#ifdef GTCPU_FIRST_STAGES"):]
    assert f"{fn.first_cname}(" in stage and stage.rstrip().endswith("#endif")
    assert f"{fn.first_cname}(" not in text[:text.index("#ifdef GTCPU_FIRST_STAGES")]
    plain = registry.get("add").kernel_set(ft, cpu=True).kernels[0]
    assert cpurt.kernel_flags(cpurt.kernel_source(plain)) == cpurt.CXX_FLAGS



def _hard_exp_rows(dtype, rows, length, negative=True):
    """(rows, length) inputs: each row's max 0 and the rest exp inputs <= 0 the stage flags and
    gets wrong (float64: results near and in the subnormal range; float32 has none in the
    sample: its rows are the sample's inputs <= 0); with ``negative`` False, such inputs of
    either sign."""
    x, value, bad, want = _staged("exp", dtype)
    pick = ((x <= 0) | (not negative)) & (x > -746) & (x < 700)
    wrong = x[pick & bad & ~_same(value, want)]
    assert dtype == np.float32 or len(wrong) >= 20
    pool = wrong if len(wrong) else x[pick]
    out = np.resize(pool, rows * length).astype(dtype).reshape(rows, length)
    out[:, length // 2] = 0.0
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
@pytest.mark.parametrize("rows", [3, 19])  # fewer rows than a lane group, and more
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "log_softmax_grad"])
def test_cpu_rows_equal_numpy(be, op, rows, dtype):
    """softmax, log_softmax and log_softmax_grad run exp's stage over each row and the row
    again where it flags a lane: equal to numpy with flagged lanes in every row, along the
    contiguous axis and a strided one."""
    ref = gtensor.backend("numpy")
    x = _hard_exp_rows(dtype, rows, 37)
    if op == "log_softmax_grad":  # out = g - exp(y) * sum(g): with g one 1 a row, -exp(y)
        x = _hard_exp_rows(dtype, rows, 37, negative=False)
    for axis, data in ((-1, x), (0, np.ascontiguousarray(x.T))):
        g = np.zeros_like(data)
        g[(slice(None), 0) if axis == -1 else (0, slice(None))] = 1.0
        ins = [data] if op != "log_softmax_grad" else [g, data]
        want = ref.to_numpy(ref.apply(op, ins, axis=axis))
        got = be.to_numpy(be.apply(op, [be.asarray(a) for a in ins], axis=axis))
        assert _same(got, want).all(), (op, axis)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="checks the x86 builds AVX2 and AVX-512 (the compiler's report)")
@pytest.mark.parametrize("march", ["haswell", "skylake-avx512"])
@pytest.mark.parametrize("kernel", ["k_exp_f64", "k_erf_f64", "k_tanh_f64", "k_exp_f32",
                                    "k_sin_f32"])
def test_the_stage_loop_vectorizes(kernel, march, tmp_path):
    """The reason for the stage: GCC vectorizes its loop for AVX2 (haswell) and AVX-512, with
    the library's flags (a 64-bit f2i, or tree PRE, kept it scalar). Compiled only."""
    k = _kernel(kernel)
    source = cpurt.kernel_source(k)
    unit = cpurt.kernel_unit(source, [k])
    src = tmp_path / "unit.cpp"
    src.write_text(unit)
    flags = [f for f in cpurt.kernel_flags(source) if f not in ("-march=native", "-shared")]
    proc = subprocess.run([*toolchain.compiler_command(), *flags, f"-march={march}", "-c",
                           "-fopt-info-vec-optimized", str(src), "-o", str(tmp_path / "unit.o")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = source.splitlines()
    stage = next(i for i, line in enumerate(lines) if "bool gt_bad = false;" in line)
    loop = stage  # the loop header above the flag (kernels.cpp numbers lines from 1)
    assert re.search(rf"kernels\.cpp:{loop}:\d+: optimized: loop vectorized", proc.stderr), \
        (loop, proc.stderr[-2000:])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="x86 gathers (the compiler's assembly)")
def test_the_gather_flags_make_the_stage_read_its_table_by_gathers(tmp_path):
    """With GATHER_FLAGS the erf stage's table reads are vector gathers (AVX-512 build; g++
    12's generic tuning emulates them by scalar loads). Compiled only, both ways."""
    if "clang" in toolchain.compiler_identity(tuple(toolchain.compiler_command())).lower():
        pytest.skip("GATHER_FLAGS are g++'s tuning names")
    k = _kernel("k_erf_f64")
    source = cpurt.kernel_source(k)
    src = tmp_path / "unit.cpp"
    src.write_text(cpurt.kernel_unit(source, [k]))
    base = [f for f in (*cpurt.CXX_FLAGS, *cpurt.FIRST_STAGE_FLAGS)
            if f not in ("-march=native", "-shared")]
    gathers = {}
    for name, extra in (("default", ()), ("gathers", cpurt.GATHER_FLAGS)):
        out = tmp_path / f"{name}.s"
        proc = subprocess.run([*toolchain.compiler_command(), *base, *extra,
                               "-march=skylake-avx512", "-mtune=generic", "-S", str(src), "-o",
                               str(out)], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and extra:
            pytest.skip(f"this g++ does not take {extra}: {proc.stderr[-300:]}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        gathers[name] = len(re.findall(r"\bvgather\w+", out.read_text()))
    # g++ 12's generic tuning emits none (another g++ may already: the flags then change
    # nothing); with the flags the stage's table reads are gathers
    assert gathers["gathers"] > 0 and gathers["gathers"] >= gathers["default"], gathers


def test_gathers_only_where_they_are_fast(monkeypatch):
    """GATHER_FLAGS join a first-stage library's flags only on x86-64 with AVX-512 that the
    kernel reports not affected by GDS (the microcode mitigation slows gathers) and a g++."""
    x86 = "x86_64\nflags\t: fpu sse2 avx2 avx512f avx512dq\n"
    cases = [("x86_64", x86, "Mitigation: Microcode\n", ()),
             ("x86_64", x86.replace(" avx512f", ""), "Not affected\n", ()),
             ("x86_64", x86, "", ()),  # no report (an older kernel)
             ("aarch64", x86, "Not affected\n", ())]
    takes = subprocess.run([*toolchain.compiler_command(), *cpurt.GATHER_FLAGS,
                            "-fsyntax-only", "-x", "c++", "/dev/null"], capture_output=True,
                           check=False)
    gxx = "clang" not in toolchain.compiler_identity(
        tuple(toolchain.compiler_command())).lower() and takes.returncode == 0
    cases.append(("x86_64", x86, "Not affected\n", cpurt.GATHER_FLAGS if gxx else ()))
    try:
        for machine, ident, gds, want in cases:
            cpurt.gather_flags.cache_clear()
            monkeypatch.setattr(cpurt.platform, "machine", lambda m=machine: m)
            monkeypatch.setattr(cpurt, "_host_identity", lambda i=ident: i)
            monkeypatch.setattr(cpurt, "_read", lambda path, g=gds: g)
            assert cpurt.gather_flags() == want, (machine, ident, gds)
    finally:
        monkeypatch.undo()
        cpurt.gather_flags.cache_clear()


def _kernel(name):
    """The cpu kernel called ``name``."""
    for op in registry.REGISTRY.values():
        for ft in gtensor.dtypes.FLOATS:
            for k in op.kernel_set(ft, cpu=True).kernels:
                if k.name == name:
                    return k
    raise KeyError(name)


@cache
def _gelu_inputs(dtype):
    """(gate inputs, grad inputs): float64 lanes whose stage (erf's inside gelu_gate, exp's
    inside gelu_gate_grad) is flagged and wrong, among lanes it decides."""
    ft = gtensor.dtypes.F64 if dtype == np.float64 else gtensor.dtypes.F32
    with np.errstate(all="ignore"):
        e = _parity_inputs("erf", dtype)
        gate = np.concatenate([e / dtype(E.SQRT1_2), e]).astype(dtype)
        ex = _parity_inputs("exp", dtype)
        grad = np.concatenate([np.sqrt(np.abs(ex)) / dtype(E.SQRT1_2),
                               np.linspace(30, 40, 4001)]).astype(dtype)
    out = []
    for x, fn, args in ((gate, E.GELU_GATE[ft], lambda x: (x,)),
                        (grad, E.GELU_GATE_GRAD[ft], lambda x: (np.full_like(x, 0.75), x))):
        value, bad = fn.first_numpy(*args(x))
        wrong = bad & ~_same(value, fn.numpy(*args(x)))
        assert dtype == np.float32 or wrong.sum() >= 4
        n = 5 * FIRST_BLOCK + 77
        placed = np.resize(x[~bad], n).astype(dtype)
        if wrong.any():
            spots = [0, FIRST_BLOCK - 1, FIRST_BLOCK, 2 * FIRST_BLOCK - 1, n // 2, n - 1]
            placed[spots] = np.resize(x[wrong], len(spots))
            run = x[wrong][:64]
            placed[3 * FIRST_BLOCK: 3 * FIRST_BLOCK + len(run)] = run
        out.append(placed)
    return tuple(out)


@pytest.mark.parametrize("threads", ["1", "3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS.get)
def test_gelu_gate_and_its_grad_stage_equal_numpy(be, dtype, threads, monkeypatch):
    """gelu_gate (a map calling erf) and gelu_gate_grad (a two-input zip calling exp) run the
    callee's stage over blocks on cpu: equal to numpy with flagged, wrongly staged lanes at
    block edges, in contiguous rows and in broadcast ones (g a row broadcast over x's)."""
    monkeypatch.setenv("GTENSOR_CPU_THREADS", threads)
    ref = gtensor.backend("numpy")
    gate, grad = _gelu_inputs(dtype)
    want = ref.to_numpy(ref.gelu_gate(gate))
    got = be.to_numpy(be.gelu_gate(be.asarray(gate)))
    assert _same(got, want).all(), gate[~_same(got, want)][:4]
    g = np.random.default_rng(5).normal(size=grad.shape).astype(dtype)
    for gs, xs in ((g, grad), (g[:77].reshape(1, 77), grad[:77 * 17].reshape(17, 77))):
        want = ref.to_numpy(ref.gelu_gate_grad(gs, xs))
        got = be.to_numpy(be.gelu_gate_grad(be.asarray(gs), be.asarray(xs)))
        assert _same(got, want).all(), xs[~_same(got, want)][:4]
    (k,) = registry.get("gelu_gate_grad").kernel_set(
        gtensor.dtypes.F64 if dtype == np.float64 else gtensor.dtypes.F32, cpu=True).kernels
    assert FIRST_STAGE_LOOP in k.source()
