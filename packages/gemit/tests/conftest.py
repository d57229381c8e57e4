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
