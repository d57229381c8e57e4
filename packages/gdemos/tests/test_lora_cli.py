"""``gdemos lora`` and the ladder's rung 3: files written, verdict, options, errors."""

from __future__ import annotations

import json

import pytest
from gdemos import cli, ladder
from gdemos import lora_train as lt
from gdemos.qwen2 import Qwen2
from gdemos.qwen2_math import Qwen2Config


def test_lora_command_default_model(tmp_path, capsys):
    code = cli.main(["lora", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "merged model reproduced the text: yes" in out
    s = json.loads((tmp_path / "lora_summary.json").read_text())
    assert s["reproduced"] is True and s["steps"] == 60 and len(s["losses"]) == 60
    assert s["final_loss"] * 10 <= s["initial_loss"]
    assert s["text"] == lt.TEXT and s["generated"] == lt.TEXT  # shown side by side in the plot
    assert (tmp_path / "lora_loss.png").stat().st_size > 0
    back = Qwen2.from_pretrained(tmp_path / "merged")
    assert back.decode(back.generate(back.encode(lt.TEXT)[:4], 10)) == lt.TEXT[:14]


def test_lora_command_with_model_and_text(tmp_path, capsys):
    cfg = Qwen2Config(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      tie_word_embeddings=True)
    Qwen2.random(cfg, seed=4).save_pretrained(tmp_path / "m")
    (tmp_path / "t.txt").write_text("hello, hello")
    code = cli.main(["lora", "--model", str(tmp_path / "m"), "--text", str(tmp_path / "t.txt"),
                     "--steps", "2", "--rank", "2", "--alpha", "4", "--out",
                     str(tmp_path / "o"), "--no-progress"])
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "o" / "lora_summary.json").read_text())
    assert s["tokens"] == 12 and s["rank"] == 2 and len(s["losses"]) == 2
    assert code == (0 if s["reproduced"] and s["final_loss"] * 10 <= s["initial_loss"] else 1)
    assert "rung 3 lora:" in out


def test_lora_command_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):  # replay needs a kernel backend (sim, cuda or cpu)
        cli.main(["lora", "--engine", "replay", "--backend", "numpy", "--out", str(tmp_path),
                  "--no-progress"])
    assert "sim or cuda or cpu, got numpy" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--steps 0"):
        cli.main(["lora", "--steps", "0", "--out", str(tmp_path)])


def test_lora_command_replay_engine(tmp_path, capsys):
    pytest.importorskip("ggpu_replay")
    code = cli.main(["lora", "--engine", "replay", "--backend", "sim", "--steps", "2",
                     "--out", str(tmp_path), "--no-progress"])
    s = json.loads((tmp_path / "lora_summary.json").read_text())
    assert s["engine"] == "replay" and len(s["losses"]) == 2 and code == 1  # 2 steps: no pass
    assert "(replay)" in capsys.readouterr().out


def test_ladder_has_rung_3():
    assert "rung 3 lora" in [name for name, _ in ladder.RUNGS]
