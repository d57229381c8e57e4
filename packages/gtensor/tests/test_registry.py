"""Registry coverage: every op has a reference, kernels in the module, a parity row and a rule."""

from __future__ import annotations

import re

import gtensor
import pytest
from cases import CASES
from gtensor.cuda_source import module_kernels, module_source
from gtensor.dtypes import FLOATS

# the backward helpers (relu_grad, ..., take_grad, ...) have rules too: double
# backward; comparisons, argmax and index_weight give int64 / bool (no gradient)
NON_DIFFERENTIABLE = {"fill", "adam_m", "adam_v", "adam_p", "sgd_p", "greater", "greater_equal",
                      "less", "less_equal", "equal", "not_equal", "argmax", "index_weight",
                      "rng_bits", "rng_uniform", "rng_normal", "rng_fold", "add_int",
                      "qkv_attention_grad", "ln_normalize_grad", "bn_normalize_grad",
                      "bn_sum_squares", "bn_affine_grad", "bn_weight_grad"}
EXPECTED_OPS = set(gtensor.REGISTRY)  # every op is checked below; none is listed by hand


def test_every_op_module_is_registered():
    """Every module of gtensor.ops is imported by the package (so its ops are registered) and
    registers at least one op (or in-place update); the registry names each op once, by its
    own name."""
    import importlib
    import pkgutil

    import gtensor.ops as ops_pkg

    not_ops = {"registry", "forms", "checks", "inner"}
    mods = {m.name for m in pkgutil.iter_modules(ops_pkg.__path__)} - not_ops
    assert mods, "no op modules found"
    defined = {importlib.import_module(f"gtensor.ops.{m}").__name__ for m in mods}
    from gtensor.ops.registry import UPDATES

    owners = {f.__module__ for op in gtensor.REGISTRY.values()
              for f in (op.launch, op.reference, op.vjp) if f is not None}
    owners |= {type(u).__module__ for u in UPDATES.values()}  # the in-place updates' module
    assert defined <= owners | {"gtensor.ops.registry"}, sorted(defined - owners)
    assert all(name == op.name for name, op in gtensor.REGISTRY.items())
    assert len(EXPECTED_OPS) >= 50


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_op_is_fully_defined(name):
    op = gtensor.REGISTRY[name]
    assert callable(op.reference) and callable(op.infer) and callable(op.launch)
    names = {k.name for k in module_kernels()}
    for ft in FLOATS:
        kernels = op.kernel_set(ft).kernels
        assert kernels, f"{name} has no {ft.name} kernel"
        for k in kernels:
            assert k.name in names
            assert k.name.endswith(ft.suffix)
        # the cpu backend's host kernels: same names and parameters (one launch drives both)
        assert op.cpu is not None, f"{name} has no cpu kernels (Op.cpu)"
        assert [(k.name, k.params) for k in op.kernel_set(ft, cpu=True).kernels] == [
            (k.name, k.params) for k in kernels]
    assert any(c.op == name for c in CASES), f"{name} has no row in tests/cases.py"
    assert op.differentiable == (name not in NON_DIFFERENTIABLE)
    assert op.doc, f"{name} has no one-line description"


def test_every_backend_method_exists():
    for be_name in ("numpy", "cpu"):
        be = gtensor.backend(be_name)
        for name in EXPECTED_OPS:
            assert callable(getattr(be, name))


def test_module_source_uses_only_rounded_intrinsics():
    """No FMA (but in the fma contract's matmul and conv kernels and the correctly rounded
    functions), no libm transcendental, no fast-math intrinsic in the kernels' text."""
    from gtensor.cuda_source import module_kernels
    from gtensor.ops.inner import fma_contract_text

    src = module_source()
    allowed = fma_contract_text(module_kernels())
    # matmul's 2 kernels (calling gt_dot_fma) and 2 helpers, the conv ops' 6 kernels, the
    # attention ops' 4
    assert len(allowed) == 14
    assert sum("__fma_rn(" in t or "__fmaf_rn(" in t for t in allowed) == 12
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
    for banned in (r"\bfma\b", r"\bfmaf\b", r"__fmaf?_r", r"\bexpf?\(", r"\blogf?\(",
                   r"\btanhf?\(", r"__expf", r"__logf", r"__shfl", r"atomic"):
        assert not re.search(banned, src), f"module source contains {banned}"
    # every floating + - * / of the device functions is an explicit intrinsic
    assert "__dadd_rn" in src and "__fmul_rn" in src


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_kernels_say_what_they_are(name):
    """Every kernel names its kind and the scalar functions it computes with (fusion reads
    them); elementwise ops compute with exactly one scalar function."""
    from gtensor.kernels import KINDS, Kind

    for ft in FLOATS:
        for k in gtensor.REGISTRY[name].kernel_set(ft).kernels:
            assert k.kind in KINDS and k.kind is not Kind.OTHER, f"{k.name}: kind {k.kind}"
            if k.kind in (Kind.MAP, Kind.SCALAR, Kind.ZIP):
                assert len(k.calls) == 1 and k.calls[0].cname.endswith(ft.suffix)
                assert k.calls[0].cname in k.body
            if k.kind in (Kind.MATMUL, Kind.REDUCE, Kind.ROWS):
                names = [getattr(fn, "cname", None) or fn.name for fn in k.calls]
                assert names and all(name in k.body for name in names), (k.name, names)


def test_module_functions_come_from_the_kernels():
    from gtensor.cuda_source import device_functions

    def name(fn):
        return getattr(fn, "cname", None) or fn.name

    names = {name(fn) for fn in device_functions()}
    called = {name(fn) for k in module_kernels() for fn in k.calls}
    assert names == called and {"gt_exp_f64", "gt_max_f32", "gt_dot_f64", "gt_sum_f32"} <= names
    src = module_source()
    assert src.index("gt_mul_f64(") < src.index("gt_dot_f64(")  # callees first


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_typed_inputs_are_declared(name):
    """Every index / mask input is declared (its kernel parameter has the matching C type)."""
    from gtensor import dtypes

    op = gtensor.REGISTRY[name]
    if op.variadic:
        return
    want = {dtypes.FLOAT: None, dtypes.INT: "int64", dtypes.BOOL: "bool"}
    typed_moves = {"copy_i64": "int64", "copy_b8": "bool"}  # an ANY input's typed kernels
    for base, k in op.kernel_set(dtypes.F64).items():
        data = [p for p in k.params if p.is_pointer and p.is_const and not p.is_geometry]
        if len(data) != len(op.inputs):
            continue  # kernels that take a different array list (the optimizer updates)
        for i, p in enumerate(data):
            kind = op.input_type(i)
            if kind == dtypes.ANY:
                assert p.dtype == typed_moves.get(base, "float64"), (name, i, p)
            elif kind == dtypes.NUMBER:  # a comparison: its float kernel, its int64 one
                assert p.dtype == ("int64" if base.endswith("_i64") else "float64"), (name, p)
            else:
                assert p.dtype == (want[kind] or "float64"), (name, i, p)
