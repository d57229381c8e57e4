"""The LoRA training graph replayed by ggpu-replay lands on the CPU tape's bits, step by step."""

from __future__ import annotations

import numpy as np
import pytest
from gdemos import lora_train as lt
from gdemos.qwen2 import Qwen2
from gdemos.qwen2_math import Qwen2Config
from gtensor.testing import bits_equal, first_difference

pytest.importorskip("ggpu_replay")

CFG = Qwen2Config(vocab_size=96, hidden_size=24, intermediate_size=40, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                  tie_word_embeddings=True)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_replay_bitwise_equal_to_tape(bname, dtype):
    device = "cuda" if bname == "cuda" else "sim"
    model = Qwen2.random(CFG, seed=1, dtype=dtype)
    ids = np.random.default_rng(2).integers(0, CFG.vocab_size, 10)
    cfg = lt.LoRAConfig(rank=2, alpha=4.0, steps=4, lr=1e-2)
    want, want_losses, want_final = lt.finetune(model, ids, cfg)
    got, got_losses, got_final = lt.finetune(
        model, ids, lt.LoRAConfig(**{**cfg.__dict__, "engine": "replay", "backend": device}))
    assert bits_equal(np.array(got_losses), np.array(want_losses)), first_difference(
        np.array(want_losses), np.array(got_losses))
    assert got_final == want_final
    for n in want.names():
        assert bits_equal(got.weights[n], want.weights[n]), (
            f"{n}: {first_difference(want.weights[n], got.weights[n])}")
    assert want_losses[-1] < want_losses[0]


def test_replay_needs_a_device_backend():
    model = Qwen2.random(CFG, seed=1)
    with pytest.raises(ValueError, match="expected 'sim' or 'cuda'"):
        lt.finetune(model, np.arange(5), lt.LoRAConfig(steps=1, engine="replay"))
