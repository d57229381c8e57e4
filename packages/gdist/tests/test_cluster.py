"""DataParallel on real LocalClusters of 1, 2 and 3 worker processes: bitwise Local for two
models, f64 and f32, any placement, submission order, resident data or rows, the tree on the
workers or on the driver; the tiny GPT (dropout, AdamW with groups, torch's clip, a cosine
schedule) over 1, 2, 3 workers; a model built once per worker; the replicas' digest check
catching a perturbed replica; a raising loss_fn surfaced with the step not applied; bad input
refused before anything is sent; workers that differ from the driver and a factory that is
not deterministic refused at start."""

from __future__ import annotations

import logging
import os

import gdist
import numpy as np
import pytest
from gdist import links, shared
from gdist.cluster import Replicas
from gdist_models import (
    CASES,
    gpt_case,
    gpt_trainer,
    mlp_case,
    mlp_ce,
    mlp_ce_boom,
    unseeded_factory,
)

distributed = pytest.importorskip("distributed")

DTYPES = ["float64", "float32"]
KERNELS = ("sim", "cpu", "cuda")
STEPS = 6  # the 3 batches of a case, twice: as rows, then as indices into resident data


def bits(params: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in params.items()}


class Rotating:
    """A placement that changes every step: contiguous, round-robin, reversed, all on the last
    worker (a placement is called once per microbatch, in order)."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0

    def __call__(self, i: int, ws: list[str]) -> str:
        step, self.calls = self.calls // self.k, self.calls + 1
        n = len(ws)
        return [ws[i * n // self.k], ws[i % n], ws[::-1][i % n], ws[-1]][step % 4]


def trainer(cls, name: str, bname: str, dtype: str, **kw):
    loss_fn, case, m, opt, okw, extra = CASES[name]
    init, batches = case()
    return cls(loss_fn, init, opt, okw, microbatch=m, backend=bname, dtype=dtype,
               **extra, **kw), batches


def run(t, batches) -> list:
    """STEPS steps: the batches as rows, then the same batches as resident row indices."""
    out = [(t.step(b), bits(t.params)) for b in batches]
    data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    t.load_data(data)
    rows = len(batches[0][next(iter(data))])
    for j in range(len(batches)):
        out.append((t.step(np.arange(j * rows, (j + 1) * rows)), bits(t.params)))
    return out


@pytest.fixture(scope="module")
def reference(bname):
    """Local runs of every (model, dtype): the losses and params after each step."""
    out = {}
    for name in CASES:
        for dtype in DTYPES:
            t, batches = trainer(gdist.Local, name, bname, dtype)
            out[name, dtype] = run(t, batches)
    return out


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"{n}workers")
def client(request):
    cluster = distributed.LocalCluster(n_workers=request.param, threads_per_worker=1,
                                       processes=True, dashboard_address=None,
                                       silence_logs=logging.ERROR)
    client = distributed.Client(cluster)
    client.wait_for_workers(request.param, timeout=120)
    yield client
    client.close()
    cluster.close()


def counted_run(client, reference, bname: str, what: str, **kw) -> tuple:
    """The mlp (f64) trained on DataParallel with ``kw``, bitwise ``Local`` at every step
    (``what`` names the run in a failure); (the trainer, the workers' counters' changes)."""
    before = client.run(gdist.worker_stats)
    t, batches = trainer(gdist.DataParallel, "mlp", bname, "float64", client=client, **kw)
    for step, (got, want) in enumerate(zip(run(t, batches), reference["mlp", "float64"])):
        assert got == want, f"{what}: step {step} differs from Local"
    after = client.run(gdist.worker_stats)
    return t, {k: {w: after[w][k] - before[w][k] for w in after}
               for k in ("adds", "shared_values", "socket_values")}


def two(client) -> None:
    if len(client.nthreads()) != 2:
        pytest.skip("runs on the 2-worker cluster")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_bitwise_equal_to_local(client, reference, bname, name, dtype) -> None:
    k = {"mlp": 6, "tanh": 3}[name]  # microbatches per batch
    before = client.run(gdist.worker_stats)
    t, batches = trainer(gdist.DataParallel, name, bname, dtype, client=client,
                         placement=Rotating(k), submit_seed=7, check_every=2)
    for step, (got, want) in enumerate(zip(run(t, batches), reference[name, dtype])):
        assert got[0] == want[0], f"step {step}: loss {got[0]!r} vs Local {want[0]!r}"
        assert got[1] == want[1], f"step {step}: params differ from Local"
    assert all(v.dtype == np.dtype(dtype) for v in t.params.values())
    after = client.run(gdist.worker_stats)
    for addr in after:  # one model per worker, built once; every worker computed
        assert after[addr]["builds"] - before[addr]["builds"] == 1, (addr, before, after)
        assert after[addr]["microbatches"] > before[addr]["microbatches"]
    ran = sum(a["microbatches"] - before[w]["microbatches"] for w, a in after.items())
    assert ran == STEPS * k
    assert t.optimizer.t == STEPS and t.steps == STEPS
    t.close()


def test_two_replicas_both_add_the_root(client, reference, bname) -> None:
    """On two replicas the root's children swap and both replicas add the root (no root
    message; the same addition, the same bits): k additions a step in all (the tree's k - 1,
    the root twice), each replica bitwise Local at every step (digests compared each step)."""
    two(client)
    k = 6  # contiguous holders [0, 0, 0, 1, 1, 1]: the root's children on replicas 0 and 1
    t, moved = counted_run(client, reference, bname, "two replicas", check_every=1)
    adds = moved["adds"]
    assert sum(adds.values()) == STEPS * k, adds
    assert all(v >= STEPS for v in adds.values()), adds  # each replica added the root
    t.close()


def gpt_run(client, bname: str, combo: str, steps: int) -> None:
    """The tiny GPT (dropout in three modules, AdamW with groups, torch's clip, cosine with
    warmup) on the cluster, step by step bitwise Local; the replicas capture their step on
    kernel backends (Local stays eager)."""
    dtype, inner = combo.split("-")
    batches = gpt_case(steps=steps)
    ref = gpt_trainer(gdist.Local, bname, dtype, inner)
    want = [(ref.step(b), bits(ref.params)) for b in batches]
    t = gpt_trainer(gdist.DataParallel, bname, dtype, inner, client=client,
                    capture=bname in KERNELS, check_every=3)
    for step, (b, (loss, params)) in enumerate(zip(batches, want)):
        assert t.step(b) == loss, f"step {step}"
        assert bits(t.params) == params, f"step {step}"
    assert want[-1][0] < want[0][0]
    t.close()


@pytest.mark.parametrize("combo", ["float64-plain", "float32-fma"])
def test_tiny_gpt_with_dropout_is_bitwise_local(client, bname, combo) -> None:
    two(client)
    gpt_run(client, bname, combo, 6)


@pytest.mark.slow
@pytest.mark.parametrize("combo", ["float64-plain", "float64-fma", "float32-plain",
                                   "float32-fma"])
def test_tiny_gpt_twenty_steps_every_combination(client, bname, combo) -> None:
    gpt_run(client, bname, combo, 20)


def test_tree_on_the_driver(client, bname) -> None:
    two(client)
    ref, batches = trainer(gdist.Local, "mlp", bname, "float64")
    t, _ = trainer(gdist.DataParallel, "mlp", bname, "float64", client=client,
                   tree_on="driver", placement=lambda i, ws: ws[i % len(ws)])
    for b in batches:
        assert t.step(b) == ref.step(b)
    assert t.digest() == ref.digest()
    t.close()


def test_the_digest_check_catches_a_perturbed_replica(client, bname) -> None:
    two(client)
    t, batches = trainer(gdist.DataParallel, "mlp", bname, "float64", client=client,
                         check_every=2)
    t.step(batches[0])
    t.step(batches[1])  # checked: equal
    run_id, victim = t._replicas.run, t.workers[1]

    def perturb(run_id: str) -> None:
        from gdist import service

        model = service._RUNS[run_id].model
        values = model.values()
        values["b1"] = np.nextafter(values["b1"], np.inf)  # one ulp, one array
        model.set_values(values)

    client.run(perturb, run_id, workers=[victim])
    t.step(batches[2])  # not a check step: goes on
    with pytest.raises(gdist.ReplicaMismatch, match=rf"at step 3 the replica on {victim}"):
        t.step(batches[0])
    with pytest.raises(gdist.ReplicaMismatch, match="the run stopped"):
        t.step(batches[1])
    t.close()


def test_a_raising_loss_fn_surfaces_and_the_step_is_not_applied(client, bname) -> None:
    two(client)
    init, batches = mlp_case()
    t = gdist.DataParallel(mlp_ce_boom, init, microbatch=4, client=client, backend=bname,
                           submit_seed=1)
    ok = [{**b, "boom": np.zeros(24, np.int64)} for b in batches]
    t.step(ok[0])
    before = bits(t.state_dict())
    bad = {**ok[1], "boom": np.zeros(24, np.int64)}
    bad["boom"][13] = 1  # microbatch 3 (rows 12:16)
    with pytest.raises(RuntimeError, match="boom: this microbatch refuses") as e:
        t.step(bad)
    note = " ".join(getattr(e.value, "__notes__", []))
    assert "microbatch 3 (rows 12:16)" in note and "not applied" in note
    assert "the replica's traceback" in note and "in mlp_ce_boom" in note  # from the link
    assert bits(t.state_dict()) == before and t.steps == 1 and t.optimizer.t == 1
    ref = gdist.Local(mlp_ce, init, microbatch=4, backend=bname)
    for b in batches[:2]:
        ref.step(b)
    t.step(ok[1])  # the trainer goes on as if the failed step had never been tried
    assert t.digest() == ref.digest()
    t.close()


def test_both_transports_give_the_local_bits(client, reference, bname, monkeypatch) -> None:
    """A step's messages on direct links (tcp:// workers, the default) or on Dask's comms
    (``transport="dask"``): the same bits as Local, each transport used as asked."""
    two(client)
    ops = []
    real_send = links.Link.send
    monkeypatch.setattr(links.Link, "send",
                        lambda self, msg: ops.append(msg["op"]) or real_send(self, msg))
    for transport, direct in (("dask", False), ("direct", True), ("auto", True)):
        ops.clear()
        t, batches = trainer(gdist.DataParallel, "mlp", bname, "float32", client=client,
                             transport=transport, check_every=1)
        assert t._replicas.direct is direct
        for step, (got, want) in enumerate(zip(run(t, batches), reference["mlp", "float32"])):
            assert got == want, f"transport {transport!r}, step {step}: differs from Local"
        assert ops == (["step", "step"] * STEPS if direct else []), transport
        t.close()


def test_values_between_replicas_of_one_machine_go_through_shared_memory(client, reference,
                                                                        bname) -> None:
    """On links, tree values between replicas of one machine (here, all of them) go through
    shared memory by default and over the sockets with ``shared_memory=False``: the Local
    bits either way, every value counted where it went, the run's segments gone after
    close; the driver polling or sleeping for the replies changes no bit either."""
    n = len(client.nthreads())
    if n < 2:
        pytest.skip("no values travel between replicas on one worker")
    for shared_memory, how in ((True, "shared_values"), (False, "socket_values")):
        for reply_wait in ("poll", "sleep"):
            t, moved = counted_run(client, reference, bname,
                                   f"shared_memory={shared_memory}, {reply_wait}",
                                   check_every=2, shared_memory=shared_memory,
                                   reply_wait=reply_wait)
            run_id = t._replicas.run
            went = {k: sum(moved[k].values()) for k in ("shared_values", "socket_values")}
            assert went[how] >= STEPS and sum(went.values()) == went[how], went
            t.close()
            if shared.available():
                assert not [f for f in os.listdir(shared.ROOT) if run_id in f]
    # /dev/shm too small on the workers: every value goes on the sockets instead, same bits
    client.run(_outbox_full, True)
    try:
        t, moved = counted_run(client, reference, bname, "/dev/shm full", timeout=20.0)
        assert sum(moved["shared_values"].values()) == 0 < sum(moved["socket_values"].values())
        t.close()
    finally:
        client.run(_outbox_full, False)


def _outbox_full(full: bool) -> None:
    """On a worker: make (or stop making) every shared-memory put fail as a full /dev/shm."""
    import errno

    from gdist import service

    box = service._OUTBOX
    if not full:
        box.__dict__.pop("put", None)
        return

    def put(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    box.put = put


def test_workers_without_links_keep_dasks_comms(client, bname, monkeypatch) -> None:
    """Workers that offer no link (not tcp://: TLS, ...; here their replies stripped of it):
    "auto" steps on Dask's comms with the Local bits, "direct" is refused naming them."""
    two(client)
    real = Replicas._build

    async def linkless(self, addr, history_from=None):
        got = await real(self, addr, history_from)
        self.links[addr] = None
        return got

    monkeypatch.setattr(Replicas, "_build", linkless)
    t, batches = trainer(gdist.DataParallel, "tanh", bname, "float64", client=client)
    ref, _ = trainer(gdist.Local, "tanh", bname, "float64")
    assert not t._replicas.direct
    for b in batches:
        assert t.step(b) == ref.step(b)
    assert t.digest() == ref.digest()
    t.close()
    with pytest.raises(ValueError, match=r"transport='direct' needs tcp:// workers"):
        trainer(gdist.DataParallel, "tanh", bname, "float64", client=client,
                transport="direct")
    with pytest.raises(ValueError, match=r"transport is 'udp'; expected one of"):
        trainer(gdist.DataParallel, "tanh", bname, "float64", client=client, transport="udp")


def test_workers_in_one_process_are_refused(bname) -> None:
    """Two in-process workers would share one process's replica table: refused at start."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None, silence_logs=logging.ERROR) as cl, \
            distributed.Client(cl) as c:
        with pytest.raises(ValueError, match=r"are one process \(pid \d+\); a replica needs"):
            trainer(gdist.DataParallel, "tanh", bname, "float64", client=c)


def test_bad_input_is_refused_before_anything_is_sent(client, bname, monkeypatch) -> None:
    two(client)
    init, batches = mlp_case()
    t = gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname)
    t.step(batches[0])
    sent = []
    real = t._replicas.call

    async def spy(addr, call, **payload):
        sent.append(call)
        return await real(addr, call, **payload)

    monkeypatch.setattr(t._replicas, "call", spy)
    ops = []  # the driver's messages on the direct links
    real_send = links.Link.send
    monkeypatch.setattr(links.Link, "send",
                        lambda self, msg: ops.append(msg["op"]) or real_send(self, msg))
    b = batches[1]
    for batch, msg in [({"x": b["x"][:21], "y": b["y"][:21]}, "B = 21 rows"),
                       ({"x": b["x"]}, r"missing \['y'\]"),
                       ({**b, "z": b["y"]}, r"unknown \['z'\]"),
                       (np.arange(8), "no data is resident")]:
        with pytest.raises(ValueError, match=msg):
            t.step(batch)
    with pytest.raises(ValueError, match="has shape"):
        t.set_params({**t.params, "W1": np.zeros((7, 16))})
    with pytest.raises(ValueError, match=r"reply_wait is 'busy'; expected one of"):
        gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, reply_wait="busy")
    with pytest.raises(TypeError, match=r"shared_memory is .*; expected True or False"):
        gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, shared_memory="yes")
    sent.clear()  # t.params asked a replica
    nowhere = gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname,
                                 placement=lambda i, ws: "tcp://127.0.0.1:1")
    monkeypatch.setattr(nowhere._replicas, "call", spy)
    with pytest.raises(ValueError, match=r"placement\(0, workers\) returned 'tcp://127.0.0.1:1'"):
        nowhere.step(b)
    assert sent == [] and ops == []
    t.step(b)
    # one request per replica, on its direct link (tcp:// workers): the rest is between them
    assert sent == [] and ops == ["step", "step"]
    t.close()
    nowhere.close()


def test_workers_that_differ_and_random_factories_are_refused(client, bname) -> None:
    two(client)
    init, _ = mlp_case()
    victim = sorted(client.nthreads())[1]
    held = {a: s["replicas"] for a, s in client.run(gdist.worker_stats).items()}

    def patch(on: bool) -> None:
        from gdist import identity

        if on:
            identity._real = identity.sources_hash
            identity.sources_hash = lambda p: "0" * 64 if p == "gopt" else identity._real(p)
        else:
            identity.sources_hash = identity._real

    client.run(patch, True, workers=[victim])
    try:
        with pytest.raises(gdist.WorkerRefused, match=rf"worker at {victim} does not run what "
                                                      r"the driver runs \(gopt sources"):
            gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname)
    finally:
        client.run(patch, False, workers=[victim])
    with pytest.raises(ValueError, match="first digests differ.*not deterministic"):
        gdist.DataParallel(lambda tp, p, b: g_sum(p["w"]), unseeded_factory, microbatch=4,
                           client=client, backend=bname)
    assert {a: s["replicas"] for a, s in client.run(gdist.worker_stats).items()} == held


def g_sum(w):
    import gtape as g

    return g.sum(w)
