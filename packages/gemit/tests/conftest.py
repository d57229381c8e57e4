"""gemit test configuration: the backend of the reference tape (GRAD_TEST_BACKEND), fallbacks."""

from __future__ import annotations

import sys
from pathlib import Path

try:  # a fresh clone without editable installs: use the sources next to us
    import gemit  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / n / "src") for n in ("gemit", "gtape", "gtensor")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
from gtensor import testing  # noqa: E402


def pytest_collection_modifyitems(config, items) -> None:
    """The reference tape runs on the session's backend where it is a host one (numpy, sim;
    ``gemit_testutil.tape_backend``) and on numpy otherwise, and the emitted C / CUDA does not
    depend on the session: the cpu session would repeat the numpy session's runs bit for bit,
    so it skips them with that reason."""
    if testing.backend_name() != "cpu":
        return
    skip = pytest.mark.skip(reason="gemit's reference tape is numpy in the cpu session: the "
                            "numpy session runs these, bit for bit the same")
    for item in items:
        item.add_marker(skip)
