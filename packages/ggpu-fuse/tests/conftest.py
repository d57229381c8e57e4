"""Fixtures: the device the fused program runs on ("cuda" in the cuda session, else "sim")."""

from __future__ import annotations

import pytest
from gtensor import testing

testing.load_hypothesis_profiles()


@pytest.fixture(scope="session")
def device() -> str:
    """"cuda" in the cuda session (skipped without a GPU), else "sim"."""
    name = "cuda" if testing.backend_name() == "cuda" else "sim"
    return testing.require_backend(name).name
