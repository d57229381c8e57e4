"""Faults and real deployments: a worker SIGKILLed mid-step and another restarted between
steps change no bit; a cluster started as separate ``dask scheduler`` / ``dask worker``
processes on 127.0.0.1, reached by address as a user's cluster is, gives Local's bits."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gdist
import numpy as np
import pytest
from gdist_models import CASES, killer

distributed = pytest.importorskip("distributed")


def bits(params: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in params.items()}


def run(cls, loss_fn, bname: str, dtype: str = "float64", on_step=None, **kw):
    _, case, m, opt, okw, extra = CASES["mlp"]
    init, batches = case()
    t = cls(loss_fn, init, opt, okw, microbatch=m, backend=bname, dtype=dtype, **extra, **kw)
    losses = []
    for i, b in enumerate(batches):
        losses.append(t.step(b))
        if on_step is not None:
            on_step(i)
    return losses, t


def round_robin(i: int, workers: list[str]) -> str:
    return workers[i % len(workers)]


def test_sigkill_mid_step_and_a_restart_change_no_bit(bname: str, tmp_path: Path) -> None:
    ref_losses, ref = run(gdist.Local, CASES["mlp"][0], bname)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(2, timeout=120)
        pids_before = set(client.run(os.getpid).values())
        flag = tmp_path / "killed"
        restarted = []

        def restart_one(i: int) -> None:  # between steps 1 and 2: a graceful restart
            if i == 1:
                client.wait_for_workers(2, timeout=120)
                addr = sorted(client.nthreads())[-1]
                client.restart_workers([addr])
                restarted.append(addr)

        losses, t = run(gdist.DataParallel, killer(str(flag), os.getpid()), bname,
                        client=client, placement=round_robin, on_step=restart_one)
        assert flag.exists(), "no worker was killed: the test did not test anything"
        killed_pid = int(flag.read_text())
        assert killed_pid in pids_before and restarted
        assert losses == ref_losses
        assert bits(t.params) == bits(ref.params)
        client.wait_for_workers(2, timeout=120)
        assert killed_pid not in client.run(os.getpid).values()  # that process is gone
    finally:
        client.close()
        cluster.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group this test started (a dask CLI and its nannies)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_dask_scheduler_and_worker_processes_by_address(bname: str, tmp_path: Path) -> None:
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = tmp_path / "dask.log"  # printed at the end: pytest shows it when the test fails
    quiet = {"stdout": open(log, "w"), "stderr": subprocess.STDOUT, "start_new_session": True}
    scheduler = subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host",
                                  "127.0.0.1", "--port", str(port), "--no-dashboard"], **quiet)
    workers = None
    try:
        deadline = time.monotonic() + 120
        while True:  # the scheduler is up when its port accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or scheduler.poll() is not None:
                    raise RuntimeError("dask scheduler did not start") from None
                time.sleep(0.2)
        workers = subprocess.Popen([sys.executable, "-m", "dask", "worker", address,
                                    "--host", "127.0.0.1", "--nworkers", "2", "--nthreads", "1",
                                    "--no-dashboard"], **quiet)
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            assert all(w.startswith("tcp://127.0.0.1:") for w in client.nthreads())
            for dtype in ("float64", "float32"):
                ref_losses, ref = run(gdist.Local, CASES["mlp"][0], bname, dtype)
                losses, t = run(gdist.DataParallel, CASES["mlp"][0], bname, dtype,
                                client=client, placement=round_robin, submit_seed=5)
                assert losses == ref_losses and bits(t.params) == bits(ref.params), dtype
            ran = [s["microbatches"] for s in client.run(gdist.worker_stats).values()]
            assert len(ran) == 2 and all(n > 0 for n in ran)
    finally:
        for proc in (workers, scheduler):
            if proc is not None:
                _stop(proc)
        quiet["stdout"].close()
        print("\n".join(log.read_text().splitlines()[-40:]))
