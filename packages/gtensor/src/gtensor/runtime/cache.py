"""The compiled-module cache shared by the sim and cpu runtimes (and generated fused kernels).

Loading a shared library runs its code, so the cache is treated like ssh treats its keys:

* a library is found by a key (a hash of its translation unit, the compiler and the flags);
  next to it a record holds its size and sha256, written when it was built: a library whose
  bytes do not match (truncated, replaced, garbage) is never loaded -- it is rebuilt once, with
  a message;
* a build that fails, or that "succeeds" without producing a library, is never cached;
* files are written to a temporary name in the same directory, fsynced and renamed into place
  with mode 0644 (readable by others, writable only by the owner);
* the cache directory must belong to the current user and not be writable by group or others
  (nor may an existing library or record be), else loading is refused with the fix in the
  message -- a shared machine cannot inject code through it;
* a directory that cannot be created or written is reported with its path and the variable
  that moves the cache (``GTENSOR_CACHE_DIR``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..files import write_atomic

CACHE_ENV = "GTENSOR_CACHE_DIR"


def root() -> Path:
    """``$GTENSOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/gtensor`` or ``~/.cache/gtensor``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gtensor"


def directory(kind: str) -> Path:
    """The cache folder of one kind of module ("sim", "cpu", ...), created and checked."""
    path = root() / kind
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as e:
        raise RuntimeError(f"gtensor kernel cache: cannot create {path} ({e.strerror}); set "
                           f"{CACHE_ENV} to a directory you own and can write") from None
    for p in (path.parent, path):
        check_private(p)
    if not os.access(path, os.W_OK | os.X_OK):
        raise RuntimeError(f"gtensor kernel cache: cannot write to {path}; set {CACHE_ENV} to a "
                           "directory you own and can write")
    return path


def check_private(path: Path) -> None:
    """Refuse a cache file or folder another user could have written (ssh's rule)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise RuntimeError(f"gtensor kernel cache: {path} belongs to another user (uid "
                           f"{st.st_uid}); loading code from it is refused. Set {CACHE_ENV} "
                           "to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RuntimeError(f"gtensor kernel cache: {path} is writable by group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):o}); loading code from it is refused. Fix "
                           f"it with: chmod go-w {path}")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verified(lib: Path) -> bool:
    """Whether ``lib`` and its record exist, are private, and its bytes match the record."""
    record = lib.with_suffix(".json")
    if not lib.exists() or not record.exists():
        return False
    check_private(lib)
    check_private(record)
    try:
        meta = json.loads(record.read_text())
        return (lib.stat().st_size == meta["size"] and meta["size"] > 0
                and _digest(lib) == meta["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


# A first build's rough duration where this cache has none on record: measured on the
# project's 2-core machine (the default sim module: 5.6 s; cpu libraries are one kernel each
# and announce themselves)
TYPICAL_SECONDS = {"sim": 6.0}


def _about(folder: Path, kind: str) -> str:
    """A rough duration for the next build in ``folder``: the latest recorded build there,
    else the typical one for ``kind``."""
    best: tuple[float, float] | None = None
    for record in folder.glob("*.json"):
        try:
            seconds = float(json.loads(record.read_text())["seconds"])
            mtime = record.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if best is None or mtime > best[0]:
            best = (mtime, seconds)
    seconds = best[1] if best is not None else TYPICAL_SECONDS.get(kind)
    if seconds is None:
        return "a few seconds"
    return f"about {max(1, round(seconds))} s"


def library(kind: str, key: str, source: str, compile_to: Callable[[Path, Path], None],
            what: str | None = None,
            announce: Callable[[Path], None] | None = None) -> Path:
    """The verified library for ``key``: found in the cache, or built by
    ``compile_to(source_path, output_path)`` (which raises on failure) and recorded.

    A build prints one line to stderr first -- what is compiled (``what``, else "the
    ``kind`` kernel module"), where it is cached and roughly how long it takes -- so a first
    use is not a silent wait; a cache hit prints nothing. ``announce(folder)``, when given,
    is called instead of that line (a runtime that builds many small libraries says so once).
    """
    folder = directory(kind)
    lib = folder / f"{key}.so"
    if verified(lib):
        return lib
    if lib.exists():
        why = ("does not match its record (damaged or replaced)"
               if lib.with_suffix(".json").exists() else "has no record (an older cache)")
        print(f"gtensor kernel cache: {lib} {why}; rebuilding it", file=sys.stderr)
    if announce is not None:
        announce(folder)
    else:
        print(f"gtensor: compiling {what or f'the {kind} kernel module'} (first use; "
              f"{_about(folder, kind)}), cached in {folder}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    src = folder / f"{key}.cpp"
    text = source.encode()
    write_atomic(src, lambda f: f.write(text), mode=0o644)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".so.tmp")
    os.close(fd)
    try:
        compile_to(src, Path(tmp))
        size = os.path.getsize(tmp)
        if size == 0:
            raise RuntimeError(f"gtensor kernel cache: the compiler reported success but wrote "
                               f"an empty library for {src}; nothing was cached")
        meta = json.dumps({"size": size, "sha256": _digest(Path(tmp)),
                           "seconds": round(time.perf_counter() - start, 2)}).encode()
        os.chmod(tmp, 0o644)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, lib)
        write_atomic(lib.with_suffix(".json"), lambda f: f.write(meta), mode=0o644)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib
