"""The simulator's schedules ($GTENSOR_SIM_SCHEDULE): forward, reverse and shuffle:SEED.

A correct kernel gives the same bits under every schedule; a kernel with a missing
``__syncthreads`` (a race) does not, which is what makes the schedule a race detector on a CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import CASES, arrays
from gtensor.kernels import Kernel, params
from gtensor.runtime import sim
from gtensor.runtime.sim import SCHEDULE_ENV, SimModule
from gtensor.testing import bits_equal, first_difference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCHEDULES = ["forward", "reverse", "shuffle:1", "shuffle:2024"]

# A softmax-like row kernel (block per row): a max on thread 0, squares of x - max, a serial
# sum on thread 0, a divide. ${SYNC} is the barrier between writing buf and summing it.
_ROW = """
    __shared__ double buf[128];
    __shared__ double total;
    const int t = threadIdx.x, n = blockDim.x;
    const double* xr = x + (long long)blockIdx.x * n;
    buf[t] = xr[t];
    __syncthreads();
    if (t == 0) {
        double m = buf[0];
        for (int r = 1; r < n; ++r) m = buf[r] > m ? buf[r] : m;
        total = m;
    }
    __syncthreads();
    const double d = __dsub_rn(xr[t], total);
    buf[t] = __dmul_rn(d, d);
    ${SYNC}
    if (t == 0) {
        double s = buf[0];
        for (int r = 1; r < n; ++r) s = __dadd_rn(s, buf[r]);
        total = s;
    }
    __syncthreads();
    y[(long long)blockIdx.x * n + t] = __ddiv_rn(buf[t], total);
"""
ROW_SIG = params("const double* x, double* y")
GOOD_ROW = Kernel("row_good", ROW_SIG, _ROW.replace("${SYNC}", "__syncthreads();"))
BROKEN_ROW = Kernel("row_broken", ROW_SIG, _ROW.replace("${SYNC}", "// barrier missing"))

# Barrier-free: each thread appends its linear index to a log (a deliberate race on cnt).
PLAIN_ORDER = Kernel("plain_order", params("double* log, double* cnt"), """
    const long long i = (long long)cnt[0];
    log[i] = (double)(threadIdx.x + blockDim.x * blockIdx.x);
    cnt[0] = (double)(i + 1);
""")

# With barriers: per phase, each thread appends its index to that phase's log.
FIBER_ORDER = Kernel("fiber_order", params("double* log, double* cnt, int phases"), """
    const int n = blockDim.x;
    for (int p = 0; p < phases; ++p) {
        const long long i = (long long)cnt[p];
        log[(long long)p * n + i] = (double)threadIdx.x;
        cnt[p] = (double)(i + 1);
        __syncthreads();
    }
""")

KERNELS = [GOOD_ROW, BROKEN_ROW, PLAIN_ORDER, FIBER_ORDER]


@pytest.fixture(scope="module")
def mod() -> SimModule:
    """One small module holding the test kernels (compiled once, cached on disk)."""
    return SimModule("".join(k.source() for k in KERNELS), KERNELS)


def _rows(mod: SimModule, kernel: Kernel, x: np.ndarray) -> np.ndarray:
    y = np.full_like(x, np.nan)
    mod.launch(kernel, x.shape[0], x.shape[1], (x, y))
    return y


def _row_data() -> np.ndarray:
    return np.random.default_rng(14).standard_normal((3, 64))


def test_missing_barrier_changes_bits_between_schedules(mod, monkeypatch):
    x = _row_data()
    got = {}
    for schedule in ("forward", "reverse"):
        monkeypatch.setenv(SCHEDULE_ENV, schedule)
        got[schedule] = _rows(mod, BROKEN_ROW, x)
    assert not bits_equal(got["forward"], got["reverse"]), (
        "the race (no barrier between writing buf and summing it) went unnoticed: "
        "forward and reverse schedules gave the same bits")


def test_correct_row_kernel_same_bits_under_every_schedule(mod, monkeypatch):
    x = _row_data()
    d = x - x.max(axis=1, keepdims=True)
    sq = d * d
    total = np.add.accumulate(sq, axis=1)[:, -1:]
    want = sq / total
    for schedule in SCHEDULES:
        monkeypatch.setenv(SCHEDULE_ENV, schedule)
        got = _rows(mod, GOOD_ROW, x)
        assert bits_equal(want, got), f"{schedule}: {first_difference(want, got)}"


def _plain_order(mod: SimModule, grid: int, block: int) -> list[int]:
    n = grid * block
    log, cnt = np.full(n, -1.0), np.zeros(1)
    mod.launch(mod.kernel("plain_order"), grid, block, (log, cnt))
    assert cnt[0] == n
    return [int(v) for v in log]


def test_barrier_free_threads_run_in_schedule_order(mod, monkeypatch):
    n = 3 * 8
    monkeypatch.setenv(SCHEDULE_ENV, "forward")
    assert _plain_order(mod, 3, 8) == list(range(n))
    monkeypatch.setenv(SCHEDULE_ENV, "reverse")  # no recompile: same module, new order
    assert _plain_order(mod, 3, 8) == list(range(n))[::-1]
    monkeypatch.setenv(SCHEDULE_ENV, "shuffle:5")
    a = _plain_order(mod, 3, 8)
    assert sorted(a) == list(range(n)) and a != list(range(n)) and a != list(range(n))[::-1]
    assert _plain_order(mod, 3, 8) == a, "the same seed must give the same order"
    monkeypatch.setenv(SCHEDULE_ENV, "shuffle:6")
    assert _plain_order(mod, 3, 8) != a, "another seed should give another order"


def _fiber_phases(mod: SimModule, block: int, phases: int) -> list[list[int]]:
    log, cnt = np.full(phases * block, -1.0), np.zeros(phases)
    mod.launch(mod.kernel("fiber_order"), 1, block, (log, cnt, phases))
    return [[int(v) for v in log[p * block:(p + 1) * block]] for p in range(phases)]


def test_fibers_keep_barrier_semantics_in_every_schedule(mod, monkeypatch):
    block, phases = 16, 5
    ident = list(range(block))
    for schedule in SCHEDULES:
        monkeypatch.setenv(SCHEDULE_ENV, schedule)
        got = _fiber_phases(mod, block, phases)
        for p, order in enumerate(got):  # every thread arrives once per phase: no overtaking
            assert sorted(order) == ident, f"{schedule}: phase {p} log {order}"
        if schedule == "forward":
            assert all(o == ident for o in got), got
        elif schedule == "reverse":
            assert all(o == ident[::-1] for o in got), got
        else:  # a fresh permutation at every barrier
            assert len({tuple(o) for o in got}) > 1, f"{schedule}: one order for all phases"
            assert got[0] != ident


def test_bad_schedule_is_rejected(mod, monkeypatch):
    for bad in ("backwards", "shuffle", "shuffle:x", "reverse:3"):
        monkeypatch.setenv(SCHEDULE_ENV, bad)
        with pytest.raises(ValueError, match=SCHEDULE_ENV):
            _plain_order(mod, 1, 2)
    assert sim.parse_schedule("") == (0, 0)
    assert sim.parse_schedule("shuffle:12") == (2, 12)


# every op kernel, under every schedule: the same bits as the numpy reference
_ROW_CASES = [c for c in CASES if c.op in ("softmax", "softmax_grad", "sum", "matmul", "bmm",
                                           "sum_to", "concat", "transpose", "div")][::3]


@pytest.fixture(scope="module")
def simbe():
    """The sim backend (this file tests the simulator, whatever GRAD_TEST_BACKEND says)."""
    import gtensor

    return gtensor.backend("sim")


@pytest.mark.parametrize("case", _ROW_CASES, ids=lambda c: c.id)
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_op_kernels_same_bits_under_every_schedule(simbe, case, data, monkeypatch):
    import gtensor

    ref = gtensor.backend("numpy")
    xs = [data.draw(arrays(np.dtype(np.float64), s)) for s in case.shapes]
    want = ref.apply(case.op, [ref.asarray(x) for x in xs], **case.attrs)
    for schedule in SCHEDULES[1:]:
        monkeypatch.setenv(SCHEDULE_ENV, schedule)
        got = simbe.to_numpy(simbe.apply(case.op, [simbe.asarray(x) for x in xs], **case.attrs))
        assert bits_equal(want, got), f"{case.id} {schedule}: {first_difference(want, got)}"


@pytest.mark.parametrize("op", ["softmax", "softmax_grad"])
def test_row_kernels_with_more_rows_than_blocks(simbe, op, monkeypatch):
    """More rows than MAX_ROW_BLOCKS: a block runs several rows (the barrier between rows)."""
    import gtensor
    from gtensor.ops.forms import MAX_ROW_BLOCKS

    ref = gtensor.backend("numpy")
    rng = np.random.default_rng(41)
    shape = (MAX_ROW_BLOCKS + 5, 3)
    xs = [rng.standard_normal(shape) * 4.0 for _ in range(1 if op == "softmax" else 2)]
    want = ref.apply(op, [ref.asarray(x) for x in xs], axis=1)
    for schedule in SCHEDULES:
        monkeypatch.setenv(SCHEDULE_ENV, schedule)
        got = simbe.to_numpy(simbe.apply(op, [simbe.asarray(x) for x in xs], axis=1))
        assert bits_equal(want, got), f"{op} {schedule}: {first_difference(want, got)}"
