"""``gdemos cnn --model resnet`` (rung 8b): a short run's bit checks -- the captured step
(BatchNorm's running statistics updated by the program) and the numpy tape land on the run's
digest, which covers the running statistics -- and the model's structure as torch's ResNet
(the full run's bar is the ladder's: docs/demos.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from gdemos import cli, cnn, rung_cnn

pytest.importorskip("sklearn", reason="gdemos cnn trains on sklearn's digits")

SHORT = cnn.CNNConfig(model="resnet", epochs=1, stop=8)  # 8 Adam steps: the tests' run


def test_short_run_checks_and_summary(bname, tmp_path):
    cfg = replace(SHORT, backend=bname)
    replay = None if bname == "numpy" else bname
    r = rung_cnn.run(cfg, tmp_path, progress=False, replay=replay, short=("numpy",))
    assert r.bits_equal and r.passed and not r.bar_binds
    assert [c["engine"] for c in r.checks] == (
        [] if bname == "numpy" else [f"replay-{bname}", "tape-numpy"])
    s = json.loads(r.summary_path.read_text())
    assert r.summary_path.name == "resnet_summary.json" and s["rung"] == "resnet"
    assert s["accuracy_bar"] == 0.98 and s["config"]["model"] == "resnet" and s["steps"] == 8
    names = list(r.result.params)
    assert "1.running_mean" in names and "4.shortcut.1.num_batches_tracked" in names
    assert int(r.result.params["1.num_batches_tracked"]) == 8


def test_digest_covers_the_running_statistics():
    """Two runs that differ only in the running statistics (eval-mode predictions never
    move them) differ in the digest."""
    tp = cnn.g.Tape()
    model = cnn.build(tp, SHORT, *cnn.keys(0)[::2])
    before = cnn.digest(model)
    x = cnn.digits(0)[0][:8]
    with tp.no_grad():
        model(tp.const(x))  # a training-mode forward: only the states move
    moved = cnn.digest(model)
    assert moved != before
    cnn.predict(tp, model, x)  # eval mode: nothing moves
    assert cnn.digest(model) == moved


def test_resnet_matches_torchs_resnet_blocks():
    """The model's names are a torch ResNet's (stem, BasicBlocks, projection shortcut, fc),
    and from_torch of the same torch tree gives the same forward (f64, 1e-13)."""
    torch = pytest.importorskip("torch")
    tp = cnn.g.Tape()
    model = cnn.build(tp, SHORT, *cnn.keys(0)[::2])
    sd = model.state_dict()
    assert [k for k in sd if k.startswith("4.")][:5] == [
        "4.conv1.weight", "4.bn1.weight", "4.bn1.bias", "4.bn1.running_mean",
        "4.bn1.running_var"]
    assert sd["4.shortcut.0.weight"].shape == (32, 16, 1, 1)
    net = cnn.torch_resnet(SHORT).double()
    net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in sd.items()})
    x = cnn.digits(0)[0][:16]
    mark = tp.mark()
    ours = model(tp.const(x)).numpy()
    tp.reset_to(mark)
    theirs = net(torch.from_numpy(x)).detach().numpy()
    assert np.max(np.abs(ours - theirs)) <= 1e-13 * np.max(np.abs(theirs))


def test_cli_takes_the_model(tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["cnn", "--model", "vgg", "--out", str(tmp_path)])
