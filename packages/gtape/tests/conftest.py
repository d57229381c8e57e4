"""gtape test configuration: the backend under test and import fallbacks.

Backend: ``GRAD_TEST_BACKEND=sim`` (numpy by default; nox sets it per session). "cuda" skips
cleanly where cupy or a GPU is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:  # a fresh clone without editable installs: use the sources next to us
    import gtape  # noqa: F401
except ImportError:  # pragma: no cover
    _root = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(_root / "gtape" / "src"), str(_root / "gtensor" / "src")]

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gtensor.testing_fixtures import bname, other  # noqa: E402, F401  (shared fixtures)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the measured errors (worst finite-difference error, oracle errors)."""
    from gtape_testutil import REPORT

    for section, errs in REPORT.items():
        if not errs:
            continue
        worst = max(errs, key=errs.get)
        terminalreporter.write_line(f"gtape {section}: worst {errs[worst]:.3e} ({worst}); "
                                    f"{len(errs)} measured")
