"""``gdemos swarm``: runs end to end on a LocalCluster, reports, and exits 0 when verified."""

from __future__ import annotations

import json

import pytest
from gdemos.cli import main

pytest.importorskip("distributed", reason="rung 5 needs dask.distributed")


def test_swarm_command(tmp_path, capsys) -> None:
    code = main(["swarm", "--n", "600", "--iterations", "6", "--workers", "2",
                 "--partitions", "5", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "bitwise identical to the local tape run" in out
    assert "[dask] iteration   6/6" in out and "[local tape] iteration   6/6" in out
    s = json.loads((tmp_path / "swarm.json").read_text())
    assert s["bitwise_equal_to_local_tape"] is True and s["converged"] is True
    assert len(s["losses"]) == 6 and s["losses"][0] > 100 * s["final_loss"]
    assert s["max_param_error"] < 0.05
    assert (tmp_path / "swarm_loss.png").stat().st_size > 1000


def test_swarm_no_verify_exits_3(tmp_path) -> None:
    assert main(["swarm", "--n", "300", "--iterations", "6", "--workers", "1", "--no-verify",
                 "--no-progress", "--out", str(tmp_path)]) == 3


def test_rung_5_is_on_the_ladder() -> None:
    from gdemos import ladder

    assert "rung 5 swarm" in [name for name, _ in ladder.RUNGS]
