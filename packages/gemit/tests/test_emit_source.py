"""The emitted text is gtensor's own kernel text, only what the episode needs, plain C."""

from __future__ import annotations

import re

import gtape as g
import numpy as np
from gemit import emit_c
from gtape.trace import trace
from gtensor.cuda_source import module_source


def _episode():
    tp = g.Tape()
    w, b = tp.param(np.ones((3, 1))), tp.param(np.zeros(1))
    x, y = tp.const(np.ones((1, 3))), tp.const(np.ones((1, 1)))
    return tp, w, b, x, y, g.mse(x @ w + b, y)


def test_kernel_bodies_are_gtensors_text() -> None:
    """Every launched kernel's body appears verbatim: editing an op edits the emitted code."""
    tp, w, b, x, y, loss = _episode()
    src = emit_c(tp, loss, params=[w, b], inputs=[x, y])
    t = trace(tp, loss, "sim")
    used = {launch.kernel.name: launch.kernel for launch in [*t.forward, *t.backward]}
    assert used, "the episode launched no kernels"
    for k in used.values():
        assert k.body in src, f"kernel {k.name}'s body is not in the emitted source"
        assert f"gemit_{k.name}(" in src


def test_only_needed_device_functions_and_std_headers() -> None:
    tp, w, b, x, y, loss = _episode()
    src = emit_c(tp, loss, params=[w, b], inputs=[x, y])
    defined = set(re.findall(r"__device__ __forceinline__ \w+ (gt_\w+)\(", src))
    assert {"gt_add_f64", "gt_mul_f64"} <= defined
    assert not {"gt_exp_f64", "gt_tanh_f64", "gt_add_f32"} & defined, defined
    assert set(re.findall(r"#include <([^>]+)>", src)) == {"math.h", "stdbool.h", "string.h"}
    module = module_source()  # gtensor's own CUDA module
    assert all(f"{name}(" in module for name in defined)


def test_float32_tape_emits_float_code() -> None:
    with g.Tape("numpy", "float32") as tp:
        w, x = tp.param(np.ones(2)), tp.const(np.ones(2))
        src = emit_c(tp, g.sum(g.tanh(w * x)), params=[w], inputs=[x], name="g32")
    assert "float g32(const float *params, const float *example, float *grad_out)" in src
    assert "double" not in src.split("float g32(")[-1]


def test_typed_locals_and_tables_keep_the_float_signature() -> None:
    """int64 / bool intermediates are typed local arrays and baked ids a typed constant table;
    with no typed leaf among the inputs the signature keeps its three arguments."""
    from gemit.render import literal

    with g.Tape() as tp:
        w, x = tp.param(np.ones((3, 4))), tp.const(np.ones((3, 4)))
        picked = g.take(w, np.array([2, -1, 0]), axis=0)  # ids given as data: baked
        rows = g.take(w, g.argmax(x, axis=-1), axis=0)  # an int64 intermediate
        loss = g.sum(g.where(g.greater(x, 0.5), picked, rows))  # a bool intermediate
        src = emit_c(tp, loss, params=[w], inputs=[x])
    assert "double grad(const double *params, const double *example, double *grad_out)" in src
    assert "example_ids" not in src
    assert re.search(r"\n    long long ix\d+\[3\] = \{0\};", src)  # argmax's result
    assert re.search(r"\n    bool mk\d+\[12\] = \{0\};", src)  # greater's mask
    assert "const long long k[3] = {2LL, -1LL, 0LL};" in src
    assert literal(-2**63, "long long") == "(-9223372036854775807LL - 1)"
    assert literal(np.True_, "bool") == "true"


def test_the_emitted_inner_products_follow_the_tape_contract() -> None:
    """A plain tape's C has no fused multiply-add at all (the graph has no correctly rounded
    function: those use fma by definition, docs/semantics.md); an fma tape's has exactly the
    fma contract's dot (its one __fma_rn) and says so in the header."""
    srcs = {}
    for inner in ("plain", "fma"):
        with g.Tape("numpy", inner=inner) as tp:
            w, x = tp.param(np.ones((3, 2))), tp.const(np.ones((1, 3)))
            srcs[inner] = emit_c(tp, g.sum(g.relu(x @ w)), params=[w], inputs=[x])
    body = srcs["plain"].split("return fmaf(a, b, c); }")[-1]  # after the prelude
    assert "gemit_k_matmul_f64(" in body and not re.search(r"__fmaf?_rn\(|\bfmaf?\(", body)
    assert "gt_dot_f64(" in srcs["plain"] and "gt_dot_fma_f64" not in srcs["plain"]
    assert "gt_dot_fma_f64(" in srcs["fma"] and "__fma_rn(a[kk * as]" in srcs["fma"]
    assert "inner products: the tape's 'fma' contract" in srcs["fma"]
