"""Faults and real deployments: a worker SIGKILLed mid-step, mid-reduce and right after
applying a step, each replaced by a replica rebuilt from a survivor's checkpoint and log,
changes no bit; a run saved on 2 workers resumes on 3 with the bits of the uninterrupted run;
a cluster started as separate ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1,
reached by address as a user's cluster is, gives Local's bits; an unreachable scheduler is a
clear error within the connect timeout."""

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
from gdist_models import CASES, gpt_case, gpt_trainer

distributed = pytest.importorskip("distributed")
KERNELS = ("sim", "cpu", "cuda")


def bits(params: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in params.items()}


def mlp(cls, bname: str, dtype: str = "float64", **kw):
    loss_fn, case, m, opt, okw, extra = CASES["mlp"]
    init, batches = case()
    return cls(loss_fn, init, opt, okw, microbatch=m, backend=bname, dtype=dtype, **extra,
               **kw), batches


def test_sigkill_mid_step_mid_reduce_and_after_apply_then_resume_on_3(bname: str,
                                                                       tmp_path: Path) -> None:
    """Three drills on 2 replicas of a 6-worker cluster (a spare worker takes each lost
    replica's place, rebuilt from a survivor's checkpoint and log; spares are there from the
    start because a LocalCluster's nanny restarts are too slow and, now and then, closed by
    the cluster itself, so the 3 workers the resume needs are the 6 less the 3 killed): the
    run's losses and params stay Local's at every step. Then the
    tiny GPT (dropout) runs on 2 workers, is saved, and resumes on 3: the uninterrupted run's
    bits (its dropout keys follow the microbatch count across the resume)."""
    ref, batches = mlp(gdist.Local, bname)
    batches = batches * 2
    want = [(ref.step(b), bits(ref.params)) for b in batches]
    cluster = distributed.LocalCluster(n_workers=6, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(6, timeout=180)
        t, _ = mlp(gdist.DataParallel, bname, client=client, checkpoint_every=2,
                   check_every=1, replace_wait=60, capture=bname in KERNELS,
                   workers=sorted(client.nthreads())[:2])
        first = list(t.workers)
        # step 1: the second replica's worker dies computing a microbatch; step 3: the second
        # (holding the right half) dies after sending its partial sum, before the root
        # arrives; step 4: the first (the root's owner) dies right after applying
        drills = {1: ("leaf", 1), 3: ("reduce", 1), 4: ("apply", 0)}
        for step, (b, (loss, params)) in enumerate(zip(batches, want)):
            if step in drills:
                point, rank = drills[step]
                client.run(gdist.faults.arm, point, step, workers=[t.workers[rank]])
            assert t.step(b) == loss, f"step {step}"
            assert bits(t.params) == params, f"step {step}"
            assert len(t.workers) == 2, f"step {step}: {t.workers}"
        assert not set(t.workers) & set(first), "the drills did not replace both workers"
        t.close()

        gpt = gpt_case(steps=4)
        ref = gpt_trainer(gdist.Local, bname)
        want = [ref.step(b) for b in gpt]
        ws = sorted(client.nthreads())
        assert len(ws) >= 3, f"the resume needs 3 live workers; the cluster has {ws}"
        u = gpt_trainer(gdist.DataParallel, bname, client=client, workers=ws[:2])
        assert [u.step(b) for b in gpt[:2]] == want[:2]
        u.save(tmp_path / "ckpt.npz")
        u.close()
        v = gpt_trainer(gdist.DataParallel, bname, client=client, capture=bname in KERNELS,
                        workers=ws[-3:])
        assert len(v.workers) == 3
        v.load(tmp_path / "ckpt.npz")
        assert v.steps == 2
        assert [v.step(b) for b in gpt[2:]] == want[2:]
        assert bits(v.params) == bits(ref.params)
        v.close()
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
                ref, batches = mlp(gdist.Local, bname, dtype)
                want = [ref.step(b) for b in batches]
                t, _ = mlp(gdist.DataParallel, bname, dtype, client=address, submit_seed=5,
                           placement=lambda i, ws: ws[i % len(ws)], check_every=1)
                assert [t.step(b) for b in batches] == want, dtype
                assert bits(t.params) == bits(ref.params), dtype
                t.close()
            ran = [s["microbatches"] for s in client.run(gdist.worker_stats).values()]
            assert len(ran) == 2 and all(n > 0 for n in ran)
    finally:
        for proc in (workers, scheduler):
            if proc is not None:
                _stop(proc)
        quiet["stdout"].close()
        print("\n".join(log.read_text().splitlines()[-40:]))


def test_an_unreachable_scheduler_is_a_clear_error_in_bounded_time(bname: str) -> None:
    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"cannot reach the Dask scheduler at "
                                              rf"'{address}' within 2 s"):
        mlp(gdist.DataParallel, bname, client=address, connect_timeout=2)
    assert time.monotonic() - t0 < 60
