"""``gdemos dp``: Local and DataParallel on 1 and 2 workers reach one digest; report written."""

from __future__ import annotations

import json

import pytest
from gdemos.cli import main

pytest.importorskip("sklearn", reason="gdemos dp trains on sklearn's digits")


def test_dp_command(tmp_path, capfd) -> None:
    code = main(["dp", "--workers", "1,2", "--out", str(tmp_path)])
    out, err = capfd.readouterr()
    assert code == 0, out
    assert "local, dask 1 worker, dask 2 workers: all final digests equal" in out
    s = json.loads((tmp_path / "dp.json").read_text())
    runs = s["runs"]
    assert s["all_equal"] and s["passed"] and len(runs) == 3
    assert len({r["digest"] for r in runs.values()}) == 1
    assert len({tuple(r["losses"]) for r in runs.values()}) == 1
    ref = runs["local"]
    assert ref["losses"][0] > 4 * ref["losses"][-1] and ref["accuracy"] >= 0.9
    spread = runs["dask 2 workers"]["microbatches_per_worker"]
    assert sorted(spread.values()) == [60, 60]  # round-robin over both workers
    assert (tmp_path / "dp_loss.png").stat().st_size > 1000
    assert "distributed." not in err, err  # Dask's logs (workers' too) stay quiet


def test_dp_usage_errors(tmp_path) -> None:
    with pytest.raises(SystemExit, match="multiple of --microbatch"):
        main(["dp", "--batch", "100", "--microbatch", "24", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="expected e.g. 1,2,3"):
        main(["dp", "--workers", "two", "--out", str(tmp_path)])


def test_dp_is_on_the_ladder() -> None:
    from gdemos import dp, ladder

    assert dp.RUNG in [name for name, _ in ladder.RUNGS]
