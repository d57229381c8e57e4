"""Atomic file writes: a temporary file in the target's directory, flushed, fsynced and
renamed into place, so a failed or interrupted write never destroys the previous file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Any, write: Callable[[IO[bytes]], Any], mode: int | None = None) -> Path:
    """Call ``write(f)`` on a temporary binary file next to ``path``, then rename it to
    ``path`` (exactly that name; permissions ``mode``, default what a plain ``open`` would
    give); on any exception the temporary file is removed and ``path`` is untouched."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    return target


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: not every platform can open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_npz(path: Any, where: str) -> dict:
    """Every array of the .npz archive at ``path``, read without pickle. A file that is not
    such an archive raises ValueError naming ``where``; a missing file FileNotFoundError."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("a single array, not an archive")
            return {k: f[k] for k in f.files}
    except (ValueError, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{where}: {path} is not a checkpoint written by save() (an .npz "
                         f"archive of arrays): {e}") from None
