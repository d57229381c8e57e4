"""gtape test configuration: the backend under test and import fallbacks.

Backend: ``GRAD_TEST_BACKEND=sim`` (numpy by default; nox sets it per session). "cuda" skips
cleanly where cupy or a GPU is missing.
"""

from __future__ import annotations

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

from gtensor import testing  # noqa: E402


@pytest.fixture(scope="session")
def bname() -> str:
    """The name of the backend under test (skips if it is unavailable here)."""
    return testing.require_backend(testing.backend_name()).name


@pytest.fixture(scope="session")
def other(bname: str) -> str:
    """The backend under test when it is not numpy (for numpy-vs-backend parity)."""
    return testing.require_other(bname)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the measured errors (worst finite-difference error, oracle errors)."""
    from gtape_testutil import REPORT

    for section, errs in REPORT.items():
        if not errs:
            continue
        worst = max(errs, key=errs.get)
        terminalreporter.write_line(f"gtape {section}: worst {errs[worst]:.3e} ({worst}); "
                                    f"{len(errs)} measured")
