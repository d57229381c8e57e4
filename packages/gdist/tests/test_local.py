"""gdist without Dask: the tree, the checks, and Local against independent oracles (a plain
tape + gopt loop; per-microbatch tapes summed by hand)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gdist
import gopt
import gtape as g
import numpy as np
import pytest
from gdist import tree
from gdist.replica import add
from gdist_models import CASES, mlp_case, mlp_ce, returns_non_scalar, tanh_case, tanh_reg


def bits(params: dict) -> dict:
    return {k: np.asarray(v).tobytes() for k, v in params.items()}


def local(name: str, bname: str, dtype: str = "float64", **kw):
    loss_fn, case, m, opt, okw, extra = CASES[name]
    init, batches = case()
    t = gdist.Local(loss_fn, init, opt, okw, microbatch=kw.pop("microbatch", m),
                    backend=bname, dtype=dtype, **{**extra, **kw})
    return t, batches


# ---------------------------------------------------------------- the tree
def test_tree_plan_is_pairwise_by_index() -> None:
    assert tree.plan(1) == [] and tree.root(1) == 0
    assert tree.plan(2) == [(2, 0, 1)]
    assert tree.plan(3) == [(3, 0, 1), (4, 3, 2)]
    assert tree.plan(6) == [(6, 0, 1), (7, 2, 3), (8, 4, 5), (9, 6, 7), (10, 9, 8)]
    assert [tree.depth(k) for k in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    for k in range(2, 20):  # every leaf used once, the root last
        used = [x for _, a, b in tree.plan(k) for x in (a, b)]
        assert sorted(used) == list(range(k)) + list(range(k, tree.root(k)))


def test_tree_reduce_is_the_written_expression() -> None:
    leaves = [f"g{i}" for i in range(5)]
    assert tree.reduce(leaves, lambda a, b: f"({a}+{b})") == "(((g0+g1)+(g2+g3))+g4)"
    with pytest.raises(ValueError, match="k is 0"):
        tree.plan(0)


def test_tree_order_matters_so_it_is_fixed() -> None:
    """For these values the pairwise tree and the serial sum differ: the tree is a choice."""
    xs = [np.float64(v) for v in (1.0, 1e16, -1e16, 1.0)]
    assert tree.reduce(xs, lambda a, b: a + b) != ((xs[0] + xs[1]) + xs[2]) + xs[3]


# ---------------------------------------------------------------- independent oracles
def test_one_microbatch_equals_a_plain_tape_and_gopt_loop(bname: str) -> None:
    """m = B (one microbatch): Local is exactly tape.backward + Adam.step (L2 and clip on)."""
    init, batches = mlp_case()
    t = gdist.Local(mlp_ce, init, gopt.Adam, {"lr": 1e-2}, microbatch=24, backend=bname,
                    l2={"W1": 1e-3}, clip=0.5)
    tp = g.Tape(bname)
    ps = {k: tp.param(v) for k, v in init.items()}
    opt = gopt.Adam(tp, lr=1e-2)
    for k, p in ps.items():
        opt.add(p, 1e-3 if k == "W1" else 0.0)
    opt.set_clip(0.5)
    mark = tp.mark()
    for b in batches:
        loss = mlp_ce(tp, ps, {"x": tp.const(b["x"]), "y": b["y"]})
        tp.backward(loss)
        want = float(tp.backend.to_numpy(tp.value(loss)))
        opt.step()
        tp.reset_to(mark)
        assert t.step(b) == want
    assert bits(t.params) == bits({k: tp.backend.to_numpy(tp.value(p)) for k, p in ps.items()})


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_batch_gradient_is_the_tree_of_microbatch_gradients(bname: str, dtype: str) -> None:
    """k = 5 microbatches: the batch gradient is (((g0+g1)+(g2+g3))+g4) / 5, each g_i from its
    own fresh tape (numpy's + and / are the same IEEE operations as the backend's add, div)."""
    init, batches = tanh_case(rows=25)
    t = gdist.Local(tanh_reg, init, gopt.SGD, {"lr": 0.1}, microbatch=5, backend=bname,
                    dtype=dtype)
    b = batches[0]
    loss = t.step(b)
    gs, ls = [], []
    for i in range(5):
        tp = g.Tape(bname, dtype)
        ps = {k: tp.param(v) for k, v in init.items()}
        rows = {k: tp.const(v[5 * i:5 * i + 5]) for k, v in b.items()}
        li = tanh_reg(tp, ps, rows)
        tp.backward(li)
        gs.append({k: tp.backend.to_numpy(tp.grad(p)) for k, p in ps.items()})
        ls.append(tp.backend.to_numpy(tp.value(li)))
    five = np.asarray(5, dtype)
    want = {k: (((gs[0][k] + gs[1][k]) + (gs[2][k] + gs[3][k])) + gs[4][k]) / five for k in init}
    assert bits(t.grads) == bits(want)
    assert all(v.dtype == np.dtype(dtype) for v in t.grads.values())
    assert loss == float((((ls[0] + ls[1]) + (ls[2] + ls[3])) + ls[4]) / five)


def test_reduce_sum_skips_the_division(bname: str) -> None:
    init, batches = tanh_case(rows=20)
    mean = gdist.Local(tanh_reg, init, gopt.SGD, {"lr": 0.1}, microbatch=5, backend=bname)
    total = gdist.Local(tanh_reg, init, gopt.SGD, {"lr": 0.1}, microbatch=5, backend=bname,
                        reduce="sum")
    lm, ls = mean.step(batches[0]), total.step(batches[0])
    assert ls == lm * 4  # k = 4: dividing by 4 is exact
    assert bits({k: v / 4 for k, v in total.grads.items()}) == bits(mean.grads)


@pytest.mark.parametrize("name", sorted(CASES))
def test_two_runs_and_fresh_process_caches_agree(bname: str, name: str) -> None:
    a, batches = local(name, bname)
    b, _ = local(name, bname)
    for batch in batches:
        assert a.step(batch) == b.step(batch)
    assert a.digest() == b.digest() and a.steps == 3


def test_sums_into_an_operand_keep_the_fresh_sums_bits() -> None:
    """``add(left, right, out)`` (the tree's sums into an operand it owns) gives a fresh sum's
    bits, the operands in their order: NaN payloads, -0.0 + 0.0, subnormals, inf - inf."""
    qa = np.array([0x7FF8000000000001, 0x8000000000000000, 1, 0x7FF0000000000000, 5],
                  np.uint64).view(np.float64)
    qb = np.array([0x7FF8000000000002, 0, 1, 0xFFF0000000000000, 0x7FF8000000000003],
                  np.uint64).view(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: the NaN is part of what is compared
        want = add((np.float64(1.0), {"w": qa}), (np.float64(2.0), {"w": qb}))
    for into in ("left", "right"):
        left, right = (np.float64(1.0), {"w": qa.copy()}), (np.float64(2.0), {"w": qb.copy()})
        out = left if into == "left" else right
        with np.errstate(invalid="ignore"):
            got = add(left, right, out)
        assert got[1]["w"] is out[1]["w"], into  # no new array
        assert got[1]["w"].tobytes() == want[1]["w"].tobytes(), into
        assert got[0] == want[0]


class _Peers:
    """Two replicas' sends and waits in one process (mailboxes): sends either copy the value
    out before returning (True, as the links do) or keep it for later (False, as Dask's comms
    do); every value sent or received is remembered with its bits."""

    def __init__(self, copies: bool) -> None:
        from gdist.service import Mailbox

        self.boxes, self.copies, self.seen = [Mailbox(), Mailbox()], copies, []

    def send(self, me: int):
        def send(node, to, value):
            kept = (value[0], {n: a.copy() for n, a in value[1].items()}) if self.copies \
                else value
            self.seen.append((f"{me}->{to} {node}", kept, bits(kept[1])))
            self.boxes[to].put(1, node, kept)
            return self.copies
        return send

    def wait(self, me: int):
        return lambda node: self.boxes[me].wait(1, node, 30)


@pytest.mark.parametrize("copies", [True, False], ids=["sends-copy", "sends-later"])
def test_a_share_never_sums_into_a_received_value_or_one_a_send_still_reads(
        bname: str, copies: bool) -> None:
    """Two replicas' shares of one step in threads (holders [0, 0, 0, 1, 1, 1]: replica 1
    sends its block's sum, replica 0 the root's left child to its twin): every value that
    travelled keeps its bits through both shares, and both land on Local's bits."""
    import threading

    from gdist import allreduce
    from gdist.service import Plan

    ref, batches = local("mlp", bname)
    b = {"x": np.concatenate([batches[0]["x"]] * 2)[:24], "y": np.concatenate(
        [batches[0]["y"]] * 2)[:24]}
    ref.step(b)
    reps = [local("mlp", bname)[0]._rep for _ in range(2)]
    holders = (0, 0, 0, 1, 1, 1)
    plan = Plan(0, 1, 0, 6, holders, ("a", "b"), "workers", False, None, None, 30.0)
    parts = [{i: {k: v[4 * i:4 * i + 4] for k, v in b.items()} for i in range(6)
              if holders[i] == r} for r in range(2)]
    peers, errors = _Peers(copies), []

    def run(r: int) -> None:
        try:
            allreduce.share(reps[r], plan, r, parts[r], peers.send(r), peers.wait(r))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(s[0] for s in peers.seen) == ["0->1 9", "1->0 3", "1->0 8"]
    for what, value, before in peers.seen:
        assert bits(value[1]) == before, f"{what}: a travelled value was summed into"
    for r in reps:
        assert r.digest() == ref.digest()


def test_a_scalar_parameter_trains_and_loads(bname: str) -> None:
    """A 0-d parameter (a learnt offset): its gradient written, set_params and a state round
    trip keep it 0-d."""

    def loss(tp, params, batch):
        return g.mean((params["w"] * batch["x"] + params["s"] - batch["y"]) ** 2)

    rng = np.random.default_rng(0)
    t = gdist.Local(loss, {"w": np.ones(3), "s": np.array(0.5)}, gopt.Adam, {"lr": 1e-2},
                    microbatch=2, backend=bname)
    batch = {"x": rng.standard_normal((4, 3)), "y": rng.standard_normal((4, 3))}
    t.step(batch)
    assert t.params["s"].shape == () and t.params["s"] != 0.5
    t.set_params({"w": np.zeros(3), "s": np.array(1.5)})
    assert t.params["s"] == 1.5
    state = t.state_dict()
    t.step(batch)
    t.load_state_dict(state)
    assert t.params["s"] == 1.5 and t.params["s"].shape == ()


# ---------------------------------------------------------------- refusals
def test_bad_batches_are_refused_and_change_nothing(bname: str) -> None:
    t, batches = local("mlp", bname)
    t.step(batches[0])
    before = bits(t.state_dict())
    b = batches[1]
    cases = [
        ({"x": b["x"][:22], "y": b["y"][:22]}, ValueError, r"B = 22 rows.*microbatch = 4"),
        ({"x": b["x"]}, ValueError, r"missing \['y'\]"),
        ({**b, "z": b["x"]}, ValueError, r"unknown \['z'\]"),
        ({"x": b["x"], "y": b["y"][:20]}, ValueError, "has 20 rows"),
        ({"x": b["x"].astype(str), "y": b["y"]}, TypeError, "expected real numbers"),
        ({"x": b["x"][:0], "y": b["y"][:0]}, ValueError, "B = 0"),
        ([b["x"]], TypeError, "expected a non-empty dict"),
    ]
    for batch, err, msg in cases:
        with pytest.raises(err, match=msg) as e:
            t.step(batch)
        assert "gdist.Local.step: " in str(e.value)
    assert bits(t.state_dict()) == before and t.steps == 1


def test_bad_definitions_are_refused(bname: str) -> None:
    init, _ = mlp_case()
    ok = dict(microbatch=4, backend=bname)
    with pytest.raises(ValueError, match="microbatch is 0"):
        gdist.Local(mlp_ce, init, gopt.Adam, microbatch=0)
    with pytest.raises(ValueError, match="backend is 'gpu'"):
        gdist.Local(mlp_ce, init, gopt.Adam, microbatch=4, backend="gpu")
    with pytest.raises(TypeError, match="expected a gopt optimizer class"):
        gdist.Local(mlp_ce, init, "adam", **ok)
    with pytest.raises(TypeError, match="refused"):
        gdist.Local(mlp_ce, init, gopt.Adam, {"learning_rate": 1}, **ok)
    with pytest.raises(ValueError, match=r"l2 names \['W9'\]"):
        gdist.Local(mlp_ce, init, gopt.Adam, l2={"W9": 1.0}, **ok)
    with pytest.raises(TypeError, match="init_params is"):
        gdist.Local(mlp_ce, {}, gopt.Adam, **ok)
    with pytest.raises(TypeError, match="dtype is 'float16'"):
        gdist.Local(mlp_ce, init, gopt.Adam, dtype="float16", **ok)
    with pytest.raises(ValueError, match="reduce is 'max'"):
        gdist.Local(mlp_ce, init, gopt.Adam, reduce="max", **ok)
    with pytest.raises(TypeError, match="expected a dask.distributed.Client"):
        gdist.DataParallel(mlp_ce, init, gopt.Adam, client=None, **ok)

    class FakeClient:
        def submit(self, *a, **k):
            raise AssertionError("nothing may be submitted")

    with pytest.raises(ValueError, match="tree_on is 'scheduler'"):
        gdist.DataParallel(mlp_ce, init, gopt.Adam, client=FakeClient(), tree_on="scheduler",
                           **ok)
    with pytest.raises(TypeError, match="cannot be pickled"):
        gdist.DataParallel(lambda tp, p, b, _lock=__import__("threading").Lock(): None, init,
                           gopt.Adam, client=FakeClient(), **ok)


def test_params_of_the_wrong_shape_are_refused(bname: str) -> None:
    t, _ = local("mlp", bname)
    before = bits(t.params)
    p = t.params
    with pytest.raises(ValueError, match=r"params\['W1'\] has shape \(8, 15\); expected \(8, 16\)"):
        t.set_params({**p, "W1": p["W1"][:, :15]})
    with pytest.raises(ValueError, match=r"missing \['b2'\]"):
        t.set_params({k: v for k, v in p.items() if k != "b2"})
    assert bits(t.params) == before
    t.set_params({k: v + 1 for k, v in p.items()})
    assert bits(t.params) == bits({k: v + 1 for k, v in p.items()})


def test_a_loss_that_is_not_a_scalar_is_named(bname: str) -> None:
    init, batches = mlp_case()
    t = gdist.Local(returns_non_scalar, init, gopt.Adam, microbatch=4, backend=bname)
    with pytest.raises(TypeError, match=r"loss_fn returned \(4, 16\); expected a scalar"):
        t.step(batches[0])
    assert t.steps == 0 and t.optimizer.t == 0


# ---------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_and_refusals(bname: str, tmp_path: Path) -> None:
    t, batches = local("mlp", bname)
    t.step(batches[0])
    t.save(tmp_path / "a.npz")
    u, _ = local("mlp", bname)
    u.load(tmp_path / "a.npz")
    assert bits(u.state_dict()) == bits(t.state_dict()) and u.steps == 1
    assert t.step(batches[1]) == u.step(batches[1]) and t.digest() == u.digest()
    other, _ = local("mlp", bname, microbatch=8)
    before = bits(other.state_dict())
    with pytest.raises(ValueError, match="microbatch is 4; this trainer's is 8"):
        other.load(tmp_path / "a.npz")
    state = t.state_dict()
    state["param.W1"] = state["param.W1"][:, :3]
    with pytest.raises(ValueError, match=r"has shape \(8, 3\)"):
        u.load_state_dict(state)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a checkpoint"):
        u.load(tmp_path / "junk.npz")
    assert bits(other.state_dict()) == before
    with np.load(tmp_path / "a.npz", allow_pickle=False) as f:  # plain arrays, no objects
        assert all(f[k].dtype != object for k in f.files)


RESUME = """
import sys, numpy as np, gdist
sys.path.insert(0, {tests!r})
from gdist_models import CASES
loss_fn, case, m, opt, okw, extra = CASES["mlp"]
init, batches = case()
t = gdist.Local(loss_fn, init, opt, okw, microbatch=m, backend={bname!r}, **extra)
t.load({path!r})
for b in batches[1:]:
    t.step(b)
np.savez({out!r}, **t.params)
"""


def test_resume_in_a_new_process_is_bitwise_the_uninterrupted_run(bname: str,
                                                                   tmp_path: Path) -> None:
    full, batches = local("mlp", bname)
    for b in batches:
        full.step(b)
    part, _ = local("mlp", bname)
    part.step(batches[0])
    part.save(tmp_path / "ckpt.npz")
    code = RESUME.format(tests=str(Path(__file__).parent), bname=bname,
                         path=str(tmp_path / "ckpt.npz"), out=str(tmp_path / "out.npz"))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    with np.load(tmp_path / "out.npz", allow_pickle=False) as f:
        resumed = {k: f[k] for k in f.files}
    assert bits(resumed) == bits(full.params)


def test_int_rows_pass_as_numpy_and_float_rows_as_consts(bname: str) -> None:
    seen = {}

    def spy(tp, params, batch):
        seen.update({k: type(v).__name__ for k, v in batch.items()})
        return mlp_ce(tp, params, batch)

    init, batches = mlp_case()
    gdist.Local(spy, init, gopt.Adam, microbatch=4, backend=bname).step(batches[0])
    assert seen == {"x": "Var", "y": "ndarray"}


def test_public_names_exist() -> None:
    assert all(hasattr(gdist, n) for n in gdist.__all__)


def test_the_fma_contract_reaches_the_workers_tapes(bname: str, tmp_path: Path) -> None:
    """inner="fma": Local is the fma tape + gopt loop bit for bit (not the plain one), and a
    checkpoint of one contract is refused by a trainer of the other (nothing changes)."""
    init, batches = mlp_case()

    def tape_loop(inner: str) -> dict:
        tp = g.Tape(bname, inner=inner)
        ps = {k: tp.param(v) for k, v in init.items()}
        opt = gopt.Adam(tp, lr=1e-2)
        opt.add(list(ps.values()))
        mark = tp.mark()
        for b in batches:
            tp.backward(mlp_ce(tp, ps, {"x": tp.const(b["x"]), "y": b["y"]}))
            opt.step()
            tp.reset_to(mark)
        return bits({k: tp.backend.to_numpy(tp.value(p)) for k, p in ps.items()})

    t = gdist.Local(mlp_ce, init, gopt.Adam, {"lr": 1e-2}, microbatch=24, backend=bname,
                    inner="fma")
    assert t.inner == "fma"
    for b in batches:
        t.step(b)
    assert bits(t.params) == tape_loop("fma") != tape_loop("plain")
    t.save(tmp_path / "fma.npz")
    other = gdist.Local(mlp_ce, init, gopt.Adam, {"lr": 1e-2}, microbatch=24, backend=bname)
    before = bits(other.params)
    with pytest.raises(ValueError, match=r"inner-product contract is 'fma'; this trainer's is "
                                         r"'plain'"):
        other.load(tmp_path / "fma.npz")
    assert bits(other.params) == before
    with pytest.raises(ValueError, match=r"inner is 'x'; expected one of"):
        gdist.Local(mlp_ce, init, gopt.Adam, {"lr": 1e-2}, microbatch=24, inner="x")


# ---------------------------------------------------------------- factories, keys, capture
KERNELS = ("sim", "cpu", "cuda")


def test_a_factory_with_dropout_in_one_microbatch_is_a_plain_tape_loop(bname: str) -> None:
    """m = B: Local is the loop a user writes -- the factory on Tape(seed=5), AdamW with
    torch-style groups, torch's clip, a cosine schedule, Dropout layers drawing fold(step)."""
    import gopt
    from gdist_models import TinyGPT, gpt_case, gpt_groups, gpt_loss, gpt_trainer

    batches = gpt_case(steps=4)
    t = gpt_trainer(gdist.Local, bname, microbatch_override=6)
    tp = g.Tape(bname, seed=5)
    model = TinyGPT(tp)
    named = dict(model.named_parameters())
    groups = [{**grp, "params": [named[n] for n in grp["params"]]} for grp in gpt_groups()]
    opt = gopt.AdamW(groups, lr=3e-2, betas=(0.9, 0.95))
    opt.set_clip(0.5, rule="torch")
    sched = gopt.schedules.cosine(opt, total_steps=20, warmup_steps=3)
    for b in batches:
        with tp.episode():
            loss = gpt_loss(tp, model, b)
            tp.backward(loss)
            opt.step()
            sched.step()
            want = float(tp.backend.to_numpy(tp.value(loss)))
        assert t.step(b) == want
    assert bits(t.params) == bits({n: tp.backend.to_numpy(tp.value(v)) for n, v in named.items()})
    assert t.optimizer.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_dropout_keys_follow_the_microbatch_count_across_a_resume(bname: str,
                                                                  tmp_path: Path) -> None:
    from gdist_models import gpt_case, gpt_trainer

    batches = gpt_case(steps=3)
    full = gpt_trainer(gdist.Local, bname)
    losses = [full.step(b) for b in batches]
    part = gpt_trainer(gdist.Local, bname)
    part.step(batches[0])
    part.save(tmp_path / "gpt.npz")
    again = gpt_trainer(gdist.Local, bname)
    again.load(tmp_path / "gpt.npz")
    assert [again.step(b) for b in batches[1:]] == losses[1:]
    assert again.digest() == full.digest()
    other = gpt_trainer(gdist.Local, bname, seed_override=6)
    with pytest.raises(ValueError, match="the checkpoint's seed is 5; this trainer's is 6"):
        other.load(tmp_path / "gpt.npz")


def test_the_captured_step_is_the_eager_step(bname: str) -> None:
    from gdist_models import gpt_case, gpt_trainer

    if bname not in KERNELS:
        with pytest.raises(ValueError, match="capture=True needs a kernel backend"):
            local("mlp", bname, capture=True)
        return
    for name in sorted(CASES):
        runs = []
        for capture in (False, True):
            t, batches = local(name, bname, capture=capture)
            runs.append([t.step(b) for b in batches * 2] + [t.digest()])
        assert runs[0] == runs[1], name
    batches = gpt_case(steps=4)
    runs = []
    for capture in (False, True):
        t = gpt_trainer(gdist.Local, bname, dtype="float32", inner="fma", capture=capture)
        runs.append([t.step(b) for b in batches] + [t.digest()])
    assert runs[0] == runs[1]
    assert t._rep.model.engine is not None  # it did capture


def shifted(tp, params, batch):
    """A target computed from the batch in numpy inside loss_fn: not capturable."""
    return mlp_ce(tp, params, {"x": batch["x"], "y": (batch["y"] + 1) % 3})


def branchy(tp, params, batch):
    """Different ops for different data: not capturable."""
    loss = mlp_ce(tp, params, batch)
    return loss * 2.0 if batch["y"][0] == 2 else loss


def test_what_cannot_be_captured_is_refused(bname: str) -> None:
    if bname not in KERNELS:
        pytest.skip("capture needs a kernel backend")
    init, batches = mlp_case()
    # capture probes the first two microbatches (rows 0-3 and 4-7): branchy must branch apart
    assert batches[0]["y"][0] == 2 != batches[0]["y"][4]
    for fn, msg in [(shifted, "changes with the data but matches no batch entry"),
                    (branchy, "records different ops for two microbatches")]:
        t = gdist.Local(fn, init, gopt.Adam, microbatch=4, backend=bname, capture=True)
        with pytest.raises(gdist.CaptureRefused, match=msg):
            for b in batches:
                t.step(b)


def test_keys_from_the_tape_stream_in_loss_fn_are_refused(bname: str) -> None:
    def drawing(tp, params, batch):
        h = g.dropout(batch["x"] @ params["W1"], 0.5, tp.next_key())
        return g.cross_entropy(g.relu(h + params["b1"]) @ params["W2"] + params["b2"],
                               batch["y"])

    init, batches = mlp_case()
    t = gdist.Local(drawing, init, gopt.Adam, microbatch=4, backend=bname)
    with pytest.raises(RuntimeError, match="took keys from the tape's key stream"):
        t.step(batches[0])
    assert t.steps == 0


def test_resident_data_and_its_refusals(bname: str) -> None:
    a, batches = local("mlp", bname)
    b, _ = local("mlp", bname)
    data = {k: np.concatenate([x[k] for x in batches]) for k in batches[0]}
    with pytest.raises(ValueError, match="no data is resident"):
        b.step(np.arange(24))
    b.load_data(data)
    for j, x in enumerate(batches):
        assert a.step(x) == b.step(np.arange(24 * j, 24 * j + 24)[::-1][::-1])
    assert a.digest() == b.digest()
    for idx, err, msg in [(np.arange(22), ValueError, "B = 22 rows"),
                          (np.array([0, 1, 2, 72]), ValueError, r"expected them in \[0, 72\)"),
                          (np.arange(8.0), TypeError, "1-d int array")]:
        with pytest.raises(err, match=msg):
            b.step(idx)
    assert b.steps == 3


def test_groups_set_lr_and_their_refusals(bname: str) -> None:
    init, batches = mlp_case()
    groups = [{"params": ["W1", "W2"], "weight_decay": 0.1}, {"params": ["b1", "b2"]}]
    t = gdist.Local(mlp_ce, init, gopt.AdamW, {"lr": 1e-2}, microbatch=4, backend=bname,
                    param_groups=groups)
    assert [grp["weight_decay"] for grp in t.optimizer.param_groups] == [0.1, 0.01]
    t.step(batches[0])
    before = bits(t.params)
    t.set_lr([0.0, 0.0])
    t.step(batches[1])  # AdamW's decay is lr * wd: no change at lr 0
    assert bits(t.params) == before
    t.step(batches[2])  # the groups keep the lr set (until a schedule moves it)
    assert bits(t.params) == before
    for bad, msg in [([{"params": ["W1", "W9"]}], r"names 'W9', which is not a parameter"),
                     ([{"params": ["W1", "b1", "W2", "b2"]}, {"params": ["W1"]}],
                      r"'W1' is in param_groups\[0\] and param_groups\[1\]"),
                     ([{"params": ["W1"]}], r"leave out \['b1', 'W2', 'b2'\]"),
                     ([{"lr": 1.0}], "expected a dict whose 'params'")]:
        with pytest.raises((ValueError, TypeError), match=msg):
            gdist.Local(mlp_ce, init, gopt.AdamW, microbatch=4, backend=bname,
                        param_groups=bad)
    with pytest.raises(ValueError, match="2 learning rates for 1 parameter groups"):
        local("mlp", bname)[0].set_lr([0.1, 0.2])


def test_the_replica_store_is_a_param_store() -> None:
    """A replica's parameters implement gtape.ParamStore (what gopt accepts)."""
    from gdist.store import GradStore
    from gtape.params import missing_members

    assert not missing_members(GradStore)
