"""Rung 3 against transformers' Qwen2 and PEFT's LoRA (torch CPU, float64): the oracle suite.

Stock transformers computes RMSNorm, the rotary tables, the eager attention softmax and the
causal-LM loss in float32 even for a float64 model, so two oracles:

* stock ``Qwen2ForCausalLM`` in float64: logits within 1e-6 relative, same greedy continuation;
* the same model with those float32 islands patched to float64 (RMSNorm, rotary inv_freq and
  cos/sin, eager softmax) and the loss computed in float64: logits within 1e-12 relative,
  loss within 1e-14; PEFT's LoRA on it with the same A and B (B nonzero): every adapter
  gradient within 1e-12 relative.

Runs as its own nox session (``nox -s lora_oracle``); skipped where torch/transformers/peft
are not installed. Nothing is downloaded: a tiny random Qwen2 is built and saved to a temp dir.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
import gtape  # noqa: E402
from gdemos.lora import LoRA  # noqa: E402
from gdemos.qwen2 import Qwen2, random_weights  # noqa: E402
from gdemos.qwen2_math import LINEARS, Qwen2Config  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2 as mq  # noqa: E402

CFG = Qwen2Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
                  tie_word_embeddings=False, max_position_embeddings=128)
T = 24
R, ALPHA = 4, 8.0


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| / max |ref|."""
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def _hf_config(cfg: Qwen2Config):
    d = cfg.to_dict()
    d.pop("architectures")
    return transformers.Qwen2Config(**d)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny random Qwen2 built by transformers (float64), saved with save_pretrained."""
    d = tmp_path_factory.mktemp("qwen2")
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(_hf_config(CFG)).to(torch.float64)
    state = {k: torch.from_numpy(v) for k, v in random_weights(CFG, seed=1).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    model.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def ids():
    return np.random.default_rng(2).integers(0, CFG.vocab_size, T)


def _load_hf(d):
    return transformers.Qwen2ForCausalLM.from_pretrained(
        d, dtype=torch.float64, attn_implementation="eager").eval()


# ---------------------------------------------------------------- the float64 patches
def _rmsnorm_f64(self, hidden_states):
    var = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(var + self.variance_epsilon))


def _rotary_f64(self, x, position_ids):
    dim = self.inv_freq.shape[0] * 2
    base = self.config.rope_parameters["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].to(torch.float64) * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _eager_f64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    k = mq.repeat_kv(key, module.num_key_value_groups)
    v = mq.repeat_kv(value, module.num_key_value_groups)
    w = torch.matmul(query, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float64).to(query.dtype)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w


@pytest.fixture()
def patched():
    """transformers' float32 islands replaced by float64 code (undone after the test)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mq.Qwen2RMSNorm, "forward", _rmsnorm_f64)
        mp.setattr(mq.Qwen2RotaryEmbedding, "forward", _rotary_f64)
        mp.setattr(mq, "eager_attention_forward", _eager_f64)
        yield


def _loss_f64(logits, ids):
    return torch.nn.functional.cross_entropy(logits[0, :-1].to(torch.float64),
                                             torch.as_tensor(ids[1:]))


def _hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0].numpy()


# ---------------------------------------------------------------- stock model
def test_stock_float64_logits_and_greedy(saved, ids):
    ours = Qwen2.from_pretrained(saved, dtype="float64")
    hf = _load_hf(saved)
    err = _rel(ours.logits(ids), _hf_logits(hf, ids))
    print(f"\nstock f64 transformers vs ours: logits rel err {err:.3e}")
    assert err <= 1e-6, f"logits relative error {err:.3e} > 1e-6 against stock transformers"
    prompt, n = ids[:4], 12
    with torch.no_grad():
        want = hf.generate(torch.as_tensor(prompt)[None], max_new_tokens=n, do_sample=False,
                           min_new_tokens=n).numpy()[0]
    got = ours.generate(prompt, n)
    assert np.array_equal(got, want), f"greedy continuation differs: ours {got}, hf {want}"


def test_tied_embeddings_load(tmp_path, ids):
    cfg = Qwen2Config(**{**CFG.__dict__, "tie_word_embeddings": True})
    model = transformers.Qwen2ForCausalLM(_hf_config(cfg)).to(torch.float64)
    w = {k: torch.from_numpy(v) for k, v in random_weights(cfg, seed=3).items()}
    model.load_state_dict(w, strict=False)
    model.save_pretrained(tmp_path)
    ours = Qwen2.from_pretrained(tmp_path)
    err = _rel(ours.logits(ids), _hf_logits(_load_hf(tmp_path), ids))
    assert err <= 1e-6, f"tied model: logits relative error {err:.3e} > 1e-6"


# ---------------------------------------------------------------- patched model
def test_patched_float64_logits_and_loss(saved, ids, patched):
    ours = Qwen2.from_pretrained(saved, dtype="float64")
    hf = _load_hf(saved)
    ref = _hf_logits(hf, ids)
    err = _rel(ours.logits(ids), ref)
    lora = LoRA(ours, r=R, alpha=ALPHA)  # B = 0: the loss is the base model's
    tp = gtape.Tape()
    lora.attach(tp)
    loss = float(tp.value(lora.loss(tp, ids)))
    want = float(_loss_f64(torch.from_numpy(ref)[None], ids))
    lerr = abs(loss - want) / abs(want)
    print(f"\npatched f64 transformers vs ours: logits rel err {err:.3e}, loss rel err {lerr:.3e}"
          f" (loss {loss:.17g})")
    assert err <= 1e-12, f"logits relative error {err:.3e} > 1e-12 against the patched model"
    assert lerr <= 1e-14, f"loss {loss!r} vs {want!r}: relative error {lerr:.3e} > 1e-14"


def _peft_grads(saved, ids, arrays):
    model = _load_hf(saved)
    cfg = peft.LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(LINEARS))
    pm = peft.get_peft_model(model, cfg).to(torch.float64)
    trainable = {n: p for n, p in pm.named_parameters() if p.requires_grad}
    assert set(trainable) == set(arrays), sorted(set(trainable) ^ set(arrays))[:4]
    with torch.no_grad():
        for n, p in trainable.items():
            p.copy_(torch.from_numpy(arrays[n]))
    out = pm(torch.as_tensor(ids)[None])
    loss = _loss_f64(out.logits, ids)
    loss.backward()
    return float(loss.detach()), {n: p.grad.numpy().copy() for n, p in trainable.items()}


def test_peft_gradients(saved, ids, patched):
    ours = Qwen2.from_pretrained(saved, dtype="float64")
    lora = LoRA(ours, r=R, alpha=ALPHA, seed=5)
    rng = np.random.default_rng(6)
    arrays = {n: (a if "lora_A" in n else 0.2 * rng.standard_normal(a.shape))
              for n, a in lora.weights.items()}  # B nonzero too
    lora.set_weights(arrays)
    tp = gtape.Tape()
    lora.attach(tp)
    loss = lora.loss(tp, ids)
    tp.backward(loss)
    grads = lora.grads(tp)
    want_loss, want = _peft_grads(saved, ids, lora.weights)
    lerr = abs(float(tp.value(loss)) - want_loss) / abs(want_loss)
    errs = {n: _rel(grads[n], want[n]) for n in want}
    worst = max(errs, key=errs.get)
    print(f"\nPEFT vs ours: loss rel err {lerr:.3e}; worst adapter grad rel err "
          f"{errs[worst]:.3e} ({worst}); {len(errs)} matrices")
    assert len(errs) == 2 * len(LINEARS) * CFG.num_hidden_layers
    assert lerr <= 1e-14, f"loss relative error {lerr:.3e} > 1e-14"
    assert errs[worst] <= 1e-12, f"{worst}: gradient relative error {errs[worst]:.3e} > 1e-12"
    assert all(np.abs(g).max() > 0 for g in want.values())


def test_merged_model_loads_in_transformers(saved, ids, patched, tmp_path):
    ours = Qwen2.from_pretrained(saved, dtype="float64")
    lora = LoRA(ours, r=R, alpha=ALPHA, seed=7)
    rng = np.random.default_rng(8)
    lora.set_weights({n: 0.2 * rng.standard_normal(a.shape) for n, a in lora.weights.items()
                      if "lora_B" in n})
    merged = lora.merged()
    merged.save_pretrained(tmp_path)
    err = _rel(merged.logits(ids), _hf_logits(_load_hf(tmp_path), ids))
    # PEFT's own merge of the same adapters
    cfg = peft.LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(LINEARS))
    pm = peft.get_peft_model(_load_hf(saved), cfg).to(torch.float64)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if p.requires_grad:
                p.copy_(torch.from_numpy(lora.weights[n]))
    pmerged = pm.merge_and_unload()
    werr = max(_rel(merged.weights[k], pmerged.state_dict()[k].numpy())
               for k in merged.weights if k.endswith("proj.weight"))
    print(f"\nmerged: transformers logits rel err {err:.3e}; PEFT merge weights rel err {werr:.3e}")
    assert err <= 1e-12, f"merged model in transformers: logits rel err {err:.3e} > 1e-12"
    assert werr <= 1e-15, f"merged weights vs PEFT merge_and_unload: rel err {werr:.3e}"
    assert math.isfinite(err)
