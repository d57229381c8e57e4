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


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the transcendental accuracy measured by test_transcendental (max ulp vs mpmath)."""
    import sys

    module = sys.modules.get("test_transcendental")
    for line in getattr(module, "ULP_REPORT", []):
        terminalreporter.write_line(f"ulp vs mpmath: {line}")
