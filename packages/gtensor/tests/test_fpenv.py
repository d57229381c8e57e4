"""The floating-point mode is part of the contract: with FTZ/DAZ switched on (here: by loading
a library built with -ffast-math, as real extensions do), the numpy reference refuses instead
of silently flushing subnormals, and the sim kernels, which install the mode themselves, keep
computing the reference bits."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not shutil.which("cc"),
    reason="needs an x86-64 C compiler (crtfastmath sets FTZ/DAZ at load there)")

CHILD = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import gtensor
    ctypes.CDLL(sys.argv[1])                      # its constructor turns FTZ/DAZ on
    be = gtensor.backend("numpy")
    x = be.asarray(np.array([5e-324, 1e-310]))
    try:
        be.mul(x, be.asarray(np.array([1.0, 0.5])))
    except FloatingPointError as e:
        print("REFUSED", e)
    sim = gtensor.backend(sys.argv[2])
    y = sim.to_numpy(sim.mul(sim.asarray(np.array([5e-324, 1e-310])),
                             sim.asarray(np.array([1.0, 0.5]))))
    print("KERNEL", y.view(np.uint64).tolist())
""")


def test_ftz_daz_is_refused_by_numpy_and_ignored_by_the_kernels(tmp_path):
    src = tmp_path / "fast.c"
    src.write_text("int gt_fast_math_marker(void) { return 1; }\n")
    lib = tmp_path / "libfast.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-ffast-math", "-o", str(lib), str(src)],
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", CHILD, str(lib), "sim"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "REFUSED mul: this thread flushes subnormal numbers" in out.stdout, out.stdout
    # the kernels ran in the contract's mode: 5e-324 * 1 and 1e-310 * 0.5 kept, not flushed
    import numpy as np

    want = (np.array([5e-324, 1e-310]) * np.array([1.0, 0.5])).view(np.uint64).tolist()
    assert f"KERNEL {want}" in out.stdout, out.stdout
