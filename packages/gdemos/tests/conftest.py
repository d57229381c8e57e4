"""gdemos test configuration: the backend under test (GRAD_TEST_BACKEND) and import fallbacks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

try:  # a fresh clone without editable installs: use the sources next to us
    import gdemos  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src") for n in ("gdemos", "gopt", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor.testing_fixtures import bname, other  # noqa: E402, F401  (shared fixtures)


@pytest.fixture(scope="module")
def full_run(bname):
    """One full 60-epoch rung-1 run on the backend under test, shared by the bar tests."""
    from gdemos import AEConfig, train

    return train(AEConfig(backend=bname))
