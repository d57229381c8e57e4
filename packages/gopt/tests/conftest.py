"""gopt test configuration: the backend under test (GRAD_TEST_BACKEND) and import fallbacks."""

from __future__ import annotations

import sys
from pathlib import Path

try:  # a fresh clone without editable installs: use the sources next to us
    import gopt  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src") for n in ("gopt", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor import testing  # noqa: E402
from gtensor.testing_fixtures import bname, other  # noqa: E402, F401  (shared fixtures)

testing.load_hypothesis_profiles()

