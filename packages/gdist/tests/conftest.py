"""gdist test configuration: the backend under test, import fallbacks, Dask clusters.

The models the tests train live in ``gdist_models`` (next to this file); they are pickled by
value (cloudpickle), as a user's own functions are, so worker processes need no test files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

try:  # a fresh clone without editable installs: use the sources next to us
    import gdist  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src") for n in ("gdist", "gopt", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor.testing_fixtures import bname  # noqa: E402, F401  (shared fixtures)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (the full matrices) run only in the oracle session
    (``HYPOTHESIS_PROFILE=oracle``, set by ``nox -s oracle``) or with ``GRAD_SLOW=1``."""
    if os.environ.get("HYPOTHESIS_PROFILE") == "oracle" or os.environ.get("GRAD_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: runs in `nox -s oracle` (or GRAD_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
