"""Fixtures: the device the fused program runs on ("cuda" in the cuda session, else "sim")."""

from __future__ import annotations

import pytest
from ggpu_fuse import program
from gtensor import testing
from gtensor.kernels import Kind

testing.load_hypothesis_profiles()


@pytest.fixture(scope="session")
def device() -> str:
    """"cuda" in the cuda session (skipped without a GPU), else "sim"."""
    name = "cuda" if testing.backend_name() == "cuda" else "sim"
    return testing.require_backend(name).name


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: runs in `nox -s oracle` (or GRAD_SLOW=1)")
    config.addinivalue_line("markers", "default_plan: pins the default plan's segments (not "
                            "run with matmuls forced alone)")


def pytest_generate_tests(metafunc) -> None:
    """Every fused-program test runs twice: as planned, and with each matmul forced alone in
    its segment (where a matmul reading a dropped transpose in place must still be right);
    tests marked ``default_plan`` (they pin the planned segments) run as planned only."""
    if "alone" in metafunc.fixturenames:
        pinned = metafunc.definition.get_closest_marker("default_plan") is not None
        params = [()] if pinned else [(), (Kind.MATMUL,)]
        metafunc.parametrize("alone", params, indirect=True,
                             ids=["planned", "matmul-alone"][:len(params)])


@pytest.fixture(autouse=True)
def alone(request, monkeypatch) -> tuple[Kind, ...]:
    """The launch kinds ``fuse`` keeps alone in this test (``ggpu_fuse.program.ALONE``)."""
    value = getattr(request, "param", ())
    monkeypatch.setattr(program, "ALONE", value)
    return value


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` run in the oracle session (``testing.skip_slow``). Every test here
    runs its programs on sim (cuda in the cuda session) or on the compiled cpu step, whatever
    GRAD_TEST_BACKEND says: they run in the sim session, the compiled cpu step's own file in
    the cpu session; the numpy and cpu sessions skip the rest, which would repeat the sim
    session's runs bit for bit."""
    testing.skip_slow(items)
    session = testing.backend_name()
    if session not in ("numpy", "cpu"):
        return
    skip = pytest.mark.skip(reason=f"the same programs on the same engines as the sim session "
                            f"(they do not depend on GRAD_TEST_BACKEND={session}): run there")
    for item in items:
        if item.path.name != "test_fuse_cpu.py":
            item.add_marker(skip)
