"""Fixtures: the tape's backend under test and the device the program replays on."""

from __future__ import annotations

import pytest
from gtensor import testing
from gtensor.testing_fixtures import bname  # noqa: F401  (fixture)

testing.load_hypothesis_profiles()


@pytest.fixture(scope="session")
def device() -> str:
    """Where programs run: "cuda" in the cuda session (skipped without a GPU), "cpu" in the cpu
    session (the captured step as one native call), else "sim"."""
    session = testing.backend_name()
    name = session if session in ("cuda", "cpu") else "sim"
    return testing.require_backend(name).name
