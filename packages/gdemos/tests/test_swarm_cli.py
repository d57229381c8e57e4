"""``gdemos swarm``: runs end to end on a LocalCluster, reports, and exits 0 when verified."""

from __future__ import annotations

import json

import gtensor
import pytest
from gdemos.cli import main

pytest.importorskip("distributed", reason="rung 5 needs dask.distributed")


def test_swarm_command(tmp_path, capfd) -> None:
    code = main(["swarm", "--n", "600", "--iterations", "6", "--workers", "2",
                 "--partitions", "5", "--out", str(tmp_path)])
    captured = capfd.readouterr()  # the fd: Dask's log handler writes there
    out, err = captured.out, captured.err
    assert code == 0, out
    assert "bitwise identical to the local tape run" in out
    # progress goes to stderr; off a terminal only every 10th iteration and the last
    assert "[dask] iteration   6/6" in err and "iteration   5/6" not in err
    assert f"[local tape, {gtensor.host_backend()}] iteration   6/6" in err  # --backend auto
    assert "distributed." not in err  # Dask's own logging is quiet without --verbose
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


def test_swarm_on_an_existing_scheduler_with_a_sim_reference(tmp_path, capsys) -> None:
    """--scheduler ADDRESS uses a running cluster; --backend sim runs the reference tape on
    sim: still bitwise."""
    from gdemos.swarm_dask import local_cluster

    cluster, client = local_cluster(1)
    try:
        code = main(["swarm", "--scheduler", cluster.scheduler_address, "--n", "200",
                     "--iterations", "3", "--backend", "sim", "--out", str(tmp_path)])
    finally:
        client.close()
        cluster.close()
    out = capsys.readouterr().out
    assert "bitwise identical to the local tape run (sim)" in out and code in (0, 1), out
    s = json.loads((tmp_path / "swarm.json").read_text())
    assert s["bitwise_equal_to_local_tape"] is True and s["reference_backend"] == "sim"
    assert f"the cluster at {cluster.scheduler_address}" in s["engine_desc"]


def test_verbose_lets_dask_logging_through(tmp_path, capfd) -> None:
    from gdemos import swarm_dask

    try:
        main(["swarm", "--n", "300", "--iterations", "2", "--workers", "1", "--out",
              str(tmp_path), "--verbose"])  # too few iterations to converge: the code is 1
    finally:
        swarm_dask.set_verbose(False)
    assert " - distributed." in capfd.readouterr().err  # Dask writes to the fd, not sys.stderr
