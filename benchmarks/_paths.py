"""The repository's packages on ``sys.path``, so a benchmark runs from a plain checkout too:
each benchmark script imports this module before anything of ours."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gtensor", "gtape", "gopt", "gemit", "ggpu-replay", "ggpu-fuse", "gverify", "gdist",
            "gdemos")

for _name in PACKAGES:
    _src = str(ROOT / "packages" / _name / "src")
    if _src not in sys.path:
        sys.path.insert(0, _src)
