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


# the ways a gdemos test uses the backend under test: these fixtures, or reading it itself
BACKEND_FIXTURES = frozenset({"bname", "other", "full_run"})
_READS_BACKEND = ("backend_name", "GRAD_TEST_BACKEND")


def pytest_collection_modifyitems(config, items) -> None:
    """A test that uses no backend fixture in a module that never reads the backend under test
    (the swarm, dp, LoRA core / CLI and verdict tests run their own engines) gives the same
    result in every session: it runs once, in the numpy session, and the sim and cpu sessions
    skip it with that reason (``nox -s oracle`` / GRAD_SLOW=1 run all)."""
    from gtensor import testing

    if testing.backend_name() == "numpy" or testing.slow_runs():
        return
    once = pytest.mark.skip(reason="does not use the backend under test: runs once, in the "
                            "numpy session")
    reads: dict[Path, bool] = {}
    for item in items:
        path = Path(item.path)
        if path not in reads:
            text = path.read_text()
            reads[path] = any(word in text for word in _READS_BACKEND)
        if not reads[path] and not BACKEND_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(once)
