"""Rung 3 without torch: the Qwen2 numpy model, LoRA on the tape, training, merge, reproduction.

* the inference path (gtensor ops on arrays) gives the tape's logits bit for bit, and the KV
  cache's decode logits equal the full-sequence logits bit for bit;
* the PEFT B = 0 identity, bitwise: dL/dA == 0 exactly, dL/dB != 0, loss == the base model's;
* central differences through a whole block on all 14 adapter matrices;
* requires-grad propagation: the base weights get no gradient work or memory;
* a 60-step Adam run drives the CE loss well down and the merged model, saved and loaded back,
  reproduces the training text exactly from its first tokens;
* the training run on the backend under test (sim) lands on the numpy run's bits.
"""

from __future__ import annotations

import json

import gtape
import numpy as np
import pytest
from gdemos import lora_train as lt
from gdemos import qwen2_math as qm
from gdemos.lora import LoRA, peft_name
from gdemos.qwen2 import Qwen2, weight_names
from gdemos.qwen2_math import Qwen2Config
from gtensor.testing import bits_equal, first_difference

TINY = Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                   tie_word_embeddings=False, max_position_embeddings=256)
BLOCK = Qwen2Config(**{**TINY.__dict__, "num_hidden_layers": 1})


@pytest.fixture(scope="module")
def model():
    return Qwen2.random(TINY, seed=0)


@pytest.fixture(scope="module")
def ids():
    return np.random.default_rng(1).integers(0, TINY.vocab_size, 20)


def _nonzero_b(lora: LoRA, seed: int, scale: float = 0.2) -> None:
    rng = np.random.default_rng(seed)
    lora.set_weights({n: scale * rng.standard_normal(a.shape) for n, a in lora.weights.items()
                      if "lora_B" in n})


def _tape_loss(lora: LoRA, ids) -> tuple[gtape.Tape, gtape.Var]:
    tp = gtape.Tape(dtype=lora.model.dtype.name)
    lora.attach(tp)
    return tp, lora.loss(tp, ids)


# ---------------------------------------------------------------- one model math, two paths
def test_inference_logits_bitwise_equal_to_tape(model, ids):
    lora = LoRA(model, r=4, alpha=8)  # B = 0: the graph computes the base model
    tp = gtape.Tape()
    lora.attach(tp)
    got = np.array(tp.value(lora.logits(tp, ids)))
    want = model.logits(ids)
    assert bits_equal(got, want), first_difference(got, want)


def test_kv_cache_decode_bitwise_equal_to_full_sequence(model, ids):
    seq, step_logits = model.generate(ids[:5], 10, return_logits=True)
    full = model.logits(seq)
    assert seq.shape == (15,) and np.array_equal(seq[:5], ids[:5])
    assert bits_equal(step_logits, full[4:-1]), first_difference(step_logits, full[4:-1])
    assert np.array_equal(seq[5:], np.argmax(full[4:-1], axis=1))
    seq0, none = model.generate(ids[:3], 0, return_logits=True)
    assert np.array_equal(seq0, ids[:3]) and none.shape == (0, TINY.vocab_size)


def test_lora_with_nonzero_b_matches_merged_model(model, ids):
    lora = LoRA(model, r=4, alpha=8, seed=3)
    _nonzero_b(lora, 4)
    tp = gtape.Tape()
    lora.attach(tp)
    got = np.array(tp.value(lora.logits(tp, ids)))
    want = lora.merged().logits(ids)
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    assert err <= 1e-13, f"adapter graph vs merged weights: logits rel err {err:.3e} > 1e-13"
    base = model.logits(ids)
    assert np.max(np.abs(got - base)) > 1e-3  # the adapters do change the model


# ---------------------------------------------------------------- identities
def test_b_zero_identity_bitwise(model, ids):
    lora = LoRA(model, r=8, alpha=16, seed=0)
    tp, loss = _tape_loss(lora, ids)
    tp.backward(loss)
    grads = lora.grads(tp)
    ops = qm.ArrayOps()
    base = ops.const(qm.cross_entropy(ops, model.logits(ids)[:-1], ids[1:]))
    value = np.array(tp.value(loss))
    assert bits_equal(value, base), f"loss {value!r} != base model loss {base!r}"
    for name, g in grads.items():
        if "lora_A" in name:
            assert np.all(g == 0.0), f"{name}: dL/dA has nonzero entries with B = 0"
        else:
            assert np.abs(g).max() > 0, f"{name}: dL/dB is all zero"


def test_base_weights_get_no_gradient_work(model, ids):
    lora = LoRA(model, r=4, alpha=8)
    tp, loss = _tape_loss(lora, ids)
    tp.backward(loss)
    stats = tp.stats()
    nodes = tp.nodes()
    const = getattr(gtape, "CONST", "const")  # the leaf marker (a string in older gtape)
    consts = [n for n in nodes if n.op == const]
    assert consts and not any(n.requires_grad for n in consts)
    n_params = len(weight_names(TINY))
    assert len(consts) >= n_params  # every base weight entered as a const
    assert stats["params"] == len(lora.names())
    # gradients are stored only where a parameter lies upstream: no const, no base-only node
    assert stats["grad_buffers"] <= stats["requires_grad"] < len(nodes)
    assert stats["vjps"] < stats["requires_grad"]


def test_central_differences_through_a_block():
    """All 14 adapter matrices of one block, along a random direction each."""
    m = Qwen2.random(BLOCK, seed=5)
    ids = np.random.default_rng(6).integers(0, BLOCK.vocab_size, 12)
    lora = LoRA(m, r=3, alpha=6, seed=7)
    _nonzero_b(lora, 8)
    tp = gtape.Tape()
    lora.attach(tp)
    mark = tp.mark()
    tp.backward(lora.loss(tp, ids))
    grads = lora.grads(tp)
    tp.reset_to(mark)
    base = {n: a.copy() for n, a in lora.weights.items()}
    rng = np.random.default_rng(9)
    h = 1e-5
    worst = (0.0, "")
    assert len(base) == 14
    for name, w in base.items():
        d = rng.standard_normal(w.shape)
        vals = []
        for sgn in (1.0, -1.0):
            lora.set_weights({name: w + sgn * h * d})
            vals.append(float(tp.value(lora.loss(tp, ids))))
            tp.reset_to(mark)
        lora.set_weights({name: w})
        fd = (vals[0] - vals[1]) / (2 * h)
        an = float(np.sum(grads[name] * d))
        err = abs(fd - an) / max(abs(an), 1e-12)
        worst = max(worst, (err, name))
        assert err <= 1e-6, f"{name}: central difference {fd!r} vs gradient {an!r} ({err:.2e})"
    print(f"\ncentral differences, 14 matrices: worst relative error {worst[0]:.2e} ({worst[1]})")


# ---------------------------------------------------------------- training and reproduction
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    m = Qwen2.random(lt.SMALL, seed=0)
    out = tmp_path_factory.mktemp("merged")
    return lt.run(m, lt.TEXT, lt.LoRAConfig(steps=60), merged_dir=out), out


def test_adam_drives_loss_down_and_merged_model_reproduces_text(trained):
    r, out = trained
    print(f"\n60 Adam steps on {r.tokens} tokens: CE {r.losses[0]:.4f} -> {r.final_loss:.4g}; "
          f"reproduced: {r.reproduced}")
    assert len(r.losses) == 60
    assert r.final_loss < 0.01 * r.losses[0], (r.losses[0], r.final_loss)
    assert r.final_loss < 0.05
    assert r.reproduced and r.generated == lt.TEXT, repr(r.generated)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["tie_word_embeddings"] is True


def test_save_load_roundtrip(tmp_path, model):
    model.save_pretrained(tmp_path)
    back = Qwen2.from_pretrained(tmp_path)
    assert all(bits_equal(back.weights[k], v) for k, v in model.weights.items())
    f32 = Qwen2.from_pretrained(tmp_path, dtype="float32")
    assert f32.logits([1, 2, 3]).dtype == np.float32
    assert set(back.weights) == set(weight_names(TINY))


def test_short_training_bitwise_equal_on_other_backend(other, ids):
    m = Qwen2.random(BLOCK, seed=2)
    cfg = lt.LoRAConfig(steps=3, rank=2, alpha=4)
    ref, ref_losses, _ = lt.finetune(m, ids, cfg)
    got, got_losses, _ = lt.finetune(m, ids, lt.LoRAConfig(**{**cfg.__dict__, "backend": other}))
    assert got_losses == ref_losses
    for n in ref.names():
        assert bits_equal(got.weights[n], ref.weights[n]), n


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fma_contract_training_bitwise_equal_on_other_backend_and_not_plain(other, ids, dtype):
    # inner="fma" threads through LoRAConfig to the tape: the backend under test lands on the
    # numpy run's bits under fma too, and those bits are not the plain contract's
    m = Qwen2.random(BLOCK, seed=2, dtype=dtype)
    cfg = lt.LoRAConfig(steps=2, rank=2, alpha=4, inner="fma")
    ref, ref_losses, ref_final = lt.finetune(m, ids, cfg)
    got, got_losses, got_final = lt.finetune(
        m, ids, lt.LoRAConfig(**{**cfg.__dict__, "backend": other}))
    assert np.array(got_losses + [got_final]).tobytes() == \
        np.array(ref_losses + [ref_final]).tobytes()
    for n in ref.names():
        assert bits_equal(got.weights[n], ref.weights[n]), n
    plain, _, _ = lt.finetune(
        m, ids, lt.LoRAConfig(**{**cfg.__dict__, "backend": other, "inner": "plain"}))
    assert any(not bits_equal(plain.weights[n], got.weights[n]) for n in ref.names())


# ---------------------------------------------------------------- tokenizers and errors
def test_byte_tokenizer_fallback(tmp_path):
    m = Qwen2.random(lt.SMALL, seed=0)
    m.save_pretrained(tmp_path)
    back = Qwen2.from_pretrained(tmp_path)
    assert back.tokenizer.name == "bytes"
    assert back.decode(back.encode("héllo")) == "héllo"


def test_tokenizer_json_is_used(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([lt.TEXT] * 4, trainers.BpeTrainer(vocab_size=100,
                                                                special_tokens=["[UNK]"]))
    Qwen2.random(TINY, seed=0).save_pretrained(tmp_path)
    tok.save(str(tmp_path / "tokenizer.json"))
    m = Qwen2.from_pretrained(tmp_path)
    ids = m.encode("the tape records every op")
    assert m.tokenizer.name == "tokenizer.json"
    assert ids.max() < 100 and len(ids) < len("the tape records every op") // 2  # merged pieces
    assert np.array_equal(m.encode(m.decode(ids)), ids)


def test_errors_name_the_function(model):
    with pytest.raises(ValueError, match=r"Qwen2.logits: token ids span"):
        model.logits([0, TINY.vocab_size])
    lora = LoRA(model, r=2, alpha=4)
    with pytest.raises(KeyError, match="LoRA.set_weights"):
        lora.set_weights({"nope": np.zeros(1)})
    name = peft_name("model.layers.0.self_attn.q_proj", "A")
    with pytest.raises(ValueError, match=r"LoRA.set_weights: .* expected \(2, 32\)"):
        lora.set_weights({name: np.zeros((3, 32))})
    with pytest.raises(ValueError, match=r"^LoRA.loss: token ids span"):
        lora.loss(gtape.Tape(), [0, 999])
    with pytest.raises(ValueError, match="not attached"):
        lora.loss(gtape.Tape(), [1, 2])
    with pytest.raises(ValueError, match="targets"):
        LoRA(model, targets=["lm_head"])


def test_issue_import_line():
    from gdemos.qwen2 import LoRA as FromQwen2
    from gdemos.qwen2 import Qwen2 as Q

    assert FromQwen2 is LoRA and Q is Qwen2
