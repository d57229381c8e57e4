"""Shared fixtures: the backend under test (GRAD_TEST_BACKEND) and hypothesis profiles."""

from __future__ import annotations

import os

import gtensor
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=6, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("oracle", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

BACKEND = os.environ.get("GRAD_TEST_BACKEND", "numpy")


def _make(name: str):
    try:
        return gtensor.backend(name)
    except RuntimeError as e:  # cuda without cupy or without a GPU
        pytest.skip(f"backend {name!r} unavailable here: {e}")


@pytest.fixture(scope="session")
def be():
    """The backend under test."""
    return _make(BACKEND)


@pytest.fixture(scope="session")
def ref():
    """The numpy reference backend."""
    return gtensor.backend("numpy")


@pytest.fixture(scope="session")
def other(be):
    """The backend under test, when it is not the reference itself (parity tests)."""
    if be.name == "numpy":
        pytest.skip("parity of the numpy reference with itself is vacuous; run with "
                    "GRAD_TEST_BACKEND=sim or cuda")
    return be
