"""pytest fixtures shared by the test suites of the packages above gtensor.

Import them into a conftest: ``from gtensor.testing_fixtures import bname, other``.
Needs pytest (every package's ``test`` extra has it); gtensor itself does not.
"""

from __future__ import annotations

import pytest

from . import testing


@pytest.fixture(scope="session")
def bname() -> str:
    """The name of the backend under test (skips if it is unavailable here)."""
    return testing.require_backend(testing.backend_name()).name


@pytest.fixture(scope="session")
def other(bname: str) -> str:
    """The backend under test when it is not numpy (numpy-vs-backend parity)."""
    return testing.require_other(bname)
