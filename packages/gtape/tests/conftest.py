"""gtape test configuration: the backend under test and import fallbacks.

Backend: ``pytest --backend sim`` or ``GTAPE_BACKEND=sim`` (falls back to GRAD_TEST_BACKEND,
then numpy). "cuda" skips cleanly where cupy or a GPU is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

try:  # a fresh clone without editable installs: use the sources next to us
    import gtape  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / "gtape" / "src"), str(_root / "gtensor" / "src")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gtensor  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--backend", default=None, help="gtensor backend: numpy | sim | cuda")
    except ValueError:  # another conftest already defines it; share it
        pass


def backend_name(config: pytest.Config) -> str:
    """The backend under test."""
    opt = config.getoption("--backend", default=None)
    return opt or os.environ.get("GTAPE_BACKEND") or os.environ.get("GRAD_TEST_BACKEND") or "numpy"


@pytest.fixture(scope="session")
def bname(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test (skips if it is unavailable here)."""
    name = backend_name(request.config)
    try:
        gtensor.backend(name)
    except RuntimeError as e:
        pytest.skip(f"backend {name!r} unavailable here: {e}")
    return name


@pytest.fixture(scope="session")
def other(bname: str) -> str:
    """The backend under test when it is not numpy (for numpy-vs-backend parity)."""
    if bname == "numpy":
        pytest.skip("numpy vs numpy parity is vacuous; run with --backend sim (or cuda)")
    return bname


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the measured errors (worst finite-difference error, oracle errors)."""
    from gtape_testutil import REPORT

    for section, errs in REPORT.items():
        if not errs:
            continue
        worst = max(errs, key=errs.get)
        terminalreporter.write_line(f"gtape {section}: worst {errs[worst]:.3e} ({worst}); "
                                    f"{len(errs)} measured")
