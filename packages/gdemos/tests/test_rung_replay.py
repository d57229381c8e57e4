"""Rung 2: the captured AE step replayed on a device lands on the CPU tape's bits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gdemos import ae, cli, rung_ae
from gtensor.testing import bits_equal


def _device(bname: str) -> str:
    return "cuda" if bname == "cuda" else "sim"


def test_replay_engine_is_bit_equal_to_the_cpu_tape(bname):
    cfg = ae.AEConfig(backend=_device(bname), engine="replay", epochs=2)
    got = ae.train(cfg)
    want = ae.train(ae.AEConfig(epochs=2))
    assert bits_equal(np.array(got.losses), np.array(want.losses))
    assert got.epoch_mse == want.epoch_mse and got.initial_mse == want.initial_mse
    assert all(bits_equal(a, b) for a, b in zip(got.params, want.params))
    assert rung_ae.cpu_tape_bar(got)[0] is True


@pytest.mark.parametrize("engine", ["replay", "fused"])
def test_fma_contract_runs_are_bit_equal_across_engines(bname, engine):
    """The AE under the fma contract: replayed and fused on a device, on the cpu tape, and
    the numpy tape (the exact fma emulation) land on one set of bits; plain lands elsewhere."""
    want = ae.train(ae.AEConfig(epochs=1, inner="fma"))
    got = ae.train(ae.AEConfig(backend=_device(bname), engine=engine, epochs=1, inner="fma"))
    assert bits_equal(np.array(got.losses), np.array(want.losses))
    assert all(bits_equal(a, b) for a, b in zip(got.params, want.params))
    assert rung_ae.cpu_tape_bar(got)[0] is True
    if bname in ("numpy", "cpu"):
        cpu = ae.train(ae.AEConfig(backend="cpu", epochs=1, inner="fma"))
        assert all(bits_equal(a, b) for a, b in zip(cpu.params, want.params))
    plain = ae.train(ae.AEConfig(epochs=1))
    assert not all(bits_equal(a, b) for a, b in zip(plain.params, want.params))


def test_cpu_tape_bar_notices_a_changed_weight(bname):
    got = ae.train(ae.AEConfig(backend=_device(bname), engine="replay", epochs=1))
    got.params[2] = np.nextafter(got.params[2], np.inf)  # one ulp on every element
    ok, nums = rung_ae.cpu_tape_bar(got)
    assert ok is False and "weights differing: [2]" in nums


def test_cli_replay_writes_the_bar(bname, tmp_path, capsys):
    rc = cli.main(["ae", "--engine", "replay", "--backend", _device(bname), "--epochs", "1",
                   "--out", str(tmp_path), "--no-progress", "--no-bars"])
    assert rc == 0
    summary = json.loads((tmp_path / "ae_summary.json").read_text())
    assert summary["engine"] == "replay" and summary["steps"] == 10
    assert summary["bars"]["weights==cpu tape"]["passed"] is True
    assert summary["bit_equal_steps"] == 10  # the plot's title counts these
    assert (tmp_path / "ae_loss.png").stat().st_size > 0
    assert "rung 2 replay" in capsys.readouterr().out


def test_bit_equal_steps_counts_bits():
    from gdemos import report

    a = [0.5, 0.25, 0.125, -0.0]
    b = [0.5, float(np.nextafter(0.25, 1.0)), 0.125, 0.0]  # one ulp, and -0.0 vs +0.0
    assert report.bit_equal_steps(a, a) == 4 and report.bit_equal_steps(a, b) == 2


def test_replay_needs_a_device_backend(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["ae", "--engine", "replay", "--backend", "numpy", "--no-progress"])
    assert e.value.code == 2
    assert "--engine replay runs on --backend sim or cuda or cpu" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is not a multiple of batch"):
        ae.train(ae.AEConfig(backend="sim", engine="replay", n=210, epochs=1))


def test_fused_engine_is_bit_equal_to_the_cpu_tape(bname, tmp_path, capsys):
    rc = cli.main(["ae", "--engine", "fused", "--backend", _device(bname), "--epochs", "1",
                   "--out", str(tmp_path), "--no-progress", "--no-bars"])
    assert rc == 0
    summary = json.loads((tmp_path / "ae_summary.json").read_text())
    assert summary["engine"] == "fused"
    assert summary["bars"]["weights==cpu tape"]["passed"] is True
    assert summary["bit_equal_steps"] == summary["steps"]
    assert "rung 4 fused" in capsys.readouterr().out
