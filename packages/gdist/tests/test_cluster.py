"""DataParallel on real LocalClusters of 1, 2 and 3 worker processes: bitwise Local for two
models, f64 and f32, shuffled submission order and any placement; the model built once per
worker process; a raising loss_fn surfaced with the step not applied; bad input refused
before any task is sent."""

from __future__ import annotations

import logging

import gdist
import numpy as np
import pytest
from gdist_models import CASES, mlp_case, mlp_ce, mlp_ce_boom

distributed = pytest.importorskip("distributed")

DTYPES = ["float64", "float32"]
# placement(microbatch index, sorted worker addresses) -> address
PLACEMENTS = {
    "dask": None,  # Dask's own choice
    "round_robin": lambda i, ws: ws[i % len(ws)],
    "reversed": lambda i, ws: ws[::-1][i % len(ws)],
    "last_worker": lambda i, ws: ws[-1],
}
VARIANTS = {name: {"placement": p} for name, p in PLACEMENTS.items()}
VARIANTS["driver_tree"] = {"placement": PLACEMENTS["round_robin"], "tree_on": "driver"}


def bits(params: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in params.items()}


def trainer(cls, name: str, bname: str, dtype: str, **kw):
    loss_fn, case, m, opt, okw, extra = CASES[name]
    init, batches = case()
    return cls(loss_fn, init, opt, okw, microbatch=m, backend=bname, dtype=dtype,
               **extra, **kw), batches


@pytest.fixture(scope="module")
def reference(bname):
    """Local runs of every (model, dtype): the losses and params after each step."""
    out = {}
    for name in CASES:
        for dtype in DTYPES:
            t, batches = trainer(gdist.Local, name, bname, dtype)
            out[name, dtype] = [(t.step(b), bits(t.params)) for b in batches]
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


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_bitwise_equal_to_local(client, reference, bname, name, dtype, variant) -> None:
    seed = sorted(VARIANTS).index(variant)  # a different submission shuffle each
    t, batches = trainer(gdist.DataParallel, name, bname, dtype, client=client,
                         submit_seed=seed, **VARIANTS[variant])
    for step, (b, (loss, params)) in enumerate(zip(batches, reference[name, dtype])):
        got = t.step(b)
        assert got == loss, f"step {step}: loss {got!r} vs Local {loss!r}"
        assert bits(t.params) == params, f"step {step}: params differ from Local"
    assert all(v.dtype == np.dtype(dtype) for v in t.params.values())


def test_model_built_once_per_worker_process(client, bname) -> None:
    """A fresh model (its own key) spread over every worker: each builds it exactly once."""
    init, batches = mlp_case(seed=7)  # different shapes from any other test: a new key
    init = {k: np.concatenate([v, v[:, :1]], axis=1) if k == "W2" else v
            for k, v in init.items()}
    init["b2"] = np.zeros((1, 4))
    before = client.run(gdist.worker_stats)
    t = gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname,
                           placement=PLACEMENTS["round_robin"])
    for b in batches:
        t.step(b)
    after = client.run(gdist.worker_stats)
    assert set(after) == set(before)
    for addr in after:
        assert after[addr]["builds"] - before[addr]["builds"] == 1, (addr, before, after)
        assert after[addr]["microbatches"] > before[addr]["microbatches"]
    assert sum(a["microbatches"] - before[w]["microbatches"] for w, a in after.items()) == 18


def test_a_raising_loss_fn_surfaces_and_the_step_is_not_applied(client, bname) -> None:
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
    assert bits(t.state_dict()) == before and t.steps == 1 and t.optimizer.t == 1
    ref = gdist.Local(mlp_ce, init, microbatch=4, backend=bname)
    for b in batches[:2]:
        ref.step(b)
    t.step(ok[1])  # the trainer goes on as if the failed step had never been tried
    assert t.digest() == ref.digest()


def test_bad_input_is_refused_before_any_task_is_sent(client, bname, monkeypatch) -> None:
    init, batches = mlp_case()
    t = gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname)
    t.step(batches[0])
    sent = []
    real = client.submit
    monkeypatch.setattr(client, "submit", lambda *a, **k: sent.append(a) or real(*a, **k))
    b = batches[1]
    for batch, msg in [({"x": b["x"][:21], "y": b["y"][:21]}, "B = 21 rows"),
                       ({"x": b["x"]}, r"missing \['y'\]"),
                       ({**b, "z": b["y"]}, r"unknown \['z'\]")]:
        with pytest.raises(ValueError, match=msg):
            t.step(batch)
    with pytest.raises(ValueError, match="has shape"):
        t.set_params({**t.params, "W1": np.zeros((7, 16))})
    nowhere = gdist.DataParallel(mlp_ce, init, microbatch=4, client=client, backend=bname,
                                 placement=lambda i, ws: "tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match=r"placement\(0, workers\) returned 'tcp://127.0.0.1:1'"):
        nowhere.step(b)
    assert sent == []
    t.step(b)
    assert len(sent) == 1 + 6 + 5  # params, 6 microbatches, 5 tree nodes
