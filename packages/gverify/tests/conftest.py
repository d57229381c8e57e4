"""gverify test configuration: the backend under test (GRAD_TEST_BACKEND) and import fallbacks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

try:  # a fresh clone without editable installs: use the sources next to us
    import gverify  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src")
                    for n in ("gverify", "ggpu-replay", "gopt", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor import testing  # noqa: E402
from gtensor.testing_fixtures import bname, other  # noqa: E402, F401  (shared fixtures)

testing.load_hypothesis_profiles()

KERNEL_BACKENDS = ("sim", "cpu", "cuda")


@pytest.fixture(scope="session")
def device(bname):
    """Where a captured program runs in this session: the backend under test when it runs
    kernels (sim, cpu, cuda); the numpy session skips replay tests (the others run them)."""
    if bname not in KERNEL_BACKENDS:
        pytest.skip("a captured program needs a kernel backend; the replay tests run in the "
                    "sim, cpu and cuda sessions")
    return bname


@pytest.fixture(scope="session")
def child_env():
    """The environment of a child Python process that imports exactly these packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).exists())
    return env
