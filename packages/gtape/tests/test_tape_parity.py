"""The numpy tape vs the tape on the backend under test (sim, cuda): bitwise, every node."""

from __future__ import annotations

import numpy as np
import pytest
from gtape_graphs import ORACLE_GRAPHS, run_tape
from gtape_testutil import bits_equal


@pytest.mark.parametrize("inner", ["plain", "fma"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("graph", ORACLE_GRAPHS, ids=[gr.name for gr in ORACLE_GRAPHS])
def test_every_value_and_gradient_bitwise(other, graph, dtype, inner):
    want = run_tape(graph, "numpy", dtype, inner=inner)
    got = run_tape(graph, other, dtype, inner=inner)
    assert len(want["values"]) == len(got["values"])
    for i, (a, b) in enumerate(zip(want["values"], got["values"])):
        assert bits_equal(a, b), f"{graph.name}: value of node {i} differs on {other}"
    for i, (a, b) in enumerate(zip(want["grads"], got["grads"])):
        assert (a is None) == (b is None)
        assert a is None or bits_equal(a, b), f"{graph.name}: grad of node {i} differs"
    for k in graph.params:
        assert bits_equal(want["param_grads"][k], got["param_grads"][k])
    assert np.asarray(want["loss"]).dtype == np.dtype(dtype)
