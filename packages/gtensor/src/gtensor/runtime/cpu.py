"""The ``cpu`` runtime: each op's host kernels compiled with the system C++ compiler, run natively.

The module (``cpu_source``) is compiled with ``cpu_runtime.h`` into a shared library cached on
disk like sim's (the same ``toolchain`` and cache helpers, its own folder and flags: ``-O3
-march=native -ffp-contract=off``, no fast-math; the key also holds the host CPU's feature
flags, since ``-march=native`` code only runs where it was built). Two doors lead in:

* ``launch`` / ``prepare`` / ``checked`` + ``bind``: one kernel with checked arguments, the
  ``KernelTable`` contract sim and cuda share (so a ``Recorder`` can wrap the cpu backend);
* ``plan`` + ``Plan.run``: the eager fast path. An op's launches for one (shapes, attrs) are
  checked once and encoded as an int64 program; a call then passes only the arrays, by
  object address, and C reads each array's data pointer (``gtcpu_exec``, in ``cpu_exec.h``,
  appended after the module's launchers).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gtensor.kernels import Kernel
from gtensor.runtime import cache, sim, toolchain
from gtensor.runtime.args import KernelTable

CXX_FLAGS = (
    "-O3",
    "-march=native",
    "-ffp-contract=off",
    "-fno-fast-math",
    "-fno-math-errno",
    "-fno-thread-jumps",  # keeps tanh's selects branch-free (its loop then vectorizes)
    "-fPIC",
    "-shared",
    "-std=c++17",
    "-pthread",
)
HEADER_PATH = Path(__file__).with_name("cpu_runtime.h")
EXEC_PATH = Path(__file__).with_name("cpu_exec.h")  # the plan interpreter, after the launchers
THREADS_ENV = "GTENSOR_CPU_THREADS"
# the plain contract's matmul tile forms, in cpu_runtime.h's TileForm order
MATMUL_TILE_FORMS = ("host", "tall", "wide")

_LOADED: dict[str, tuple[ctypes.CDLL, Any]] = {}
_LOAD_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Directory of compiled cpu modules: ``$GTENSOR_CACHE_DIR/cpu`` or the XDG cache's."""
    return cache.root() / "cpu"


def _host_identity() -> str:
    """The machine and its CPU feature flags (``-march=native`` output depends on them)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features", "model name")):
                    flags += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}\n{flags}"


def _launcher(index: int, kernel: Kernel) -> tuple[str, str]:
    """The ``gtcpu_call_<name>`` unpacker (``void** args``) and the public ``gtcpu_launch_``."""
    unpack = "".join(
        f"    {p.ctype} a{i};\n    std::memcpy(&a{i}, args[{i}], sizeof a{i});\n"
        for i, p in enumerate(kernel.params))
    call = ", ".join(f"a{i}" for i in range(len(kernel.params)))
    name = kernel.name
    return (f"static int gtcpu_call_{name}(void** args)\n{{\n{unpack}"
            f"    {name}({call});\n    return 0;\n}}\n"
            f'extern "C" int gtcpu_launch_{name}(void** args)\n{{\n'
            f"    gtcpu::FpEnv env;\n    return gtcpu_call_{name}(args);\n}}\n",
            f"gtcpu_call_{name}")


PY_MODULE = "gtensor_cpu_module"


def _python_flags() -> tuple[str, ...]:
    """Flags that also build the module as a CPython extension (when Python.h is installed)."""
    import sysconfig

    include = sysconfig.get_paths().get("include") or ""
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return ()
    return (f"-I{include}", "-DGTCPU_PYTHON")


def translation_unit(source: str, kernels: Sequence[Kernel]) -> str:
    """Header + module source + launchers + the call table and the plan interpreter."""
    parts = [_launcher(i, k) for i, k in enumerate(kernels)]
    table = ", ".join(name for _, name in parts)
    return (
        "#ifdef GTCPU_PYTHON\n#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n#endif\n"
        f"{toolchain.header_text(HEADER_PATH)}\n"
        '#line 1 "module.cpp"\n'
        f"{source}\n"
        '#line 1 "launchers.cpp"\n'
        + "".join(text for text, _ in parts)
        + f"static int (*const GTCPU_CALLS[])(void**) = {{{table}}};\n"
        f"static const long long GTCPU_NKERNELS = {len(parts)};\n"
        + toolchain.header_text(EXEC_PATH)
    )


def build(source: str, kernels: Sequence[Kernel]) -> tuple[str, Path]:
    """Compile (or find, verified, in the disk cache) the cpu module; returns (key, .so path)."""
    command = toolchain.compiler_command()
    tu = translation_unit(source, kernels)
    ident = toolchain.compiler_identity(tuple(command))
    flags = (*CXX_FLAGS, *_python_flags())
    key = hashlib.sha256("\0".join([tu, ident, " ".join(flags), _host_identity(), sys.version])
                         .encode()).hexdigest()

    return key, cache.library(
        "cpu", key, tu, lambda src, out: toolchain.compile_shared("cpu", command, flags, src, out),
        f"{len(kernels)} cpu kernels (native host code, g++)")


def load(source: str, kernels: Sequence[Kernel]) -> tuple[ctypes.CDLL, Any]:
    """The loaded library for this module and its ``run`` door (the CPython extension's, or
    None without Python.h); compiled at most once per process and cache."""
    with _LOAD_LOCK:
        key, lib = build(source, kernels)
        if key not in _LOADED:
            cdll = ctypes.CDLL(str(lib))
            run = None
            if hasattr(cdll, f"PyInit_{PY_MODULE}"):
                from importlib.machinery import ExtensionFileLoader
                from importlib.util import module_from_spec, spec_from_loader

                loader = ExtensionFileLoader(PY_MODULE, str(lib))
                module = module_from_spec(spec_from_loader(PY_MODULE, loader))
                loader.exec_module(module)
                run = module.run
            _LOADED[key] = (cdll, run)
        return _LOADED[key]


def data_offset() -> int | None:
    """Where a numpy array object holds its data pointer (None if it cannot be found safely).

    The C side reads ``*(void**)((char*)array + offset)``: the ``data`` field right after the
    object header in numpy's ``PyArrayObject``. Found by looking, and checked on several arrays
    (plain, subclass, view, 0-d, empty), so an unusual build falls back to the slow door.
    """
    if sys.byteorder != "little":
        return None
    probes = [np.arange(7.0), np.zeros((3, 4), np.float32)[1:], np.array(2.5),
              np.empty(0), np.ones(5).view(type("Probe", (np.ndarray,), {}))]
    word = ctypes.sizeof(ctypes.c_void_p)
    for off in range(word, 8 * word, word):
        if all(ctypes.c_void_p.from_address(id(a) + off).value == a.ctypes.data
               for a in probes if a.size):
            return off
    return None


class Plan:
    """One op's launches for one (shapes, dtype, attrs), checked and encoded once.

    ``run(objs)`` executes them on the given arrays (inputs then out, in that order).
    """

    __slots__ = ("words", "addr", "keep", "launches")


    def __init__(self, words: np.ndarray, keep: list, launches: int) -> None:
        self.words = words
        self.addr = words.ctypes.data
        self.keep = keep
        self.launches = launches


class CpuModule(KernelTable):
    """The compiled cpu module: kernels launched as native CPU loops."""

    array_kind = "numpy.ndarray"

    def __init__(self, source: str, kernels: Sequence[Kernel]) -> None:
        """Compile ``source`` (device functions + the CPU kernels) and bind the launchers."""
        super().__init__(kernels)
        self._lib, py_run = load(source, list(kernels))
        self._index = {k.name: i for i, k in enumerate(kernels)}
        self._launchers = {}
        for name in self._kernels:
            fn = getattr(self._lib, f"gtcpu_launch_{name}")
            fn.argtypes = (ctypes.POINTER(ctypes.c_void_p),)
            fn.restype = ctypes.c_int
            self._launchers[name] = fn
        offset = data_offset()
        self.fast = offset is not None
        if self.fast:
            self._lib.gtcpu_set_data_offset.argtypes = (ctypes.c_longlong,)
            self._lib.gtcpu_set_data_offset(offset)
        execv = self._lib.gtcpu_exec
        execv.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)
        execv.restype = ctypes.c_int

        def ctypes_run(plan: int, *objs: np.ndarray) -> int:
            return execv(plan, (ctypes.c_void_p * len(objs))(*map(id, objs)), len(objs))

        # run(plan address, *arrays (inputs, then out)) -> status: 0 ok, 2 out overlaps an input
        self.run = py_run if py_run is not None else ctypes_run

    def set_parallel_work(self, work: int) -> int:
        """Set the work (multiply-adds or element operations) from which a kernel splits its
        outputs across threads; returns the previous value. A knob for tests and tuning: the
        split never changes a bit."""
        fn = self._lib.gtcpu_set_parallel_work
        fn.argtypes = (ctypes.c_longlong,)
        fn.restype = ctypes.c_longlong
        return int(fn(int(work)))

    def set_matmul_tiles(self, form: str) -> str:
        """Set the plain contract's matmul register tiles: ``"host"`` (the default: tall,
        14 rows x 1 vector, on AMD Zen 3 / 4; 8 rows x 2 vectors elsewhere), ``"tall"`` or
        ``"wide"``; returns the previous setting. A knob for tests: tiles never change a bit."""
        if form not in MATMUL_TILE_FORMS:
            raise ValueError(f"set_matmul_tiles: form is {form!r}; expected one of "
                             f"{MATMUL_TILE_FORMS}")
        fn = self._lib.gtcpu_set_matmul_tiles
        fn.argtypes = (ctypes.c_int,)
        fn.restype = ctypes.c_int
        return MATMUL_TILE_FORMS[int(fn(MATMUL_TILE_FORMS.index(form)))]

    def _is_array(self, value: object) -> bool:
        """Pointer arguments are numpy arrays (the cpu backend's CpuArray included)."""
        return isinstance(value, np.ndarray)

    # ---------------------------------------------------------------- the KernelTable door
    def _bind(self, kernel: Kernel, values: list, g: tuple, b: tuple) -> Callable[[], None]:
        """Run the checked launch natively (grid and block were checked, then are ignored)."""
        name = kernel.name
        argv, boxes = sim.ctypes_argv(kernel, values)
        fn = self._launchers[name]

        def run() -> None:
            status = fn(argv)
            if status != 0:
                raise RuntimeError(f"cpu: kernel {name!r} failed with status {status}")

        run.keep = (values, boxes)  # the arrays and boxes live as long as the launch
        return run

    # ---------------------------------------------------------------- the eager fast path
    def plan(self, launches: Sequence[tuple[Kernel, object, object, Sequence]],
             slots: Sequence[np.ndarray]) -> Plan:
        """Check ``launches`` (kernel, grid, block, args) once and encode them as a Plan.

        An array argument that is ``slots[k]`` (by identity) becomes "the k-th array of each
        run"; any other array (a geometry array) is kept alive and passed by address.
        """
        words: list[int] = [len(slots), *[s.nbytes for s in slots], len(launches)]
        keep: list = []
        for kernel, grid, block, args in launches:
            kernel, values, _, _ = self.checked(kernel, grid, block, args)
            words += [self._index[kernel.name], len(values)]
            for param, value in zip(kernel.params, values):
                if param.is_pointer:
                    slot = next((k for k, s in enumerate(slots) if s is value), None)
                    if slot is None:
                        keep.append(value)
                        words += [1, value.ctypes.data]
                    else:
                        words += [0, slot]
                else:
                    words += [1, _scalar_word(param.ctype, value)]
        return Plan(np.array(words, np.int64), keep, len(launches))

def _scalar_word(ctype: str, value: np.generic) -> int:
    """The int64 word whose low bytes hold ``value`` as the C type (little-endian)."""
    if ctype in ("long long", "int"):
        return int(value)
    if ctype == "double":
        return int(np.float64(value).view(np.int64))
    return int(np.float32(value).view(np.int32)) & 0xFFFFFFFF
