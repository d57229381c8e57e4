"""Rung 5: the cluster run is bitwise the local tape run, for 1, 2, 3 workers, any partitioning,
and when a worker dies mid-run (real LocalClusters; small N, few iterations)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from gdemos.swarm import SwarmConfig, same_bits, step, train_local
from gdemos.swarm_dask import check_partition, local_cluster, partition, train_cluster

distributed = pytest.importorskip("distributed", reason="rung 5 needs dask.distributed "
                                  "(pip install 'gdemos[swarm]')")

CFG = SwarmConfig(n=1200, d=16, iterations=3)
# any partitioning: one task; uneven sizes (a one-example task included); more tasks than workers
PARTITIONINGS = {
    "whole": [(0, CFG.n)],
    "uneven": [(0, 1), (1, 700), (700, 1013), (1013, CFG.n)],
    "seven": partition(CFG.n, 7),
    "shuffled": list(reversed(partition(CFG.n, 5))),
}


@pytest.fixture(scope="module")
def reference():
    """The same training done locally, every per-example row from the tape itself."""
    return train_local(CFG)


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"{w}workers")
def client(request):
    cluster, client = local_cluster(request.param)
    client.wait_for_workers(request.param, timeout=120)
    yield client
    client.close()
    cluster.close()


def test_reference_trains(reference) -> None:
    assert reference.losses[0] > 10 * reference.losses[-1] > 0


@pytest.mark.parametrize("parts", sorted(PARTITIONINGS))
def test_cluster_bitwise_equals_local_tape(client, reference, parts: str) -> None:
    h = train_cluster(CFG, client, PARTITIONINGS[parts])
    assert same_bits(h, reference), (
        f"{parts}: params {[p.tobytes().hex()[:16] for p in h.params]} vs "
        f"{[p.tobytes().hex()[:16] for p in reference.params]}")
    workers = len(client.scheduler_info()["workers"])
    assert all(n <= 1 for n in h.extra["compiles_by_pid"].values()), h.extra  # once per worker
    assert len(h.extra["tasks_by_pid"]) <= workers


def test_worker_killed_mid_run_gives_identical_bits(reference) -> None:
    """SIGKILL one worker process while its tasks are in flight, restart another later: Dask
    reruns the lost tasks (the nanny brings the worker back) and the bits do not change."""
    cluster, client = local_cluster(2)
    try:
        client.wait_for_workers(2, timeout=120)
        events = []
        first_pids = set(client.run(os.getpid).values())

        def on_submit(iteration: int, futures: list) -> None:
            pids = client.run(os.getpid)
            if iteration == 1:
                addr, pid = sorted(pids.items())[0]
                os.kill(pid, signal.SIGKILL)
                events.append(("killed", addr, pid))
            elif iteration == 2:
                addr = sorted(pids)[-1]
                client.restart_workers([addr])
                events.append(("restarted", addr, pids[addr]))

        h = train_cluster(CFG, client, partition(CFG.n, 6), on_submit=on_submit)
        assert [e[0] for e in events] == ["killed", "restarted"]
        assert same_bits(h, reference)
        assert events[0][2] not in client.run(os.getpid).values()  # that process is gone
        fresh = set(h.extra["tasks_by_pid"]) - first_pids
        assert fresh, f"no task ran on a restarted worker: {h.extra}"
        assert all(h.extra["compiles_by_pid"][pid] == 1 for pid in fresh)  # compiled there once
    finally:
        client.close()
        cluster.close()


def test_step_reduces_serially_in_example_order() -> None:
    """The one fixed reduction: row 0, + row 1, + row 2 ..., then / n, then p - lr * mean."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(50, 3)) * np.array([1.0, 1e8, 1e-8])
    losses = rng.uniform(size=50)
    p = rng.normal(size=3)
    acc, lacc = rows[0].copy(), losses[0]
    for i in range(1, 50):
        acc, lacc = acc + rows[i], lacc + losses[i]
    got, mean_loss = step(p, losses, rows, 0.25)
    assert got.tobytes() == (p - 0.25 * (acc / 50.0)).tobytes()
    assert mean_loss == lacc / 50.0
    # and the order matters (so it must be fixed): a pairwise sum differs for these rows
    assert not np.array_equal(np.add.accumulate(rows[::-1], axis=0)[-1], acc)


def test_partition_checks() -> None:
    assert partition(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert check_partition(10, [(5, 10), (0, 5)]) == [(0, 5), (5, 10)]
    with pytest.raises(ValueError, match="do not tile"):
        check_partition(10, [(0, 4), (5, 10)])
    with pytest.raises(ValueError, match="end at 9"):
        check_partition(10, [(0, 9)])
    with pytest.raises(ValueError, match="parts is 0"):
        partition(10, 0)


def test_gpu_engine_bitwise(reference) -> None:
    """With a GPU: the same job through emit_cuda and cupy, bitwise equal to the local tape."""
    cp = pytest.importorskip("cupy", reason="no cupy: the GPU engine runs where a GPU is")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU visible to cupy")
    except Exception as e:  # noqa: BLE001 - any CUDA runtime failure means: no usable GPU
        pytest.skip(f"no usable GPU: {e}")
    from gdemos.swarm_gpu import train_gpu

    assert same_bits(train_gpu(CFG), reference)


CFG32 = SwarmConfig(n=500, d=16, iterations=3, dtype="float32")


@pytest.fixture(scope="module")
def reference32():
    return train_local(CFG32)


def test_float32_cluster_bitwise(client, reference32) -> None:
    """A float32 run: the emitted float code on the cluster, bitwise the float32 tape run."""
    h = train_cluster(CFG32, client, partition(CFG32.n, 3))
    assert h.final.dtype == np.float32 and same_bits(h, reference32)
