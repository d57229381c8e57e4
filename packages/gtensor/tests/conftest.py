"""Shared fixtures: the backend under test (GRAD_TEST_BACKEND) and hypothesis profiles."""

from __future__ import annotations

import gtensor
import pytest
from gtensor import testing

testing.load_hypothesis_profiles()


@pytest.fixture(scope="session")
def be():
    """The backend under test."""
    return testing.require_backend(testing.backend_name())


@pytest.fixture(scope="session")
def ref():
    """The numpy reference backend."""
    return gtensor.backend("numpy")


@pytest.fixture(scope="session")
def other(be):
    """The backend under test, when it is not the reference itself (parity tests)."""
    testing.require_other(be.name)
    return be


# the fixtures through which a test uses the backend under test (GRAD_TEST_BACKEND)
BACKEND_FIXTURES = frozenset({"be", "other"})


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (heavy oracles) run only in the oracle session or with
    ``GRAD_SLOW=1`` (``testing.skip_slow``).

    A test that uses no backend fixture (``be``, ``other``) tests the same thing whatever
    GRAD_TEST_BACKEND says (the scalar language, the registry, an explicitly named backend, the
    compilers): it runs once, in the numpy session (``nox -s suite`` runs that one first), and
    is skipped with that reason in the others. The oracle run (or GRAD_SLOW=1) runs all."""
    testing.skip_slow(items)
    if testing.slow_runs() or testing.backend_name() == "numpy":
        return
    once = pytest.mark.skip(reason="uses no backend under test (no `be` / `other` fixture): "
                            "runs once, in the numpy session")
    for item in items:
        if not BACKEND_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(once)


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the transcendental accuracy measured by test_transcendental (max ulp vs mpmath)
    and test_crmath (correct rounding counts, fast-path bounds and rates)."""
    import sys

    module = sys.modules.get("test_transcendental")
    for line in getattr(module, "ULP_REPORT", []):
        terminalreporter.write_line(f"ulp vs mpmath: {line}")
    for line in getattr(sys.modules.get("test_crmath"), "MEASURED", []):
        terminalreporter.write_line(f"correctly rounded: {line}")
