"""Verdict files: the auditor's finding as JSON, with the arrays a referee needs beside it.

``VERDICT.json`` holds the outcome (``agree``, ``dispute`` or ``inconclusive``), where the
dispute is (step, phase, node, op, entry), both parties' digests, every proof the auditor
received (records and trace leaves with their membership proofs, the descent transcripts),
the queries made and the bytes exchanged. The evidence -- wire messages of arrays and states,
the step's graph -- lies in ``VERDICT.evidence/``, one file per blob named by the SHA-256 of its
bytes, so the JSON names blobs by hash and no path from a verdict is ever opened.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gtensor import files

from . import canonical

FORMAT = "gverify-verdict-v1"
OUTCOMES = ("agree", "dispute", "inconclusive")
EXIT = {"agree": 0, "dispute": 1, "inconclusive": 2}


class VerdictError(ValueError):
    """A verdict file (or its evidence) that cannot be read."""


def evidence_dir(path: Path) -> Path:
    """Where the evidence of verdict ``path`` lies (``VERDICT.evidence``)."""
    return path.with_name(path.stem + ".evidence")


def write(path: Any, verdict: dict, blobs: dict[str, bytes]) -> Path:
    """Write ``verdict`` and its evidence blobs (keyed by the SHA-256 of their bytes)."""
    p = Path(path)
    ev = evidence_dir(p)
    if blobs:
        ev.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        if canonical.sha256(data) != name:
            raise ValueError(f"verdict.write: blob {name[:16]}... is not named by its SHA-256")
        files.write_atomic(ev / f"{name}.bin", lambda f, d=data: f.write(d))
    files.write_atomic(p, lambda f: f.write(json.dumps(verdict, indent=1).encode()))
    return p


def read(path: Any) -> dict:
    """A verdict file's JSON (VerdictError when missing or damaged)."""
    p = Path(path)
    try:
        v = json.loads(p.read_text())
    except FileNotFoundError:
        raise VerdictError(f"verdict {p} does not exist") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise VerdictError(f"verdict {p} is damaged ({e})") from None
    if not isinstance(v, dict) or v.get("format") != FORMAT or v.get("outcome") not in OUTCOMES:
        raise VerdictError(f"verdict {p} is not a {FORMAT} file with an outcome in {OUTCOMES}")
    return v


def blob(path: Any, name: Any, limit: int = 1 << 30) -> bytes:
    """Evidence blob ``name`` (a SHA-256 in hex) of verdict ``path``, its hash checked."""
    if not isinstance(name, str) or len(name) != 64 or not set(name) <= set("0123456789abcdef"):
        raise VerdictError(f"verdict {path}: evidence name {name!r} is not a SHA-256 in hex")
    f = evidence_dir(Path(path)) / f"{name}.bin"
    try:
        if f.stat().st_size > limit:
            raise VerdictError(f"verdict {path}: evidence {name[:16]}... is over {limit} bytes")
        data = f.read_bytes()
    except FileNotFoundError:
        raise VerdictError(f"verdict {path}: evidence {name[:16]}... is missing from "
                           f"{f.parent}") from None
    if canonical.sha256(data) != name:
        raise VerdictError(f"verdict {path}: evidence {name[:16]}... is damaged (its SHA-256 "
                           "differs from its name)")
    return data
