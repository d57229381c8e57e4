"""Kernel kinds are objects (``gtensor.kernels.Kind``): no source compares a kind with a string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gtensor.kernels import KINDS, Kernel, Kind

ROOT = Path(__file__).resolve().parents[3]
NAMES = "|".join(k.value for k in Kind)
_TEST = (r"\s*(?:==|!=|\bis\b(?:\s+not)?|\bin\b|\bnot\s+in\b)\s*[\(\[\{]?\s*"
         rf"(?:[\"'](?:{NAMES})[\"']\s*,?\s*)+")
# a ``.kind`` attribute (a kernel's, a launch's) compared with, or tested against, a kind's
# name; in modules that use kernel kinds, a bare ``kind`` too (elsewhere ``kind`` names other
# things: gverify's trace leaves "forward" / "backward" / "update" are a wire format)
ATTRIBUTE = re.compile(r"\.kind" + _TEST)
BARE = re.compile(r"\bkind" + _TEST)


def string_kind_comparisons(text: str) -> list[str]:
    """The lines of ``text`` that compare a kernel kind with a kind's name as a string."""
    kernel_module = "gtensor.kernels" in text or "from ..kernels" in text or \
        "from .kernels" in text
    return [line.strip() for line in text.splitlines()
            if ATTRIBUTE.search(line) or (kernel_module and BARE.search(line))]


def test_the_scan_finds_a_string_comparison():
    """The scan can fail: each spelling of a string comparison is found."""
    for line in ('if info.kind == "matmul":', "ok = k.kind in ('zip', 'copy')",
                 'return self.kind not in ("map",)', 'x = launch.kernel.kind is "fill"'):
        assert string_kind_comparisons(line) == [line], line
    bare = 'from gtensor.kernels import Kind\nif kind != "update":'
    assert string_kind_comparisons(bare) == ['if kind != "update":']
    assert not string_kind_comparisons("if info.kind is Kind.MATMUL:")
    assert not string_kind_comparisons('if host.dtype.kind in "biu":')


def test_no_source_compares_a_kernel_kind_with_a_string():
    files = sorted(ROOT.glob("packages/*/src/**/*.py"))
    assert len(files) > 100
    found = [f"{f.relative_to(ROOT)}: {line}" for f in files
             for line in string_kind_comparisons(f.read_text())]
    assert not found, "kernel kinds compared as strings:\n" + "\n".join(found)


def test_a_kernel_refuses_a_string_kind():
    with pytest.raises(TypeError, match="kind 'map' is not a gtensor.kernels.Kind"):
        Kernel("k_x_f64", (), "", "map")
    assert Kernel("k_x_f64", (), "", Kind.MAP).kind is Kind.MAP
    assert KINDS == tuple(Kind) and Kind("matmul") is Kind.MATMUL


def _all_kernels() -> list[Kernel]:
    from gtensor import cuda_source
    from gtensor.runtime import cpu_source

    return [*cuda_source.module_kernels(), *cpu_source.cpu_kernels()]


def test_every_kernel_carries_a_form_that_answers_fusion():
    """Each CUDA and cpu kernel has a form object (``gtensor.ops.forms.Form``); one that
    keeps its own launch says why, one that fuses has index maps and a statement of its own,
    and the gather / scatter / argmax / conv / pool / random kernels keep theirs."""
    from gtensor.ops.forms import Form, Opaque

    kernels = _all_kernels()
    assert len(kernels) > 200
    missing = [k.name for k in kernels if not isinstance(k.form, Form)]
    assert not missing, f"kernels without a form: {missing}"
    for k in kernels:
        if not k.form.fusable:
            assert k.form.why, k.name
        else:
            assert not isinstance(k.form, Opaque)
            assert type(k.form).index_maps is not Form.__dict__.get("index_maps"), k.name
    keeps = {Kind.GATHER, Kind.SCATTER, Kind.CONV, Kind.POOL, Kind.RANDOM, Kind.ROWS,
             Kind.ATTENTION}
    for k in kernels:
        if k.kind in keeps:
            assert not k.form.fusable, f"{k.name} ({k.kind}): {k.form}"
    assert {k.kind for k in kernels if isinstance(k.form, Opaque)} >= keeps - {Kind.ROWS}


def test_an_opaque_form_refuses_maps_and_statements():
    from gtensor.ops.forms import GATHER

    with pytest.raises(TypeError, match="the gather form keeps its own launch .*no index maps"):
        GATHER.index_maps({"n": 3})
    with pytest.raises(TypeError, match="no statement"):
        GATHER.statement(("f",), {"y": "p0"}, "i", {}, "double")
    assert not GATHER.fuses({}) and GATHER.why


def test_the_product_form_answers_for_matmul():
    """Matmul's form: one product fuses (a batched one keeps its launch), its flags name the
    operands read transposed in place, row i of c reads row i of a, and its statement is the
    per-node kernel's row helper call (a transposed operand read with its strides)."""
    import numpy as np
    from gtensor.ops.forms import Product

    f = Product("fma")
    a, b = np.zeros((2, 3)), np.zeros((3, 4))
    args = {"a": a, "b": b, "batch": 1, "m": 2, "k": 3, "n": 4, "ta": 0, "tb": 1}
    assert f.fuses(args) and not f.fuses({**args, "batch": 2})
    assert f.transposed(args) == {"b": b} and f.transposed({**args, "tb": 0}) == {}
    acc = f.index_maps(args)
    assert acc.n == 8 and list(acc.oo) == list(range(8))
    assert f.row_aligned("a", 2, args, ()) and not f.row_aligned("a", 2, args, ("a",))
    assert not f.row_aligned("b", 2, args, ())
    lit = {"m": "2LL", "k": "3LL", "n": "4LL"}
    plain = f.statement(("gt_dot_fma_f64",), {"a": "A", "b": "B", "c": "C"}, "i", lit, "double")
    assert "C[i] = gt_dot_fma_f64(A + i_ * 3LL, 1, B + j_, 4LL, 3LL)" in plain
    flipped = f.statement(("gt_dot_fma_f64",), {"a": "A", "b": "B", "c": "C"}, "i", lit,
                          "double", ("a", "b"))
    assert "C[i] = gt_dot_fma_f64(A + i_, 2LL, B + j_ * 3LL, 1, 3LL)" in flipped
