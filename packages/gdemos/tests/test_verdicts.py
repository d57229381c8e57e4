"""The ladder's verdicts: a missed bar is FAIL, an unchecked bar is SKIP (never PASS), exit codes.

The training result and the oracle are stubbed, so these tests take milliseconds.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from gdemos import ae, cli, ladder, rung_ae


class _Cfg:
    seed, n, noise, epochs, batch, lr, alpha = 0, 8, 0.0, 1, 4, 1e-3, 0.0
    backend, dtype = "numpy", "float64"


class _Result:
    """A stand-in for ae.AEResult with a chosen final MSE."""

    def __init__(self, final_mse: float) -> None:
        self.config = _Cfg()
        self.final_mse = final_mse
        self.initial_mse = 0.3
        self.steps = 600
        self.seconds = 0.1
        self.losses = [0.3, final_mse]
        self.epoch_mse = [final_mse]

    def summary(self) -> dict:
        return {"final_mse": self.final_mse}


def _oracle(monkeypatch, sk_mse: float | None) -> None:
    """Make the sklearn oracle return ``sk_mse``, or be missing (ImportError) when None."""
    import gdemos.oracles as oracles

    if hasattr(rung_ae, "_SKLEARN"):  # rung_ae caches the oracle's answer per configuration
        monkeypatch.setattr(rung_ae, "_SKLEARN", {})
    if sk_mse is not None:
        monkeypatch.setattr(oracles, "sklearn_ae_mse", lambda *a, **k: sk_mse)
        return
    _no_oracle(monkeypatch)


def _no_oracle(monkeypatch) -> None:
    """Importing gdemos.oracles (scikit-learn) fails, as without the oracle extra."""
    real_import = builtins.__import__

    def no_oracle(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "oracles" and level == 1 or name == "gdemos.oracles":
            raise ImportError("No module named 'sklearn'")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_oracle)


@pytest.mark.parametrize("final,sk,want", [
    (5e-5, 6e-5, {"mse<=1e-4": True, "mse<=sklearn": True}),
    (5e-5, 4e-5, {"mse<=1e-4": True, "mse<=sklearn": False}),
    (2e-4, 3e-4, {"mse<=1e-4": False, "mse<=sklearn": True}),
    (1e-4, 1e-4, {"mse<=1e-4": True, "mse<=sklearn": True}),  # the bars are inclusive
    (5e-5, None, {"mse<=1e-4": True, "mse<=sklearn": None}),
    (2e-4, None, {"mse<=1e-4": False, "mse<=sklearn": None}),
])
def test_check_bars_states(monkeypatch, final, sk, want):
    _oracle(monkeypatch, sk)
    monkeypatch.setattr(rung_ae.data, "manifold", lambda *a: None)
    bars = rung_ae.check_bars(_Result(final))
    assert {k: ok for k, (ok, _) in bars.items()} == want, bars
    assert ae.MSE_BAR == 1e-4
    if sk is None:
        nums = bars["mse<=sklearn"][1]
        assert "not checked" in nums and "pip install 'packages/gdemos[oracle]'" in nums, nums


def test_bar_words_and_lists():
    bars = {"a": (True, ""), "b": (False, ""), "c": (None, "")}
    assert [rung_ae.bar_word(ok) for ok, _ in bars.values()] == ["ok", "MISSED", "SKIP"]
    assert rung_ae.missed(bars) == ("b",)
    assert rung_ae.unchecked(bars) == ("c",)


@pytest.mark.parametrize("passed,unchecked,status", [
    (True, (), "PASS"), (True, ("mse<=sklearn",), "SKIP"), (False, (), "FAIL"),
    (False, ("mse<=sklearn",), "FAIL"),  # a missed bar is FAIL even with another unchecked
])
def test_verdict_status_and_line(passed, unchecked, status):
    v = ladder.Verdict("rung 9 x", passed, "numbers", unchecked)
    assert v.status == status
    assert v.line() == f"{status} rung 9 x: numbers"


def _stub_rung(monkeypatch, tmp_path: Path, final: float, sk: float | None) -> None:
    """Rung 1 with a stubbed training result and oracle (no training, no plot)."""
    _oracle(monkeypatch, sk)
    monkeypatch.setattr(rung_ae.data, "manifold", lambda *a: None)
    stub = lambda cfg, bar=None: _Result(final)  # noqa: E731
    monkeypatch.setattr(rung_ae.ae, "train", stub)
    if hasattr(rung_ae, "train"):  # rung_ae's own (caching) train wrapper
        monkeypatch.setattr(rung_ae, "train", stub)
    monkeypatch.setattr(rung_ae.report, "plot_losses", lambda path, *a, **k: path)
    monkeypatch.setattr(ladder, "RUNGS", [r for r in ladder.RUNGS if r[0] == "rung 1 ae"])


@pytest.mark.parametrize("final,sk,status,code", [
    (5e-5, 6e-5, "PASS", 0),
    (5e-5, 4e-5, "FAIL", 1),  # missed sklearn's bar
    (2e-4, 3e-4, "FAIL", 1),  # missed the MSE bar
    (5e-5, None, "SKIP", 3),  # sklearn missing: not verified, never PASS
    (2e-4, None, "FAIL", 1),
])
def test_ladder_verdict_and_exit_code(monkeypatch, tmp_path, capsys, final, sk, status, code):
    _stub_rung(monkeypatch, tmp_path, final, sk)
    rc = cli.main(["ladder", "--out", str(tmp_path), "--no-progress"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == code, lines
    assert lines[0].startswith(f"{status} rung 1 ae: "), lines
    if status == "SKIP":
        assert "mse<=sklearn SKIP" in lines[0], lines
        assert "not fully verified" in lines[1] and "packages/gdemos[oracle]" in lines[1], lines
    summary = json.loads((tmp_path / "ae" / "ae_summary.json").read_text())
    assert summary["bars"]["mse<=sklearn"]["checked"] is (sk is not None), summary


@pytest.mark.parametrize("final,sk,code,word", [
    (5e-5, 6e-5, 0, "ok"), (5e-5, 4e-5, 1, "MISSED"), (5e-5, None, 3, "SKIP"),
])
def test_ae_command_exit_code_on_the_binding_run(monkeypatch, tmp_path, capsys, final, sk, code,
                                                 word):
    _stub_rung(monkeypatch, tmp_path, final, sk)
    assert cli.main(["ae", "--out", str(tmp_path), "--no-progress"]) == code
    assert f"bar mse<=sklearn: {word}" in capsys.readouterr().out


def test_ladder_exit_codes_over_several_rungs(capsys):
    p = ladder.Verdict("r1", True, "")
    s = ladder.Verdict("r2", True, "", ("bar",))
    f = ladder.Verdict("r3", False, "")
    assert cli.ladder_exit([p, p]) == cli.EXIT_PASS == 0
    assert cli.ladder_exit([p, s]) == cli.EXIT_UNVERIFIED == 3
    assert cli.ladder_exit([p, s, f]) == cli.EXIT_FAIL == 1
    assert cli.ladder_exit([f]) == 1
    assert cli.ladder_exit([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ladder: 2/2 rungs passed"
    assert out[1].startswith("ladder: 2/2 rungs passed; not fully verified: 1 with unchecked")
    assert out[2].startswith("ladder: 2/3 rungs passed")


def test_a_raising_rung_is_fail(monkeypatch, tmp_path, capsys):
    def boom(out, backend, progress):
        raise ValueError("no data")

    monkeypatch.setattr(ladder, "RUNGS", [("rung X", boom)])
    assert cli.main(["ladder", "--out", str(tmp_path), "--no-progress"]) == 1
    assert capsys.readouterr().out.splitlines()[0] == "FAIL rung X: raised ValueError: no data"
