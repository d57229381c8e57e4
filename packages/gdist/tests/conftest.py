"""gdist test configuration: the backend under test, import fallbacks, Dask clusters.

The models the tests train live in ``gdist_models`` (next to this file); they are pickled by
value (cloudpickle), as a user's own functions are, so worker processes need no test files.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:  # a fresh clone without editable installs: use the sources next to us
    import gdist  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src") for n in ("gdist", "gopt", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor import testing  # noqa: E402
from gtensor.testing_fixtures import bname  # noqa: E402, F401  (shared fixtures)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (the full matrices) run only in the oracle session or with
    ``GRAD_SLOW=1`` (``testing.skip_slow``)."""
    testing.skip_slow(items)
