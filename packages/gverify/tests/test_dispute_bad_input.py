"""Bad input never makes a wrong ruling: malformed, truncated, oversized, slow or vanishing
answers make an audit inconclusive (exit 2) with the reason; answers that contradict the
commitment make the trainer lose; the server refuses what lies outside its run directory;
tampered verdicts make the referee inconclusive. (Trainer and auditor on numpy: this is
about the wire, not the engine.)"""

from __future__ import annotations

import asyncio
import json
import os
import re

import numpy as np
import pytest
from aiohttp import web
from gverify import commit, faults, server, wire
from gverify import verdict as vfile
from gverify.audit import audit
from gverify.example_task import ExampleTask
from gverify.referee import referee
from gverify.remote import Remote, TransportError

TASK = ExampleTask({"steps": 8})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    out = {"honest": root / "honest", "drill": root / "drill"}
    commit.record_run(out["honest"], TASK, "numpy", 4)
    commit.record_run(out["drill"], TASK, "numpy", 4,
                      faults.Drill("ulp", 6, op="tanh", phase="forward"))
    return out


def tamper(pattern: str, action):
    """A middleware applying ``action(request, handler)`` to paths matching ``pattern``."""
    @web.middleware
    async def mw(request, handler):
        if re.fullmatch(pattern, request.path):
            return await action(request, handler)
        return await handler(request)
    return mw


def _audit(run_dir, *middlewares, timeout=60.0, **kw):
    with server.Server(run_dir, middlewares=middlewares) as srv:
        return audit(srv.url, "numpy", timeout=timeout, **kw)


async def _truncate(request, handler):
    resp = await handler(request)
    out = web.StreamResponse(headers={"Content-Type": resp.content_type})
    out.content_length = len(resp.body)
    await out.prepare(request)
    await out.write(resp.body[:len(resp.body) // 2])
    request.transport.close()
    return out


async def _pad(request, handler):
    resp = await handler(request)
    return web.Response(body=resp.body + b"\0" * (64 << 20), content_type=resp.content_type)


async def _slow(request, handler):
    await asyncio.sleep(3.0)
    return await handler(request)


async def _vanish(request, handler):
    request.transport.close()
    return web.Response()


async def _not_json(request, handler):
    return web.Response(text="{not json", content_type="application/json")


async def _reshape(request, handler):
    resp = await handler(request)
    arr = wire.unpack_array(resp.body)
    return web.Response(body=wire.pack_array(arr.astype(np.float32).reshape(-1)[:1]),
                        content_type="application/octet-stream")


async def _flip_array(request, handler):
    resp = await handler(request)
    arr = wire.unpack_array(resp.body).copy()
    arr.reshape(-1).view(np.uint64)[0] ^= np.uint64(1)
    return web.Response(body=wire.pack_array(arr), content_type="application/octet-stream")


async def _flip_child(request, handler):
    resp = await handler(request)
    got = json.loads(resp.body)
    h = got["right"]["hash"]
    got["right"]["hash"] = ("0" if h[0] != "0" else "1") + h[1:]
    return web.json_response(got)


@pytest.mark.parametrize("name, pattern, action, match", [
    ("truncated", r"/v1/steps/\d+/state", _truncate, "Payload|payload|closed|Disconnect"),
    ("oversized", r"/v1/steps/\d+/state", _pad, "is .* bytes; at most"),
    ("vanishing", r"/v1/steps/\d+/trace", _vanish, "Disconnect|closed|Connection"),
    ("not json", r"/v1/commitment", _not_json, "not JSON"),
    ("reshaped", r"/v1/steps/\d+/trace/arrays/\d+", _reshape,
     "float32 \\(1,\\); the commitment's graph says float64"),
])
def test_malformed_answers_are_inconclusive(runs, name, pattern, action, match):
    v, _ = _audit(runs["drill"], tamper(pattern, action))
    assert v["outcome"] == "inconclusive", v
    assert re.search(match, v["reason"]), v["reason"]
    assert vfile.EXIT[v["outcome"]] == 2


def test_a_trainer_too_slow_or_gone_is_inconclusive(runs):
    v, _ = _audit(runs["drill"], tamper(r"/v1/steps/\d+/trace", _slow), timeout=0.5)
    assert v["outcome"] == "inconclusive" and "timed out" in v["reason"], v
    with server.Server(runs["honest"]) as srv:
        url = srv.url
    v, _ = audit(url, "numpy", timeout=5.0)  # nobody listens there any more
    assert v["outcome"] == "inconclusive" and "Connect" in v["reason"], v


@pytest.mark.parametrize("pattern, action, kind", [
    (r"/v1/steps/\d+/trace/arrays/\d+", _flip_array, "array"),
    (r"/v1/steps/tree", _flip_child, "children"),
    (r"/v1/steps/\d+/trace/tree", _flip_child, "children"),
])
def test_answers_contradicting_the_commitment_lose(runs, tmp_path, pattern, action, kind):
    v, blobs = _audit(runs["drill"], tamper(pattern, action))
    assert (v["outcome"], v["phase"], v["failure"]["kind"]) == ("dispute", "proof", kind), v
    path = vfile.write(tmp_path / "v.json", v, blobs)
    assert referee(path)["ruling"] == "auditor"


def test_the_server_refuses_what_lies_outside_its_run_dir(runs, tmp_path):
    run = tmp_path / "escape"
    run.mkdir()
    for f in (commit.COMMITMENT, commit.RECORDS, commit.TRAINER):
        (run / f).write_bytes((runs["drill"] / f).read_bytes())
    (run / "checkpoints").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    for k in (0, 4, 8):  # the checkpoints are links pointing out of the run directory
        os.symlink(runs["drill"] / commit.checkpoint_name(k), run / commit.checkpoint_name(k))
    with server.Server(run) as srv, Remote(srv.url, timeout=60.0) as r:
        with pytest.raises(TransportError, match="500 .*outside the run directory"):
            r.bytes("/v1/steps/3/state", 1 << 20)
        for path, code in (("/v1/steps/..%2F..%2Fetc/state", "400"),
                           ("/v1/steps/../../etc/passwd", "404"),
                           ("/v1/steps/-1/state", "400"), ("/v1/steps/99/state", "404"),
                           ("/v1/steps/leaves?ids=" + ",".join(["1"] * 65), "400"),
                           ("/v1/steps/tree?lo=0&hi=3", "400"), ("/etc/passwd", "404")):
            with pytest.raises(TransportError, match=f"answered {code}"):
                r.bytes(path, 1 << 20)
        v, _ = audit(srv.url, "numpy", timeout=60.0)
    assert v["outcome"] == "inconclusive" and "outside the run directory" in v["reason"], v


def test_the_server_refuses_bodies_and_other_methods(runs):
    import urllib.error
    import urllib.request

    with server.Server(runs["honest"]) as srv:
        for data, method, code in ((b"x" * 10, "GET", 413), (b"", "POST", 405)):
            req = urllib.request.Request(srv.url + "/v1/commitment", data=data or None,
                                         method=method)
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            assert e.value.code == code


def test_a_run_dir_without_a_log_is_refused(runs, tmp_path):
    run = tmp_path / "nolog"
    run.mkdir()
    for f in (commit.COMMITMENT, commit.TRAINER):
        (run / f).write_bytes((runs["honest"] / f).read_bytes())
    with pytest.raises(commit.RunDirError, match="has no records.jsonl"):
        server.Server(run).start()
    with pytest.raises(commit.RunDirError, match="has no commitment.json"):
        server.Server(tmp_path).start()
    (run / commit.RECORDS).write_bytes((runs["honest"] / commit.RECORDS).read_bytes()[:-10])
    with pytest.raises(commit.RunDirError, match="truncated"):
        server.Server(run).start()
    with pytest.raises(FileExistsError, match="not empty"):
        commit.record_run(run, TASK)


def test_a_commitment_this_install_cannot_audit_is_inconclusive(runs):
    for edit, match in (
            (lambda c: c["spec"].update(task="nope"), "no task 'nope'"),
            (lambda c: c["identity"].update(dtype="float32"), "identity"),
            (lambda c: c["spec"]["config"].update(n=10 ** 9), "config n")):
        com = json.loads((runs["honest"] / commit.COMMITMENT).read_text())
        edit(com)
        with server.Server(runs["honest"], middlewares=(tamper(
                r"/v1/commitment", lambda rq, h, c=com: _json(c)),)) as srv:
            v, _ = audit(srv.url, "numpy", timeout=60.0)
        assert v["outcome"] == "inconclusive" and match in v["reason"], v


async def _json(obj):
    return web.json_response(obj)


def test_tampered_verdicts_are_inconclusive(runs, tmp_path):
    with server.Server(runs["drill"]) as srv:
        v, blobs = audit(srv.url, "numpy", timeout=60.0)
    assert v["phase"] == "forward"
    good = vfile.write(tmp_path / "good.json", v, blobs)
    assert referee(good)["ruling"] == "auditor"

    def variant(name, edit):
        w = vfile.read(good)
        edit(w)
        p = vfile.write(tmp_path / f"{name}.json", w, blobs)
        return referee(p)

    leaf = str(v["leaf"])
    r = variant("path", lambda w: w["proofs"]["trace"]["proved"][leaf]["path"].reverse())
    assert r["ruling"] == "inconclusive" and "does not verify" in r["reason"]
    r = variant("digest", lambda w: w["proofs"]["trace"]["proved"][leaf]["leaf"].update(
        digest="0" * 64))
    assert r["ruling"] == "inconclusive"
    r = variant("root", lambda w: w["commitment"].update(root="1" * 64))
    assert r["ruling"] == "inconclusive"
    r = variant("node", lambda w: w.update(node=999))
    assert r["ruling"] == "inconclusive" and "proves no trace leaf" in r["reason"]
    r = variant("nostep", lambda w: w.pop("step"))
    assert r["ruling"] == "inconclusive" and "malformed" in r["reason"]
    some = next(iter(v["evidence"]["arrays"].values()))
    r = variant("evidence", lambda w: w["evidence"]["arrays"].update(
        {k: v["evidence"]["trainer_array"] for k in w["evidence"]["arrays"]}))
    assert r["ruling"] == "inconclusive" and "does not hash" in r["reason"]
    (vfile.evidence_dir(good) / f"{some}.bin").write_bytes(b"damaged")
    r = referee(good)
    assert r["ruling"] == "inconclusive" and "damaged" in r["reason"]
    (tmp_path / "junk.json").write_text("{")
    assert referee(tmp_path / "junk.json")["ruling"] == "inconclusive"
    assert referee(tmp_path / "missing.json")["ruling"] == "inconclusive"
