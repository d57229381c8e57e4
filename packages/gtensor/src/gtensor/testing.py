"""Helpers for bitwise comparisons in tests (used by every package's test suite)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality with NaNs compared by class (any NaN equals any NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "biu":  # int64 indices, bool masks: plain equality is bitwise
        return bool(np.array_equal(a, b))
    ui = np.uint64 if a.dtype == np.float64 else np.uint32
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return False
    keep = ~nan_a
    return bool(np.array_equal(a[keep].view(ui), b[keep].view(ui)))


def first_difference(a: np.ndarray, b: np.ndarray) -> str:
    """Describe where two arrays first differ (for failure messages)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    if a.dtype.kind in "biu":
        same = a == b
    else:
        ui = np.uint64 if a.dtype == np.float64 else np.uint32
        same = (a.view(ui) == b.view(ui)) | (np.isnan(a) & np.isnan(b))
    idx = np.argwhere(~same)
    if not len(idx):
        return "no difference"
    i = tuple(idx[0])
    return f"first of {len(idx)} differences at {i}: {a[i]!r} ({a[i].tobytes().hex()}) vs " \
           f"{b[i]!r} ({b[i].tobytes().hex()})"


# ------------------------------------------------------------------- cpu thread splits
class _ThreadRuns:
    """``cpu_thread_runs``'s counts: each set in $GTENSOR_CPU_THREADS as it is reached."""

    def __init__(self, env: str, counts: tuple[str, ...]) -> None:
        self.env, self.counts = env, counts

    def __iter__(self) -> Iterator[str]:
        for t in self.counts:
            os.environ[self.env] = t
            yield t


@contextmanager
def cpu_thread_runs(*targets: object, threads: Sequence[str] = ("1", "2")
                    ) -> Iterator[Iterable[str | None]]:
    """Split every loop of 2+ blocks in the cpu ``targets``; yield the thread counts to run at."""
    # targets: gtensor backends (only a cpu one counts: its module) or compiled modules with
    # set_parallel_work; each module's split threshold is 1 inside the block. Iterating what
    # is yielded sets each of threads in $GTENSOR_CPU_THREADS in turn; (None,), one run with
    # nothing set, where no target is a cpu one. The thresholds and the variable are restored
    # on exit, a failing block included.
    from .backends.base import Backend
    from .runtime.cpu import THREADS_ENV

    modules = [t.module if isinstance(t, Backend) else t for t in targets
               if not isinstance(t, Backend) or t.name == "cpu"]
    env = os.environ.get(THREADS_ENV)
    old: list[tuple[object, int]] = []
    try:
        for m in modules:
            old.append((m, m.set_parallel_work(1)))
        yield _ThreadRuns(THREADS_ENV, tuple(threads)) if modules else (None,)
    finally:
        for m, work in reversed(old):
            m.set_parallel_work(work)
        if env is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = env


class _TileForms:
    """Iterating sets each matmul tile form of a cpu module in turn (``matmul_tile_forms``)."""

    def __init__(self, module: object, forms: tuple[str, ...]) -> None:
        self.module, self.forms = module, forms

    def __iter__(self) -> Iterator[str]:
        for form in self.forms:
            if self.module is not None:
                self.module.set_matmul_tiles(form)
            yield form


@contextmanager
def matmul_tile_forms(be: object, inner: str) -> Iterator[Iterable[str]]:
    """Yield the matmul tile forms to run contract ``inner`` in on ``be``: on the cpu backend
    under the plain contract "tall" and "wide" (iterating sets each in turn, so both forms'
    branches run on any host; the host's choice is restored on exit, a failing block
    included); else ("host",), the one form there is."""
    module = getattr(be, "module", None) if getattr(be, "name", None) == "cpu" else None
    if module is None or inner != "plain":
        yield _TileForms(None, ("host",))
        return
    old = module.set_matmul_tiles("host")
    try:
        yield _TileForms(module, ("tall", "wide"))
    finally:
        module.set_matmul_tiles(old)


# --------------------------------------------------------------- compiled scalar functions
_SIM_MAP_MODULES: dict[tuple, object] = {}


def sim_map_module(fns: Sequence):
    """The scalar functions ``fns`` (``gtensor.scalar.dsl.ScalarFn``) compiled by the sim
    runtime (the CUDA dialect, g++ -O2 -ffp-contract=off): one map kernel ``map_<cname>``
    each; built once per process. A pytest skip where there is no C++ compiler."""
    import shutil

    import pytest

    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler: the sim runtime (and this check) needs g++ or $CXX")
    key = tuple(fns)
    if key not in _SIM_MAP_MODULES:
        from .dtypes import BY_SUFFIX
        from .kernels import Kind
        from .ops.elementwise import form_kernel
        from .runtime import SimModule
        from .scalar.dsl import device_sources

        kernels = [form_kernel(Kind.MAP, f"map_{fn.cname}", BY_SUFFIX[fn.out_dt], fn) for fn in key]
        source = device_sources(list(key)) + "\n" + "\n".join(k.source() for k in kernels)
        _SIM_MAP_MODULES[key] = SimModule(source, kernels)
    return _SIM_MAP_MODULES[key]


def assert_sim_map_matches(fns: Sequence, fn, x: np.ndarray) -> None:
    """Assert that ``fn`` (one of ``fns``), compiled with them (``sim_map_module``), gives its
    numpy bits on every element of ``x`` (NaNs compared by class); the failure names the first
    inputs that differ."""
    from .ops.forms import BLOCK, grid_for

    x = np.ascontiguousarray(x)
    want = fn.numpy(x)
    got = np.empty_like(x)
    mod = sim_map_module(fns)
    mod.launch(mod.kernel(f"map_{fn.cname}"), grid_for(len(x)), BLOCK, (x, got, len(x)))
    same = (want.view(f"u{want.itemsize}") == got.view(f"u{got.itemsize}")) | (
        np.isnan(want) & np.isnan(got))
    assert same.all(), (fn.cname, x[~same][:5], want[~same][:5], got[~same][:5])


# --------------------------------------------------------------------------- test sessions
BACKEND_ENV = "GRAD_TEST_BACKEND"


def backend_name(config: object = None) -> str:
    """The backend under test: ``--backend`` where a conftest defines it, else $GRAD_TEST_BACKEND.

    Defaults to "numpy". nox sets the variable per session (see the root noxfile).
    """
    opt = None
    if config is not None:
        try:
            opt = config.getoption("--backend")
        except ValueError:
            opt = None
    return opt or os.environ.get(BACKEND_ENV) or "numpy"


def slow_runs() -> bool:
    """Whether tests marked ``slow`` run: in the oracle session (``HYPOTHESIS_PROFILE=oracle``,
    set by ``nox -s oracle``) or with ``GRAD_SLOW=1``."""
    return os.environ.get("HYPOTHESIS_PROFILE") == "oracle" or os.environ.get("GRAD_SLOW") == "1"


def skip_slow(items: Iterable) -> None:
    """Skip the collected ``items`` marked ``slow`` (with the reason) unless ``slow_runs()``."""
    if slow_runs():
        return
    import pytest

    skip = pytest.mark.skip(reason="slow: runs in `nox -s oracle` (or GRAD_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def require_backend(name: str):
    """The gtensor backend ``name``, or a pytest skip saying why it is unavailable here."""
    import pytest

    from . import backend

    try:
        return backend(name)
    except RuntimeError as e:  # cuda without cupy or without a GPU
        pytest.skip(f"backend {name!r} unavailable here: {e}")


def require_other(name: str) -> str:
    """``name`` when it is not the numpy reference; else skip (numpy vs numpy is vacuous)."""
    import pytest

    if name == "numpy":
        pytest.skip(f"parity of the numpy reference with itself is vacuous; run with "
                    f"{BACKEND_ENV}=sim or cuda")
    return name


def _no_database():
    from hypothesis.database import ExampleDatabase

    class NoDatabase(ExampleDatabase):
        """An example database that stores nothing (CI writes no .hypothesis folder)."""

        def save(self, key: bytes, value: bytes) -> None:
            """Keep nothing."""

        def fetch(self, key: bytes):
            """Nothing was kept."""
            return iter(())

        def delete(self, key: bytes, value: bytes) -> None:
            """Nothing to delete."""

        def move(self, src: bytes, dest: bytes, value: bytes) -> None:
            """Nothing to move."""

    return NoDatabase()


def load_hypothesis_profiles() -> None:
    """Register the shared hypothesis profiles and load $HYPOTHESIS_PROFILE (default "dev").

    ci: few derandomized examples (CI on 2 cores); dev: a few more; oracle: the heavy run.
    """
    from hypothesis import HealthCheck, settings

    slow = [HealthCheck.too_slow]
    # ci: reproducible through a fixed seed (what pytest's --hypothesis-seed=0 sets) and an
    # example database that keeps nothing. NOTE: not derandomize=True: it implies
    # database=None, and with a None database hypothesis (6.155) re-walks a chain of settings
    # that grows by one per test, so a process running ~950 @given tests dies of RecursionError.
    settings.register_profile("ci", max_examples=6, deadline=None, database=_no_database(),
                              suppress_health_check=slow)
    settings.register_profile("dev", max_examples=15, deadline=None, suppress_health_check=slow)
    settings.register_profile("oracle", max_examples=300, deadline=None,
                              suppress_health_check=slow)
    profile = os.environ.get("HYPOTHESIS_PROFILE", "dev")
    settings.load_profile(profile)
    if profile == "ci":
        from hypothesis import core

        if core.global_force_seed is None:  # an explicit --hypothesis-seed wins
            core.global_force_seed = 0
