"""The same optimizer steps on numpy and on the backend under test land on the same bits."""

from __future__ import annotations

import pytest
from gopt import SGD, Adam
from gopt_testutil import ALPHAS, run_tape
from gtensor.testing import bits_equal, first_difference

CASES = {
    "sgd+l2+clip": (lambda tp: SGD(tp, lr=0.05), ALPHAS, 2.0),
    "adam": (lambda tp: Adam(tp, lr=0.1), None, None),
    "adam+l2+clip": (lambda tp: Adam(tp, lr=0.3), ALPHAS, 3.0),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_backend_matches_numpy_bitwise(other, case, dtype):
    make, alphas, clip = CASES[case]
    ref = run_tape("numpy", dtype, make, 8, alphas=alphas, clip=clip)
    got = run_tape(other, dtype, make, 8, alphas=alphas, clip=clip)
    for step, (a_ps, b_ps) in enumerate(zip(ref["traj"], got["traj"])):
        for k, (a, b) in enumerate(zip(a_ps, b_ps)):
            assert bits_equal(a, b), f"{case} param {k} step {step + 1}: {first_difference(a, b)}"
    assert ref["norms"] == got["norms"]
    ra, ga = ref["opt"].state_dict(), got["opt"].state_dict()
    for key in ra:
        assert bits_equal(ra[key], ga[key]) if ra[key].dtype.kind == "f" else \
            (ra[key] == ga[key]).all(), key
