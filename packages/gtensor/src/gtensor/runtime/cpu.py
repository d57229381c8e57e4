"""The ``cpu`` runtime: each op's host kernels compiled with the system C++ compiler, run natively.

Two kinds of shared library, cached on disk like sim's (the same ``toolchain`` and cache
helpers, the ``cpu`` folder, flags ``-O3 -march=native -ffp-contract=off``, no fast-math; the
key also holds the host CPU's feature flags, since ``-march=native`` code only runs where it
was built):

* the **runtime library** (one per process): ``cpu_runtime.h`` with its thread pool and the
  settings every kernel reads, the plan interpreter (``gtcpu_exec``, ``cpu_exec.h``) with its
  call table, and the CPython door;
* **kernel libraries**: by default one per kernel (its text, the device functions it names and
  its launchers), compiled the first time a launch or a plan needs that kernel -- a program pays
  for the kernels it uses (about a second each on 2 cores, once per machine), not for all 200 --
  and bound to the runtime library (``gtcpu_bind``: one pool, one set of settings), its entry
  written into the call table. A module built from a given source text (``CpuModule(kernels,
  source)``) is one kernel library holding all of its kernels.

Two doors lead in:

* ``launch`` / ``prepare`` / ``checked`` + ``bind``: one kernel with checked arguments, the
  ``KernelTable`` contract sim and cuda share (so a ``Recorder`` can wrap the cpu backend);
* ``plan`` + ``Plan.run``: the eager fast path. An op's launches for one (shapes, attrs) are
  checked once and encoded as an int64 program; a call then passes only the arrays, by
  object address, and C reads each array's data pointer (``gtcpu_exec``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
# A library holding a first-stage loop (gtensor.ops.forms.Map, FIRST_STAGE_LOOP) is compiled
# also without tree PRE, which turns the stage's table reads on the constant arms of its
# selects into conditional loads that keep the loop scalar, and without trapping math, so that
# floor vectorizes. Neither changes a value: PRE is an optimization pass, and no kernel reads
# or traps on the floating-point exception flags (every launch runs with them masked).
FIRST_STAGE_FLAGS = ("-fno-tree-pre", "-fno-trapping-math")
# ... and, with g++ on an x86-64 host with AVX-512 that the kernel reports not affected by
# GDS ("Downfall"), with its table reads as vector gathers: the tuning -march=native brings for
# a CPU g++ 12 does not name ("generic") emulates a gather by scalar loads and inserts. With
# gathers, 98 K float64 values on one thread of the 2-core test host (a Xeon, Emerald
# Rapids): erf and gelu_gate 1254 -> 649 / 1258 -> 621 us, exp 420 -> 327, tanh 606 -> 524,
# sin 545 -> 432 (the same loads: instruction selection only, the same values). Parts with
# the GDS microcode mitigation run gathers slowly, and pre-AVX-512 ones were not measured:
# they keep the default.
GATHER_FLAGS = ("-mtune-ctrl=use_gather_2parts,use_gather_4parts,use_gather",)
GDS_STATUS = "/sys/devices/system/cpu/vulnerabilities/gather_data_sampling"
HEADER_PATH = Path(__file__).with_name("cpu_runtime.h")
EXEC_PATH = Path(__file__).with_name("cpu_exec.h")  # the runtime library's plan interpreter
THREADS_ENV = "GTENSOR_CPU_THREADS"
# the plain contract's matmul tile forms, in cpu_runtime.h's TileForm order
MATMUL_TILE_FORMS = ("host", "tall", "wide")
MAX_KERNELS = 4096  # cpu_exec.h's GTCPU_MAX_KERNELS: call table entries in one process

_LOADED: dict[str, ctypes.CDLL] = {}
_LOAD_LOCK = threading.RLock()
_SLOTS: dict[tuple[str, str], int] = {}  # (kernel library key, kernel name) -> call table entry
_ANNOUNCED: list[bool] = []
_ANNOUNCE_LOCK = threading.Lock()


def cache_dir() -> Path:
    """Directory of compiled cpu libraries: ``$GTENSOR_CACHE_DIR/cpu`` or the XDG cache's."""
    return cache.root() / "cpu"


@functools.cache
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


def _launchers(kernel: Kernel) -> str:
    """A kernel's ``gtcpu_call_<name>`` (unpacks ``void** args``; the call table's entry) and
    ``gtcpu_launch_<name>`` (the same under the IEEE environment: the checked door's)."""
    unpack = "".join(
        f"    {p.ctype} a{i};\n    std::memcpy(&a{i}, args[{i}], sizeof a{i});\n"
        for i, p in enumerate(kernel.params))
    call = ", ".join(f"a{i}" for i in range(len(kernel.params)))
    name = kernel.name
    return (f'extern "C" int gtcpu_call_{name}(void** args)\n{{\n{unpack}'
            f"    {name}({call});\n    return 0;\n}}\n"
            f'extern "C" int gtcpu_launch_{name}(void** args)\n{{\n'
            f"    gtcpu::FpEnv env;\n    return gtcpu_call_{name}(args);\n}}\n")


PY_MODULE = "gtensor_cpu_module"

_BIND = """extern "C" int gtcpu_bind(void* shared, long long size)
{
    if (size != (long long)sizeof(gtcpu::Shared)) return 1;
    gtcpu::SHARED = static_cast<gtcpu::Shared*>(shared);
    return 0;
}
extern "C" void* gtcpu_bound() { return gtcpu::SHARED; }
"""


def _python_flags() -> tuple[str, ...]:
    """Flags that also build the runtime library as a CPython extension (when Python.h is
    installed)."""
    import sysconfig

    include = sysconfig.get_paths().get("include") or ""
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return ()
    return (f"-I{include}", "-DGTCPU_PYTHON")


def runtime_unit() -> str:
    """The runtime library: the header (with its pool), the plan interpreter and its call
    table, the settings and the CPython door."""
    return ("#ifdef GTCPU_PYTHON\n#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n#endif\n"
            f"{toolchain.header_text(HEADER_PATH)}\n{toolchain.header_text(EXEC_PATH)}")


def shard_unit(source: str) -> str:
    """A library bound to the runtime library's state (``GTCPU_SHARD``: no pool of its own,
    ``bind_library`` points it at the runtime's pool and settings; the intrinsics only with
    ``GTCPU_VFMA``, for sources that call ``gtcpu::vfma``): the header, ``source``,
    ``gtcpu_bind``."""
    vfma = "#define GTCPU_VFMA\n" if "gtcpu::vfma" in source else ""
    return ("#define GTCPU_SHARD\n" + vfma + f"{toolchain.header_text(HEADER_PATH)}\n"
            + source + _BIND)


def kernel_unit(source: str, kernels: Sequence[Kernel]) -> str:
    """A kernel library: ``shard_unit`` of ``source`` (the kernels and what they call) and
    their launchers."""
    return shard_unit('#line 1 "kernels.cpp"\n' f"{source}\n" '#line 1 "launchers.cpp"\n'
                      + "".join(_launchers(k) for k in kernels))


def kernel_flags(source: str) -> tuple[str, ...]:
    """The compiler flags of a kernel library holding ``source``: CXX_FLAGS, and
    FIRST_STAGE_FLAGS (and ``gather_flags()``) where it has a first-stage loop."""
    from gtensor.ops.forms import FIRST_STAGE_LOOP

    if FIRST_STAGE_LOOP not in source:
        return CXX_FLAGS
    return (*CXX_FLAGS, *FIRST_STAGE_FLAGS, *gather_flags())


@functools.cache
def gather_flags() -> tuple[str, ...]:
    """GATHER_FLAGS where gathers are fast (x86-64, AVX-512, not affected by GDS) and the
    compiler is a g++ that takes them, else ()."""
    if platform.machine().lower() not in ("x86_64", "amd64") or "avx512f" not in \
            _host_identity().split() or not _read(GDS_STATUS).startswith("Not affected"):
        return ()
    command = toolchain.compiler_command()
    if "clang" in toolchain.compiler_identity(tuple(command)).lower():
        return ()
    try:  # an older g++ may not know these tuning names
        proc = subprocess.run([*command, *GATHER_FLAGS, "-fsyntax-only", "-x", "c++",
                               os.devnull], capture_output=True, check=False)
    except OSError:
        return ()
    return GATHER_FLAGS if proc.returncode == 0 and not proc.stderr else ()


def _read(path: str) -> str:
    """A small text file's contents ("" when it cannot be read)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def kernel_source(kernel: Kernel) -> str:
    """One kernel's library source: the device functions its text names, then the kernel."""
    from gtensor.cuda_source import device_text_for

    text = kernel.source()
    return f"{device_text_for(text)}\n{text}"


def _announce(folder: Path) -> None:
    """The one line a process prints before its first cpu compile."""
    with _ANNOUNCE_LOCK:
        if _ANNOUNCED:
            return
        _ANNOUNCED.append(True)
        print(f"gtensor: compiling the cpu kernels as ops first use them (a second or so "
              f"each, once per machine), cached in {folder}", file=sys.stderr, flush=True)


def unit_key(tu: str, flags: tuple[str, ...]) -> str:
    """The cache key of a cpu translation unit (a kernel library, the runtime, a ggpu-fuse
    step): its text, the compiler, the flags, the host, the Python."""
    command = toolchain.compiler_command()
    return hashlib.sha256("\0".join([tu, toolchain.compiler_identity(tuple(command)),
                                     " ".join(flags), _host_identity(), sys.version])
                          .encode()).hexdigest()


def _built(tu: str, flags: tuple[str, ...], what: str, key: str | None = None) -> Path:
    """The compiled library of ``tu`` (its ``key``, computed when not given): found in the
    cache or compiled now (no lock held: threads may compile different units side by side)."""
    key = key or unit_key(tu, flags)
    command = toolchain.compiler_command()
    return cache.library(
        "cpu", key, tu,
        lambda src, out: toolchain.compile_shared("cpu", command, flags, src, out),
        what, announce=_announce)


def _library(tu: str, flags: tuple[str, ...], what: str) -> ctypes.CDLL:
    """The loaded library of translation unit ``tu`` (compiled at most once per cache and
    loaded once per process)."""
    key = unit_key(tu, flags)
    with _LOAD_LOCK:
        if key not in _LOADED:
            _LOADED[key] = ctypes.CDLL(str(_built(tu, flags, what, key)))
            _LOADED[key].gtensor_key = key
        return _LOADED[key]


@functools.cache
def _runtime() -> tuple[ctypes.CDLL, Any]:
    """The runtime library and its ``run`` door (the CPython extension's, or None without
    Python.h)."""
    lib = _library(runtime_unit(), (*CXX_FLAGS, *_python_flags()), "the cpu runtime")
    run = None
    if hasattr(lib, f"PyInit_{PY_MODULE}"):
        from importlib.machinery import ExtensionFileLoader
        from importlib.util import module_from_spec, spec_from_loader

        loader = ExtensionFileLoader(PY_MODULE, lib._name)
        module = module_from_spec(spec_from_loader(PY_MODULE, loader))
        loader.exec_module(module)
        run = module.run
    lib.gtcpu_set_call.argtypes = (ctypes.c_longlong, ctypes.c_void_p)
    lib.gtcpu_set_call.restype = ctypes.c_int
    lib.gtcpu_shared.restype = ctypes.c_void_p
    lib.gtcpu_shared_size.restype = ctypes.c_longlong
    return lib, run


def bind_library(lib: ctypes.CDLL) -> None:
    """Point a loaded ``shard_unit`` library at the runtime library's state: its kernels split
    work on the process's one pool (a pool per library would leave one library's workers
    spinning while another's run) and read the same settings."""
    runtime, _ = _runtime()
    lib.gtcpu_bind.argtypes = (ctypes.c_void_p, ctypes.c_longlong)
    lib.gtcpu_bind.restype = ctypes.c_int
    if lib.gtcpu_bind(runtime.gtcpu_shared(), runtime.gtcpu_shared_size()) != 0:
        raise RuntimeError("cpu: a library and the runtime library disagree on their shared "
                           "state (built from different headers)")


class _KernelLibrary:
    """One loaded kernel library: bound to the runtime, its kernels in the call table."""

    def __init__(self, source: str, kernels: Sequence[Kernel]) -> None:
        names = ", ".join(k.name for k in kernels[:3]) + (", ..." if len(kernels) > 3 else "")
        self.lib = _library(kernel_unit(source, kernels), kernel_flags(source),
                            f"cpu kernels {names}")
        runtime, _ = _runtime()
        key = self.lib.gtensor_key
        with _LOAD_LOCK:
            bind_library(self.lib)
            self.slots: dict[str, int] = {}
            self.launchers: dict[str, Any] = {}
            self.entries: dict[str, int] = {}  # kernel name -> its C function's address
            for k in kernels:
                slot = _SLOTS.get((key, k.name))
                if slot is None:
                    if len(_SLOTS) >= MAX_KERNELS:
                        raise RuntimeError(f"cpu: more than {MAX_KERNELS} kernels loaded in "
                                           "one process")
                    slot = _SLOTS[(key, k.name)] = len(_SLOTS)
                    call = ctypes.cast(getattr(self.lib, f"gtcpu_call_{k.name}"), ctypes.c_void_p)
                    if runtime.gtcpu_set_call(slot, call.value) != 0:
                        raise RuntimeError(f"cpu: no call table entry {slot} for {k.name}")
                fn = getattr(self.lib, f"gtcpu_launch_{k.name}")
                fn.argtypes = (ctypes.POINTER(ctypes.c_void_p),)
                fn.restype = ctypes.c_int
                self.slots[k.name] = slot
                self.launchers[k.name] = fn
                self.entries[k.name] = ctypes.cast(getattr(self.lib, k.name),
                                                   ctypes.c_void_p).value


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

    def __init__(self, kernels: Sequence[Kernel], source: str | None = None) -> None:
        """The module of ``kernels``: each kernel's library built and loaded on first use
        (``source`` None: the text each kernel names, see ``kernel_source``), or all of them
        now from ``source`` (device functions + the kernels) as one library."""
        super().__init__(kernels)
        self._lib, py_run = _runtime()
        self._source = source
        self._libraries: dict[str, _KernelLibrary] = {}  # kernel name -> its loaded library
        if source is not None:
            whole = _KernelLibrary(source, list(kernels))
            self._libraries = dict.fromkeys(self._kernels, whole)
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

        # run(plan address, *arrays (inputs, then out)) -> status: 0 ok, 2 out overlaps an
        # input, 3 a kernel not loaded
        self.run = py_run if py_run is not None else ctypes_run

    def library(self, kernel: Kernel) -> _KernelLibrary:
        """The loaded library of one of the module's kernels (compiled on its first use)."""
        lib = self._libraries.get(kernel.name)
        if lib is None:
            kernel = self.resolve(kernel)
            with _LOAD_LOCK:
                lib = self._libraries.get(kernel.name)
                if lib is None:
                    lib = self._libraries[kernel.name] = _KernelLibrary(
                        kernel_source(kernel), [kernel])
        return lib

    def entry(self, kernel: Kernel) -> int:
        """The address of ``kernel``'s own C function (its parameters, as declared) in its
        loaded library, bound to the runtime (compiled on first use): a compiled caller (a
        fused step) calls the very code a launch runs. The library stays loaded for the
        process."""
        kernel = self.resolve(kernel)
        return self.library(kernel).entries[kernel.name]

    def load(self, kernels: Sequence[Kernel] | None = None, jobs: int = 1) -> None:
        """Compile and load ``kernels`` (default: all of the module's) now rather than at
        their first launch, ``jobs`` compiler processes at a time."""
        todo = [self.resolve(k) for k in (self._kernels.values() if kernels is None
                                          else kernels) if k.name not in self._libraries]
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"CpuModule.load: jobs is {jobs!r}; expected an int >= 1")
        if jobs > 1 and len(todo) > 1:
            def build(k: Kernel) -> None:
                source = kernel_source(k)
                _built(kernel_unit(source, [k]), kernel_flags(source), f"cpu kernels {k.name}")

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(build, todo))
        for k in todo:
            self.library(k)

    def loaded(self) -> list[str]:
        """The names of the kernels whose libraries this module has loaded."""
        return sorted(self._libraries)

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
        fn = self.library(kernel).launchers[name]

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
            words += [self.library(kernel).slots[kernel.name], len(values)]
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
