"""Write gtape's typed op surface, ``packages/gtape/src/gtape/ops.pyi``, from gtensor's registry.

    python tools/gen_stubs.py          # (re)write the stub
    python tools/gen_stubs.py --check  # exit 1 when the committed stub is not current

The text comes from ``gtape.surface.render_stub`` (the registry's input types + the gtape.ops
signatures); packages/gtape/tests/test_op_surface.py fails when the committed file differs.
"""

from __future__ import annotations

import argparse
import sys


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
    text = surface.render_stub()
    path = surface.STUB_PATH
    current = path.exists() and path.read_text() == text
    if args.check:
        print(f"gen_stubs: {path} is {'current' if current else 'STALE'}")
        return 0 if current else 1
    if not current:
        path.write_text(text)
    print(f"gen_stubs: wrote {path}" if not current else f"gen_stubs: {path} already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
