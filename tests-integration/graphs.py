"""Graphs of the parity matrix: each a loss over named inputs, built with gtape ops.

A graph is engine-neutral: ``build(v)`` receives one Var per input (params and consts of one
tape) and returns the scalar loss; ``inputs(rng)`` makes the data. Every engine (the tape on
each backend, and later replay, fusion, emitted C) runs the same graphs from the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gtape as g
import numpy as np


@dataclass(frozen=True)
class Graph:
    """One loss: its input data, which inputs are parameters, and its construction."""

    name: str
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    params: tuple[str, ...]
    build: Callable[[dict[str, Any]], g.Var]

    def data(self, seed: int = 0) -> dict[str, np.ndarray]:
        """The graph's inputs for ``seed`` (float64; engines convert to their dtype)."""
        return self.inputs(np.random.default_rng(seed))


def _n(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return rng.normal(size=shape) * scale


def _mlp(v: dict) -> g.Var:
    h = g.relu(v["x"] @ v["w1"] + v["b1"])
    return g.mse(g.softmax(h @ v["w2"] + v["b2"], axis=-1), v["t"])


def _chain(v: dict) -> g.Var:
    c = g.concat([g.slice(v["a"], 1, 1, 5), v["b"]], axis=1)
    return g.sum(g.tanh(g.transpose(g.reshape(c, (7, 4)))) * v["r"])


def _sigmoid_bmm(v: dict) -> g.Var:
    return g.mse(g.sigmoid(g.bmm(v["p"], v["q"])), v["t"])


def _autoencoder(v: dict) -> g.Var:
    h = g.tanh(v["x"] @ v["we"] + v["be"])
    y = g.sigmoid(h @ v["wd"] + v["bd"])
    l2 = g.sum(v["we"] * v["we"]) * 1e-3
    return g.mse(y, v["x"]) + l2


def _attention(v: dict) -> g.Var:
    q, k, val = v["x"] @ v["wq"], v["x"] @ v["wk"], v["x"] @ v["wv"]  # (6, 4) each
    qh = g.transpose(g.reshape(q, (6, 2, 2)), (1, 0, 2))  # (heads, seq, dim)
    kh = g.transpose(g.reshape(k, (6, 2, 2)), (1, 2, 0))  # (heads, dim, seq)
    vh = g.transpose(g.reshape(val, (6, 2, 2)), (1, 0, 2))
    att = g.softmax(g.bmm(qh, kh) / 2.0 + v["mask"], axis=-1)
    out = g.reshape(g.transpose(g.bmm(att, vh), (1, 0, 2)), (6, 4))
    return g.mean(g.exp(g.log(g.sqrt(out * out + 1.0))) - 1.0)


def _lora(v: dict) -> g.Var:
    y = v["x"] @ v["w"] + (v["x"] @ v["a"]) @ v["b"]
    rms = g.sqrt(g.mean(y * y, axis=1, keepdims=True) + 1e-6)
    return g.mse(y / rms, v["t"])


def _fanout_broadcast(v: dict) -> g.Var:
    s = v["u"] * v["u"] - v["u"] / (v["c"] * v["c"] + 1.0)
    z = g.pad(g.sum_to(s, (1, 5)), 0, 1, 1) + g.broadcast_to(v["c"], (3, 5))
    return g.sum(z * (-z)) + g.sum(g.neg(s), axis=None) * 0.5


_IDS = np.array([[3, 1, 4], [1, 5, 0], [2, 6, 3], [5, 5, 1]])
_LABELS = np.array([2, 0, 3, 1, 1, 0, 2, 3, 0, 1, 2, 2])


def _classifier(v: dict) -> g.Var:
    """Typed inputs: an embedding (int64 ids), a where mask, a stable cross-entropy on int
    labels, logsumexp, minimum, argmax-free selection of rows by a bool mask."""
    e = g.reshape(g.embedding(v["E"], _IDS), (12, 5))
    h = g.where(e > v["thr"], e, e * 0.1)
    z = h @ v["W"]
    sel = z[np.arange(12) % 3 == 0]
    return (g.cross_entropy(z, _LABELS, ignore_index=3) + g.mean(g.logsumexp(
        g.minimum(z, v["s"]), 1)) + g.mean(sel * sel))


def _norms(v: dict) -> g.Var:
    """layer_norm then rms_norm (weights and a bias: their gradients are column sums)."""
    h = g.layer_norm(v["x"] @ v["w"], v["gamma"], v["beta"])
    return g.mse(g.rms_norm(g.tanh(h), v["r"]), v["t"])


def _dropout_noise(v: dict) -> g.Var:
    """The random ops: dropout (mask from a key const), a key folded on the tape, uniform and
    normal draws of the tape's dtype mixed into the loss."""
    tp = v["x"].tape
    kv = g.rng.key_input(tp, g.rng.key(2**90 + 2024))
    h = g.relu(v["x"] @ v["w1"] + v["b1"])
    h = g.dropout(h, 0.3, g.rng.fold(kv, 1))
    noise = g.rng.normal(g.rng.fold(kv, 2), (16, 8)) * 0.1 + g.rng.uniform(kv, (8,))
    h = g.dropout(h + noise, 0.5, g.rng.key(7))
    return g.mse(h @ v["w2"], v["t"])


def _special_fns(v: dict) -> g.Var:
    """The correctly rounded elementwise functions of issue 38 in one MLP: exact GELU's erf,
    softplus's log1p, expm1, and sin / cos features (as rotary embeddings and Fourier
    features use them)."""
    h = v["x"] @ v["w1"] + v["b1"]
    h = (h * 0.5) * (g.erf(h * 0.7071067811865476) + 1.0)
    h = g.log1p(h * h) - g.expm1(h * -0.5)
    h = g.sin(h * 3.0) + g.cos(h * g.slice(v["x"], 1, 0, 1))
    return g.mse(h @ v["w2"], v["t"])


_DIGITS = np.array([1, 0, 2, 1])


def _small_cnn(v: dict) -> g.Var:
    """conv-relu-maxpool, conv-relu-avgpool (overlapping windows, strides, padding), linear,
    cross-entropy: the CNN rung in miniature."""
    h = g.max_pool2d(g.relu(g.conv2d(v["x"], v["w1"], v["b1"], padding=1)), 2)
    h = g.avg_pool2d(g.relu(g.conv2d(h, v["w2"], v["b2"], stride=(1, 2), padding=(1, 1))), 2,
                     1)
    return g.cross_entropy(g.reshape(h, (4, 4)) @ v["wl"], _DIGITS)


GRAPHS = [
    Graph("relu_softmax_mlp_mse",
          lambda r: {"w1": _n(r, 5, 8, scale=0.5), "b1": _n(r, 8, scale=0.25),
                     "w2": _n(r, 8, 4, scale=0.3), "b2": _n(r, 4, scale=0.25),
                     "x": _n(r, 16, 5), "t": r.dirichlet(np.ones(4), size=16)},
          ("w1", "b1", "w2", "b2"), _mlp),
    Graph("tanh_transpose_reshape_slice_concat",
          lambda r: {"a": _n(r, 4, 6), "b": _n(r, 4, 3), "r": _n(r, 4, 7)}, ("a", "b"), _chain),
    Graph("sigmoid_bmm",
          lambda r: {"p": _n(r, 3, 4, 5), "q": _n(r, 3, 5, 2), "t": r.uniform(size=(3, 4, 2))},
          ("p", "q"), _sigmoid_bmm),
    Graph("autoencoder_l2",
          lambda r: {"we": _n(r, 6, 3, scale=0.5), "be": np.zeros(3), "wd": _n(r, 3, 6, scale=0.5),
                     "bd": np.zeros(6), "x": r.uniform(size=(10, 6))},
          ("we", "be", "wd", "bd"), _autoencoder),
    Graph("attention_heads",
          lambda r: {"wq": _n(r, 4, 4, scale=0.5), "wk": _n(r, 4, 4, scale=0.5),
                     "wv": _n(r, 4, 4, scale=0.5), "x": _n(r, 6, 4),
                     "mask": np.triu(np.full((6, 6), -1e9), 1)},
          ("wq", "wk", "wv"), _attention),
    Graph("lora_rmsnorm",
          lambda r: {"a": _n(r, 5, 2, scale=0.3), "b": _n(r, 2, 5, scale=0.3), "x": _n(r, 7, 5),
                     "w": _n(r, 5, 5), "t": _n(r, 7, 5)},
          ("a", "b"), _lora),
    Graph("fanout_broadcast_pad",
          lambda r: {"u": _n(r, 3, 5), "c": _n(r, 5)}, ("u", "c"), _fanout_broadcast),
    Graph("embedding_where_cross_entropy",
          lambda r: {"E": _n(r, 7, 5), "W": _n(r, 5, 4, scale=3.0), "s": _n(r, 12, 4),
                     "thr": _n(r, 5, scale=0.1)},
          ("E", "W"), _classifier),
    Graph("layer_norm_rms_norm",
          lambda r: {"x": _n(r, 6, 5), "w": _n(r, 5, 7, scale=0.5), "gamma": 1.0 + _n(r, 7),
                     "beta": _n(r, 7, scale=0.1), "r": 1.0 + _n(r, 7, scale=0.2),
                     "t": _n(r, 6, 7)},
          ("w", "gamma", "beta", "r"), _norms),
    Graph("dropout_rng_noise",
          lambda r: {"w1": _n(r, 5, 8, scale=0.5), "b1": _n(r, 8, scale=0.25),
                     "w2": _n(r, 8, 3, scale=0.3), "x": _n(r, 16, 5), "t": _n(r, 16, 3)},
          ("w1", "b1", "w2"), _dropout_noise),
    Graph("special_fns_mlp",
          lambda r: {"w1": _n(r, 5, 8, scale=0.7), "b1": _n(r, 8, scale=0.25),
                     "w2": _n(r, 8, 3, scale=0.4), "x": _n(r, 12, 5), "t": _n(r, 12, 3)},
          ("w1", "b1", "w2"), _special_fns),
    Graph("small_cnn_conv_pool",
          lambda r: {"w1": _n(r, 3, 1, 3, 3, scale=0.5), "b1": _n(r, 3, scale=0.1),
                     "w2": _n(r, 2, 3, 3, 2, scale=0.4), "b2": _n(r, 2, scale=0.1),
                     "wl": _n(r, 4, 3, scale=0.5), "x": _n(r, 4, 1, 6, 6)},
          ("w1", "b1", "w2", "b2", "wl"), _small_cnn),
]
