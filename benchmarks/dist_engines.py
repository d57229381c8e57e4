"""The engines bench_dist_step.py times: gdist's Local and DataParallel, torch in one process,
and torch DDP (gloo) over two processes. Every engine runs ``block(n)``: n training steps on
its next batches, each step timed (ns); every process runs one compute thread.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from typing import Any

import numpy as np


class Ours:
    """A gdist trainer (Local or DataParallel) stepping on row indices into its resident
    data."""

    def __init__(self, trainer: Any, case: Any) -> None:
        self.t, self.case, self.i = trainer, case, 0
        trainer.load_data(case.rows)
        self.replica: list[dict] = []  # per step: each replica's seconds by part (DataParallel)

    def block(self, n: int) -> list[int]:
        """``n`` timed steps."""
        out = []
        for _ in range(n):
            idx = self.case.batches[self.i % len(self.case.batches)]
            self.i += 1
            t0 = time.perf_counter_ns()
            self.t.step(idx)
            out.append(time.perf_counter_ns() - t0)
            if getattr(self.t, "replica_seconds", None):
                self.replica.append(self.t.replica_seconds)
        return out

    def digest(self) -> str:
        """The params' sha256 (every gdist engine must end on the same one)."""
        return self.t.digest()

    def close(self) -> None:
        """Drop the replicas (DataParallel)."""
        if hasattr(self.t, "close"):
            self.t.close()


def _torch_parts(model: str, dtype: str, hidden: int) -> tuple:
    import dist_models
    import torch

    dt = {"float64": torch.float64, "float32": torch.float32}[dtype]
    torch.manual_seed(0)
    if model == "mlp":
        return (*dist_models.torch_mlp(hidden, dt), 5.0)
    return (*dist_models.torch_gpt(dt), 1.0)


def _tensors(case: Any, idx: np.ndarray, dtype: str) -> dict:
    import torch

    out = {}
    for k, a in case.rows.items():
        x = torch.from_numpy(np.ascontiguousarray(a[idx]))
        out[k] = x.to(getattr(torch, dtype)) if a.dtype.kind == "f" else x.long()
    return out


def _torch_steps(model: Any, loss: Any, opt: Any, clip: float, case: Any, dtype: str,
                 start: int, n: int, part: slice) -> list[int]:
    import torch

    out = []
    for j in range(start, start + n):
        idx = case.batches[j % len(case.batches)][part]
        b = _tensors(case, idx, dtype)
        t0 = time.perf_counter_ns()
        opt.zero_grad(set_to_none=True)
        loss(model, b).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        out.append(time.perf_counter_ns() - t0)
    return out


class TorchOne:
    """torch in this process, one thread, the whole batch per step."""

    def __init__(self, name: str, dtype: str, hidden: int, case: Any) -> None:
        import torch

        torch.set_num_threads(1)
        model, self.loss, make_opt, self.clip = _torch_parts(name, dtype, hidden)
        self.model, self.opt = model.train(), make_opt(model.parameters())
        self.case, self.dtype, self.i = case, dtype, 0

    def block(self, n: int) -> list[int]:
        """``n`` timed steps."""
        out = _torch_steps(self.model, self.loss, self.opt, self.clip, self.case, self.dtype,
                           self.i, n, slice(None))
        self.i += n
        return out

    def close(self) -> None:
        """Nothing to release."""


def _ddp_rank(rank: int, world: int, port: int, name: str, dtype: str, hidden: int,
              case: Any, conn: Any) -> None:
    """One DDP process: gloo, one thread; runs blocks of steps on its part of each batch."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model, loss, make_opt, clip = _torch_parts(name, dtype, hidden)
    ddp = torch.nn.parallel.DistributedDataParallel(model.train())
    opt = make_opt(ddp.parameters())
    per = case.batch // world
    part = slice(rank * per, (rank + 1) * per)
    i = 0
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        conn.send(_torch_steps(ddp, loss, opt, clip, case, dtype, i, msg, part))
        i += msg
    dist.destroy_process_group()


class TorchDDP:
    """torch DDP with the gloo backend: ``world`` processes of one thread each, each stepping
    on its 1/world of every batch (gradients all-reduced by DDP, each process stepping its own
    optimizer); rank 0's step times are reported."""

    def __init__(self, name: str, dtype: str, hidden: int, case: Any, world: int = 2) -> None:
        ctx = mp.get_context("spawn")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self.conns, self.procs = [], []
        for rank in range(world):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_ddp_rank, args=(rank, world, port, name, dtype, hidden,
                                                    case, b), daemon=True)
            p.start()
            self.conns.append(a)
            self.procs.append(p)
        for c in self.conns:
            if not c.poll(300) or c.recv() != "ready":
                raise RuntimeError("torch DDP: a rank did not start within 300 s")

    def block(self, n: int) -> list[int]:
        """``n`` timed steps (rank 0's times)."""
        for c in self.conns:
            c.send(n)
        got = [c.recv() for c in self.conns]
        return got[0]

    def close(self) -> None:
        """Stop the ranks."""
        for c in self.conns:
            c.send(None)
        for p in self.procs:
            p.join(timeout=60)
