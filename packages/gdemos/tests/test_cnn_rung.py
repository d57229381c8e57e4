"""``gdemos cnn`` (rung 8): a short run's outputs, its bit checks, the verdict's logic, the
split and the batch order (the full run's bar is the ladder's: docs/demos.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from gdemos import cli, cnn, ladder, rung_cnn

pytest.importorskip("sklearn", reason="gdemos cnn trains on sklearn's digits")

SHORT = cnn.CNNConfig(epochs=1, stop=30)  # 30 Adam steps: the tests' run


def test_split_is_stratified_and_seeded():
    xtr, ytr, xte, yte = cnn.digits(0)
    assert xtr.shape == (1437, 1, 8, 8) and xte.shape == (360, 1, 8, 8)
    assert ytr.dtype == np.int64 and 0.0 <= xtr.min() and xtr.max() <= 1.0
    counts = np.bincount(yte, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of each class (178..183 each)
    assert not np.array_equal(cnn.digits(1)[3], yte)


def test_batch_order_is_gtape_rng_and_full_batches():
    order = cnn.keys(0)[1]
    batches = cnn.batch_order(order, 3, 100, 32)
    assert [len(b) for b in batches] == [32, 32, 32]
    words = cnn.g.rng.bits(order.fold(3), 100)
    assert np.array_equal(np.concatenate(batches), np.argsort(words, kind="stable")[:96])
    assert not np.array_equal(cnn.batch_order(order, 4, 100, 32)[0], batches[0])


def test_short_run_writes_summary_plot_and_checks(bname, tmp_path):
    """The run's outputs; its bit checks on the session's engines (numpy always; the step
    replayed on the backend under test when it runs kernels)."""
    cfg = replace(SHORT, backend=bname)
    replay = None if bname == "numpy" else bname
    r = rung_cnn.run(cfg, tmp_path, progress=False, replay=replay, short=("numpy",))
    assert r.bits_equal and r.passed and not r.bar_binds
    engines = [c["engine"] for c in r.checks]
    assert engines == ([] if bname == "numpy" else [f"replay-{bname}", "tape-numpy"])
    s = json.loads(r.summary_path.read_text())
    for key in ("test_accuracy", "sha256_initial", "sha256_final", "seconds", "config",
                "epoch_loss", "epoch_accuracy", "misclassified", "checks"):
        assert key in s, key
    assert s["config"]["backend"] == bname and s["steps"] == 30
    assert s["sha256_initial"] != s["sha256_final"] and len(s["sha256_final"]) == 64
    assert s["test_accuracy"] > 0.2  # better than chance (0.1) after 30 steps
    assert np.mean(r.result.losses[-5:]) < np.mean(r.result.losses[:5])
    assert len(s["misclassified"]) == round(360 * (1 - s["test_accuracy"]))
    assert r.plot_path.read_bytes()[:4] == b"\x89PNG"


def test_initial_digest_is_the_same_on_every_backend(bname):
    """The initial weights are drawn from gtape.rng on the host: one digest everywhere."""
    a = cnn.train(replace(SHORT, stop=1, backend=bname))
    b = cnn.train(replace(SHORT, stop=1, backend="numpy"))
    assert a.sha256_initial == b.sha256_initial and a.sha256_final == b.sha256_final


def test_a_differing_check_fails_the_rung():
    r = rung_cnn.CNNRun(cnn.CNNResult(SHORT, 1, 0.0, "a", "b", 0.99), bar_binds=True)
    assert r.passed
    r.checks = [{"engine": "tape-sim", "steps": 20, "sha256": "c", "seconds": 0.0,
                 "equal": False}]
    assert not r.passed and "tape-sim (20 steps) DIFFERS" in r.verdict_detail()
    r.checks = []
    r.result.test_accuracy = cnn.ACCURACY_BAR  # the bar itself is met
    assert r.passed
    r.result.test_accuracy = 0.9694
    assert not r.passed and "bar 0.97 MISSED" in r.verdict_detail()
    r.bar_binds = False  # a shortened run: the bar does not bind
    assert r.passed and "bar not binding" in r.verdict_detail()


def test_cli_usage_errors(tmp_path):
    with pytest.raises(SystemExit, match="--epochs is 0; expected 1 to 1000"):
        cli.main(["cnn", "--epochs", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--seed is -2"):
        cli.main(["cnn", "--seed", "-2", "--out", str(tmp_path)])


def test_cnn_and_resnet_are_rungs_8_and_8b_on_the_ladder():
    names = [name for name, _ in ladder.RUNGS]
    assert names[-3:] == [cnn.RUNG, cnn.RESNET_RUNG, "rung 9 gpt"]
    assert cnn.RUNG == "rung 8 cnn" and cnn.RESNET_RUNG == "rung 8b resnet"
