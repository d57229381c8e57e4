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
    device = bname if bname in ("cuda", "cpu") else "sim"  # cpu: the captured CPU step
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


def test_replay_needs_a_kernel_backend():
    model = Qwen2.random(CFG, seed=1)
    with pytest.raises(ValueError, match="expected 'sim', 'cuda' or 'cpu'"):
        lt.finetune(model, np.arange(5), lt.LoRAConfig(steps=1, engine="replay",
                                                        backend="numpy"))


def test_float32_device_mode_tolerance(bname):
    """A float64 model replayed with float32 device buffers: a measured tolerance, not bits."""
    device = "cuda" if bname == "cuda" else "sim"
    model = Qwen2.random(CFG, seed=1)
    ids = np.random.default_rng(2).integers(0, CFG.vocab_size, 10)
    cfg = lt.LoRAConfig(rank=2, alpha=4.0, steps=10, lr=1e-2)
    want, want_losses, _ = lt.finetune(model, ids, cfg)
    got, got_losses, _ = lt.finetune(model, ids, lt.LoRAConfig(
        **{**cfg.__dict__, "engine": "replay", "backend": device, "device_dtype": "float32"}))
    loss_dev = max(abs(a - b) / abs(a) for a, b in zip(want_losses, got_losses))
    w_dev = max(float(np.max(np.abs(got.weights[n] - want.weights[n]))
                      / np.max(np.abs(want.weights[n]))) for n in want.names())
    print(f"\nfloat32 device mode, 10 Adam steps: loss {loss_dev:.2e}, adapters {w_dev:.2e} "
          "relative")
    assert got.weights[want.names()[0]].dtype == np.float64
    assert 0 < loss_dev < 1e-5, f"loss deviation {loss_dev:.3e}"
    assert 0 < w_dev < 1e-3, f"adapter deviation {w_dev:.3e}"
