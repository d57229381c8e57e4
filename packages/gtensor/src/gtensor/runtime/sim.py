"""The ``sim`` backend: CUDA-dialect kernels compiled with the host C++ compiler, run on the CPU.

The module source is compiled together with ``sim_runtime.h`` into a shared library that is
cached on disk (keyed by the sha256 of the translation unit, the compiler and the flags) and
loaded with ctypes. Each kernel gets a generated ``extern "C"`` launcher taking the grid, the
block and a ``void**`` argument vector (the cuLaunchKernel convention).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from gtensor.kernels import Kernel
from gtensor.runtime import cache, toolchain
from gtensor.runtime.args import SCALAR_NUMPY, KernelTable
from gtensor.runtime.toolchain import compiler_command, header_text

CXX_FLAGS = (
    "-O2",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fPIC",
    "-shared",
    "-std=c++17",
    "-U_FORTIFY_SOURCE",
)
HEADER_PATH = Path(__file__).with_name("sim_runtime.h")  # its #include "common_runtime.h" is
# expanded into the unit's text (``toolchain.header_text``); the compiler lookup is shared too
_STATUS_MESSAGES = {
    1: "could not allocate fiber stacks (mmap failed)",
    2: "__syncthreads was called (from a helper function?) but the kernel body does not mention "
    "it, so it ran without fibers; call __syncthreads in the kernel body itself",
}
# a scalar parameter's ctypes box: the ctypes type of the numpy type it is marshalled as
_BOXES = {c: np.ctypeslib.as_ctypes_type(t) for c, t in SCALAR_NUMPY.items()}

_LOADED: dict[str, ctypes.CDLL] = {}
_LOAD_LOCK = threading.Lock()

# The fiber/thread schedule (a race detector, see sim_runtime.h): read at every launch, so
# changing it needs no recompile. "forward" (default), "reverse" or "shuffle:SEED".
SCHEDULE_ENV = "GTENSOR_SIM_SCHEDULE"
SCHEDULES = {"forward": 0, "reverse": 1, "shuffle": 2}
_APPLIED: dict[int, str] = {}  # id(loaded library) -> the schedule text it was last given


def cache_dir() -> Path:
    """Directory holding compiled sim modules (see ``gtensor.runtime.cache``)."""
    return cache.root() / "sim"


def _launcher(kernel: Kernel, barrier: bool) -> str:
    """Generated ``extern "C"`` launcher unpacking ``void** args`` and running the grid."""
    unpack = "".join(
        f"    {p.ctype} a{i} = *static_cast<{p.ctype}*>(args[{i}]);\n"
        for i, p in enumerate(kernel.params)
    )
    call_args = ", ".join(f"a{i}" for i in range(len(kernel.params)))
    runner = "run_fibers" if barrier else "run_plain"
    return (
        f'extern "C" int gtsim_launch_{kernel.name}(const unsigned* dims, void** args)\n{{\n'
        f"{unpack}"
        f"    return gtsim::{runner}(dims, [=]() {{ {kernel.name}({call_args}); }});\n}}\n"
    )


def _helpers_use_barrier(source: str, kernels: Sequence[Kernel]) -> bool:
    """True when __syncthreads appears outside the kernel bodies (e.g. in a helper)."""
    rest = source
    for k in kernels:
        rest = rest.replace(k.body, "")
    return "__syncthreads" in rest


def translation_unit(source: str, kernels: Sequence[Kernel]) -> str:
    """Header text + module source + one launcher per kernel."""
    all_barrier = _helpers_use_barrier(source, kernels)
    launchers = "".join(_launcher(k, all_barrier or k.barrier) for k in kernels)
    return (
        f"{header_text(HEADER_PATH)}\n"
        '#line 1 "module.cu"\n'
        f"{source}\n"
        '#line 1 "launchers.cpp"\n'
        f"{launchers}"
    )


def _run_compiler(command: list[str], src: Path, out: Path) -> None:
    """Compile ``src`` into the shared library ``out``; RuntimeError with stderr on failure."""
    toolchain.compile_shared("sim", command, CXX_FLAGS, src, out)


def _write_atomic(path: Path, text: str) -> None:
    """Write text to path via a temporary file and os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def build(source: str, kernels: Sequence[Kernel]) -> tuple[str, Path]:
    """Compile (or find, verified, in the disk cache) the module; returns (key, .so path)."""
    command = compiler_command()
    tu = translation_unit(source, kernels)
    ident = toolchain.compiler_identity(tuple(command))
    key = hashlib.sha256("\0".join([tu, ident, " ".join(CXX_FLAGS)]).encode()).hexdigest()
    return key, cache.library("sim", key, tu, lambda src, out: _run_compiler(command, src, out),
                              f"{len(kernels)} sim kernels (CUDA source on the CPU, g++)")


def ctypes_argv(kernel: Kernel, values: list) -> tuple[ctypes.Array, list]:
    """The ``void**`` argument vector of one checked launch (sim's and cpu's launchers take
    it) and the ctypes boxes it points at: array data pointers and scalars of the exact C
    type. The caller keeps both (and the arrays) alive as long as the launch."""
    boxes = []
    for param, value in zip(kernel.params, values):
        if param.is_pointer:
            boxes.append(ctypes.c_void_p(value.ctypes.data))
        else:
            boxes.append(_BOXES[param.ctype](value.item()))
    argv = (ctypes.c_void_p * max(len(boxes), 1))(*(ctypes.addressof(x) for x in boxes))
    return argv, boxes


def load(source: str, kernels: Sequence[Kernel]) -> ctypes.CDLL:
    """The loaded library for this module, compiled at most once per process and cache."""
    with _LOAD_LOCK:
        key, lib = build(source, kernels)
        if key not in _LOADED:
            _LOADED[key] = ctypes.CDLL(str(lib))
        return _LOADED[key]


def parse_schedule(text: str | None) -> tuple[int, int]:
    """``"forward"``, ``"reverse"`` or ``"shuffle:SEED"`` (empty: forward) -> (mode, seed)."""
    name, _, seed = (text or "forward").strip().partition(":")
    name = name or "forward"
    if name not in SCHEDULES or (name == "shuffle") != bool(seed) or (
            seed and not seed.isdigit()):
        raise ValueError(f"{SCHEDULE_ENV}={text!r}: expected forward, reverse or shuffle:SEED "
                         "(SEED a non-negative integer)")
    return SCHEDULES[name], int(seed or 0) % 2**64


def apply_schedule(lib: ctypes.CDLL) -> None:
    """Give a loaded module the schedule $GTENSOR_SIM_SCHEDULE names (no-op when unchanged)."""
    text = os.environ.get(SCHEDULE_ENV, "")
    if _APPLIED.get(id(lib)) == text:
        return
    mode, seed = parse_schedule(text)
    fn = lib.gtsim_set_schedule
    fn.argtypes = (ctypes.c_int, ctypes.c_ulonglong)
    fn.restype = ctypes.c_int
    fn(mode, seed)
    _APPLIED[id(lib)] = text


class SimModule(KernelTable):
    """A compiled module of CUDA-dialect kernels, launched on the CPU."""

    array_kind = "numpy.ndarray"

    def __init__(self, source: str, kernels: Sequence[Kernel]) -> None:
        """Compile ``source`` (helpers + the kernels' definitions) and bind the launchers."""
        super().__init__(kernels)
        self._lib = load(source, list(kernels))
        self._launchers = {}
        for name in self._kernels:
            fn = getattr(self._lib, f"gtsim_launch_{name}")
            fn.argtypes = (ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_void_p))
            fn.restype = ctypes.c_int
            self._launchers[name] = fn

    def _is_array(self, value: object) -> bool:
        """Pointer arguments are numpy arrays (the sim backend's SimArray included)."""
        return isinstance(value, np.ndarray)

    def _bind(self, kernel: Kernel, values: list, g: tuple, b: tuple) -> Callable[[], None]:
        """Run the checked launch on this thread; the schedule is read at every run."""
        name = kernel.name
        argv, boxes = ctypes_argv(kernel, values)
        dims = (ctypes.c_uint * 6)(*g, *b)
        fn = self._launchers[name]
        lib = self._lib

        def run() -> None:
            apply_schedule(lib)  # the schedule is read at every launch (see SCHEDULE_ENV)
            status = fn(dims, argv)
            if status != 0:
                raise RuntimeError(f"sim: kernel {name!r}: {_STATUS_MESSAGES.get(status, status)}")

        run.keep = (values, boxes)  # the arrays and boxes live as long as the launch
        return run
