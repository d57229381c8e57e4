"""Write what is generated from gtensor's op registry: gtape's typed op surface
(``packages/gtape/src/gtape/ops.pyi``) and the docs' op lists (``gtensor.opdocs``).

    python tools/gen_stubs.py          # (re)write the stub and the op lists
    python tools/gen_stubs.py --check  # exit 1 when a committed file is not current

The stub comes from ``gtape.surface.render_stub`` (the registry's input types + the gtape.ops
signatures; packages/gtape/tests/test_op_surface.py fails when it differs); the op lists from
``gtensor.opdocs.blocks`` (packages/gtensor/tests/test_opdocs.py fails when one differs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str, check: bool) -> bool:
    """Write ``text`` to ``path`` unless current (only compare with ``check``); current?"""
    current = path.exists() and path.read_text() == text
    if check:
        print(f"gen_stubs: {path} is {'current' if current else 'STALE'}")
    elif current:
        print(f"gen_stubs: {path} already current")
    else:
        path.write_text(text)
        print(f"gen_stubs: wrote {path}")
    return current


def main(argv: list[str] | None = None) -> int:
    """Write (or, with --check, compare) the stub; the exit status says whether it was current."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = ap.parse_args(argv)
    from gtape import surface

    bad = surface.mismatches()
    if bad:
        print("gen_stubs: gtape.ops disagrees with the registry:\n  " + "\n  ".join(bad),
              file=sys.stderr)
        return 1
    from gtensor import opdocs

    ok = _write(surface.STUB_PATH, surface.render_stub(), args.check)
    for rel, lists in opdocs.blocks().items():
        path = ROOT / rel
        text = path.read_text()
        for name, body in lists.items():
            text = opdocs.render(text, name, body, rel)
        ok = _write(path, text, args.check) and ok
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
