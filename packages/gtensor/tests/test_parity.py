"""numpy reference vs the backend under test (sim, cuda): bitwise, every op x shape x dtype."""

from __future__ import annotations

import numpy as np
import pytest
from cases import CASES, case_inputs
from gtensor import REGISTRY
from gtensor.testing import bits_equal, first_difference
from hypothesis import given
from hypothesis import strategies as st

DTYPES = [np.float64, np.float32]


def _run(be, case, arrays_, dtype=None):
    xs = [be.asarray(a, dtype=a.dtype) for a in arrays_]
    fn = getattr(be, case.op)
    needs_dtype = not case.shapes or "dtype" in REGISTRY[case.op].attrs
    attrs = {**case.attrs, "dtype": dtype} if needs_dtype else dict(case.attrs)
    out = fn(xs, **attrs) if case.op == "concat" else fn(*xs, **attrs)
    return be.to_numpy(out)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@given(data=st.data())
def test_bitwise_parity(other, ref, case, dtype, data):
    inputs = [data.draw(strategy, label=f"input{i}")
              for i, strategy in enumerate(case_inputs(case, dtype))]
    want = _run(ref, case, inputs, dtype)
    got = _run(other, case, inputs, dtype)
    out_type = REGISTRY[case.op].out_type
    if out_type == "any":  # the movement ops: the inputs' element dtype
        out_type = case.element or "float"
    expected = {"float": np.dtype(dtype), "int64": np.dtype(np.int64),
                "bool": np.dtype(np.bool_)}[out_type]
    assert want.dtype == expected and got.dtype == expected
    assert bits_equal(want, got), (
        f"{case.id} {np.dtype(dtype)} on {other.name}: {first_difference(want, got)}\n"
        f"inputs: {inputs!r}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_large_rows_and_grids(other, ref, dtype):
    """Shapes past one block / many blocks: grid-stride loops and multi-block row kernels."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 70)).astype(dtype)
    b = rng.standard_normal((70, 90)).astype(dtype)
    for op, args, attrs in [("matmul", (a, b), {}), ("matmul", (a, b), {"inner": "fma"}),
                            ("softmax", (a,), {"axis": 0}),
                            ("softmax", (a,), {"axis": 1}), ("sum", (a,), {"axis": 0}),
                            ("sum", (a,), {}), ("exp", (a,), {}), ("add", (a, a[:1]), {}),
                            ("transpose", (a,), {}), ("sum_to", (a,), {"shape": (70,)})]:
        want = ref.to_numpy(getattr(ref, op)(*[ref.asarray(x) for x in args], **attrs))
        got = other.to_numpy(getattr(other, op)(*[other.asarray(x) for x in args], **attrs))
        assert bits_equal(want, got), f"{op}: {first_difference(want, got)}"
