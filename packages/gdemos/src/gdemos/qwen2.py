"""A Qwen2 causal LM in numpy: safetensors weights in, logits and greedy text out (no torch).

>>> from gdemos.qwen2 import Qwen2, Qwen2Config
>>> cfg = Qwen2Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
...                   num_attention_heads=4, num_key_value_heads=2, head_dim=8,
...                   tie_word_embeddings=True)
>>> m = Qwen2.random(cfg, seed=0)
>>> m.logits([1, 2, 3]).shape
(3, 256)
>>> len(m.generate([1, 2, 3], 4))
7

The inference path (``logits``, ``generate`` with a KV cache) runs the model math of
:mod:`gdemos.qwen2_math` on gtensor's numpy backend, outside any tape; the training graph
(:class:`gdemos.lora.LoRA`) runs the very same functions on a tape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gtensor import files

from . import qwen2_math as qm
from .qwen2_math import LINEARS, Qwen2Config, module_name
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer

_DTYPES = ("float64", "float32")


def weight_names(cfg: Qwen2Config) -> dict[str, tuple[int, ...]]:
    """Every transformers parameter name of the model with its shape (lm_head only untied)."""
    h = cfg.hidden_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        for mod in LINEARS:
            name = module_name(i, mod)
            out[name + ".weight"] = cfg.linear_shape(mod)
            if mod in ("q_proj", "k_proj", "v_proj"):
                out[name + ".bias"] = (cfg.linear_shape(mod)[0],)
    out["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    return out


def random_weights(cfg: Qwen2Config, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float64 weights: embeddings N(0, 0.3^2), projections N(0, 1/in), biases N(0, 0.1^2),
    norm weights 1 + N(0, 0.1^2); ``lm_head`` (untied) N(0, 1/hidden)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_names(cfg).items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            out[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            out[name] = 0.1 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            out[name] = 0.3 * rng.standard_normal(shape)
        else:
            out[name] = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return out


class Qwen2:
    """A Qwen2ForCausalLM's weights (numpy, one dtype) with its config and tokenizer."""

    def __init__(self, config: Qwen2Config, weights: dict[str, np.ndarray],
                 dtype: str = "float64", tokenizer: Tokenizer | None = None,
                 raw_config: dict[str, Any] | None = None, source: Path | None = None) -> None:
        if dtype not in _DTYPES:
            raise TypeError(f"Qwen2: dtype {dtype!r}; expected one of {_DTYPES}")
        want = weight_names(config)
        missing = sorted(set(want) - set(weights))
        if missing:
            raise ValueError(f"Qwen2: weights lack {missing[:4]} ({len(missing)} missing)")
        self.config = config
        self.dtype = np.dtype(dtype)
        self.weights: dict[str, np.ndarray] = {}
        for name, shape in want.items():
            w = np.asarray(weights[name])
            if tuple(w.shape) != shape:
                raise ValueError(f"Qwen2: weight {name} has shape {tuple(w.shape)}; expected "
                                 f"{shape} from the config")
            self.weights[name] = np.ascontiguousarray(w, dtype=self.dtype)
        self.tokenizer: Tokenizer = tokenizer or ByteTokenizer()
        self.raw_config = dict(raw_config) if raw_config else config.to_dict()
        self.source = source
        self._compute: dict[str, np.ndarray] | None = None

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(cls, directory: str | Path, dtype: str = "float64") -> Qwen2:
        """Load config.json and every ``*.safetensors`` of ``directory`` (numpy API, no torch)."""
        from safetensors.numpy import load_file

        d = Path(directory)
        cfg_path = d / "config.json"
        if not cfg_path.exists():
            raise FileNotFoundError(f"Qwen2.from_pretrained: no config.json in {d}")
        raw = json.loads(cfg_path.read_text())
        files = sorted(d.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"Qwen2.from_pretrained: no *.safetensors in {d}")
        weights: dict[str, np.ndarray] = {}
        for f in files:
            weights.update(load_file(str(f)))
        cfg = Qwen2Config.from_dict(raw)
        if cfg.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        return cls(cfg, weights, dtype, load_tokenizer(d), raw, d)

    @classmethod
    def random(cls, config: Qwen2Config, seed: int = 0, dtype: str = "float64") -> Qwen2:
        """A model with ``random_weights(config, seed)`` and the byte tokenizer."""
        return cls(config, random_weights(config, seed), dtype)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json, model.safetensors (and the tokenizer files it came with)."""
        from safetensors.numpy import save

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        raw = dict(self.raw_config)
        raw["torch_dtype"] = self.dtype.name
        raw["dtype"] = self.dtype.name
        text = (json.dumps(raw, indent=2) + "\n").encode()
        # every file written atomically (temp file, fsync, rename): a failed save leaves the
        # previous model intact
        files.write_atomic(d / "config.json", lambda f: f.write(text))
        weights = {k: np.ascontiguousarray(v) for k, v in self.weights.items()}
        files.write_atomic(d / "model.safetensors",
                           lambda f: f.write(save(weights, metadata={"format": "pt"})))
        if self.source is not None:
            for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
                if (self.source / name).exists() and self.source.resolve() != d.resolve():
                    data = (self.source / name).read_bytes()
                    files.write_atomic(d / name, lambda f, data=data: f.write(data))
        return d

    def with_weights(self, weights: dict[str, np.ndarray]) -> Qwen2:
        """A copy of this model with some weights replaced (same config and tokenizer)."""
        return Qwen2(self.config, {**self.weights, **weights}, self.dtype.name, self.tokenizer,
                     self.raw_config, self.source)

    # ---------------------------------------------------------------- the shared model math
    def compute_weights(self) -> dict[str, np.ndarray]:
        """The weights as ``qwen2_math`` reads them: linears transposed (``.weight_t``)."""
        if self._compute is None:
            w: dict[str, np.ndarray] = {}
            for name, arr in self.weights.items():
                if name.endswith("proj.weight") or name == "lm_head.weight":
                    w[name[:-len("weight")] + "weight_t"] = np.ascontiguousarray(arr.T)
                else:
                    w[name] = arr
            if self.config.tie_word_embeddings:
                w["lm_head.weight_t"] = np.ascontiguousarray(
                    self.weights["model.embed_tokens.weight"].T)
            self._compute = w
        return self._compute

    def embed(self, ids: Sequence[int]) -> np.ndarray:
        """Embedding rows of ``ids`` (T, hidden): a host-side gather, an exact copy."""
        ids = self.check_ids(ids, "embed")
        return self.weights["model.embed_tokens.weight"][ids]

    def check_ids(self, ids: Sequence[int], where: str) -> np.ndarray:
        """``ids`` as a 1-D int64 array of valid token ids (``where`` names the caller)."""
        where = where if "." in where else f"Qwen2.{where}"
        a = np.asarray(ids)
        if a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu":
            raise ValueError(f"{where}: ids is {a.dtype} of shape {a.shape}; expected "
                             "a non-empty 1-D sequence of ints")
        if a.min() < 0 or a.max() >= self.config.vocab_size:
            raise ValueError(f"{where}: token ids span [{a.min()}, {a.max()}]; expected "
                             f"0 <= id < vocab_size = {self.config.vocab_size}")
        return a.astype(np.int64)

    # ---------------------------------------------------------------- inference path
    def _step(self, ids: np.ndarray, start: int, cache: dict) -> np.ndarray:
        """Logits of ``ids`` at positions start.. given the cache of positions < start."""
        ops = qm.ArrayOps(self.dtype)
        t = len(ids)
        cos, sin = qm.rotary_tables(self.config, np.arange(start, start + t), self.dtype)
        mask = qm.causal_mask(t, start, self.dtype)
        W = self.compute_weights()
        h = qm.hidden(ops, self.config, W, qm.embed(ops, W, ids), cos, sin, mask, cache)
        return qm.head(ops, self.config, W, h)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits (T, vocab) of a whole sequence (the inference path, no tape)."""
        return self._step(self.check_ids(ids, "logits"), 0, {})

    def generate(self, ids: Sequence[int], n: int, return_logits: bool = False) -> Any:
        """Greedy decoding of ``n`` tokens with a KV cache; returns prompt + new ids (int64).

        With ``return_logits`` also the (n, vocab) logits each new token was chosen from.
        """
        ids = self.check_ids(ids, "generate")
        if n < 0:
            raise ValueError(f"Qwen2.generate: n is {n}; expected >= 0")
        cache: dict = {}
        out, picked = list(ids), []
        last = self._step(ids, 0, cache)[-1]
        for k in range(n):
            picked.append(last)
            out.append(int(np.argmax(last)))
            if k + 1 < n:
                last = self._step(np.array(out[-1:]), len(out) - 1, cache)[-1]
        seq = np.array(out, dtype=np.int64)
        if not return_logits:
            return seq
        return seq, np.array(picked, dtype=self.dtype).reshape(n, self.config.vocab_size)

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (checked against the vocabulary)."""
        return self.check_ids(self.tokenizer.encode(text), "encode")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return self.tokenizer.decode([int(i) for i in ids])


def __getattr__(name: str) -> Any:
    if name == "LoRA":  # ``from gdemos.qwen2 import Qwen2, LoRA`` (the import line)
        from .lora import LoRA

        return LoRA
    raise AttributeError(f"module 'gdemos.qwen2' has no attribute {name!r}")
