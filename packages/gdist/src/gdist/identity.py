"""What a process would compute with: its Python, numpy, Dask and the exact package sources.

A data-parallel run is only exact if every replica runs the same definitions. Package versions
are not enough for that (an editable install keeps its version while its files change), so the
identity holds a sha256 over each package's source files (``.py`` and the C/CUDA headers the
kernels are built from; read once per process) and, on the cpu backend, over the compiled
module's source (the part of the kernel cache key that decides the bits). ``DataParallel``
compares every worker's identity with the driver's before it builds anything.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import platform
from pathlib import Path

PACKAGES = ("gtensor", "gtape", "gopt", "ggpu_replay", "gdist")
SUFFIXES = (".py", ".h", ".cu", ".cuh", ".cpp", ".c")


@functools.cache
def sources_hash(package: str) -> str:
    """sha256 over the package's source files (relative path and bytes, in path order), read
    once per process (what it loaded, not what a later edit left on disk)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    h = hashlib.sha256()
    for root in spec.submodule_search_locations:
        base = Path(root)
        for f in sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
            if "__pycache__" in f.parts:
                continue
            h.update(f"{f.relative_to(base).as_posix()}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def kernels_hash(backend: str) -> str:
    """sha256 of the cpu module's source when ``backend`` is "cpu" (generated once per process
    by gtensor anyway), else "" (the gtensor sources decide the other backends' kernels)."""
    if backend != "cpu":
        return ""
    from gtensor.runtime.cpu_source import cpu_module_source

    return hashlib.sha256(cpu_module_source().encode()).hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def identity(backend: str) -> dict[str, str]:
    """This process's identity as flat {what: value} (compared entry by entry)."""
    import numpy as np

    out = {"python": platform.python_version(), "numpy": np.__version__,
           "distributed": _version("distributed"), "cloudpickle": _version("cloudpickle")}
    for name in PACKAGES:
        out[f"{name} version"] = _version(name.replace("_", "-"))
        out[f"{name} sources"] = sources_hash(name)
    out[f"{backend} kernels"] = kernels_hash(backend)
    return out


def differences(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The entries in which two identities differ, as "what: driver X, worker Y" lines."""
    keys = sorted(set(mine) | set(theirs))
    return [f"{k}: driver {mine.get(k, 'absent')!s:.16}, worker {theirs.get(k, 'absent')!s:.16}"
            for k in keys if mine.get(k) != theirs.get(k)]
