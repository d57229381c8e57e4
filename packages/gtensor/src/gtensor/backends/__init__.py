"""Backends: numpy (the reference), sim (CUDA source on the CPU), cuda (cupy), cpu (native)."""

from __future__ import annotations

import threading

from .base import Backend

NAMES = ("numpy", "sim", "cuda", "cpu")
_instances: dict[str, Backend] = {}
_lock = threading.Lock()


def backend(name: str) -> Backend:
    """The backend called ``name``: ``"numpy"``, ``"sim"``, ``"cuda"`` or ``"cpu"`` (one each).

    >>> be = backend("numpy")
    >>> be.to_numpy(be.add(be.asarray([1.0, 2.0]), be.asarray([0.5, 0.25]))).tolist()
    [1.5, 2.25]
    """
    if not isinstance(name, str) or name not in NAMES:
        raise ValueError(f"backend: unknown backend {name!r}; expected one of {NAMES}")
    with _lock:
        if name not in _instances:
            if name == "numpy":
                from .numpy_backend import NumpyBackend as cls
            elif name == "sim":
                from .sim_backend import SimBackend as cls
            elif name == "cpu":
                from .cpu_backend import CpuBackend as cls
            else:
                from .cuda_backend import CudaBackend as cls
            _instances[name] = cls()
        return _instances[name]


def host_backend() -> str:
    """The fastest exact backend of this machine's CPU: ``"cpu"`` (the compiled kernels) where
    a C++ compiler is found, else ``"numpy"`` (the reference definition; no compiler needed).
    Both give the same bits."""
    from ..runtime.sim import compiler_command

    try:
        compiler_command()
    except RuntimeError:
        return "numpy"
    return "cpu"


__all__ = ["Backend", "NAMES", "backend", "host_backend"]
