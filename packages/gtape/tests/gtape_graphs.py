"""The oracle graphs: each built once on a gtape Tape and once in float64 PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gtape as g
import numpy as np
from gtape_testutil import grads, values


@dataclass(frozen=True)
class Graph:
    """Inputs (params first), the tape build and the PyTorch build of one loss."""

    name: str
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    params: tuple[str, ...]
    tape: Callable[[dict[str, Any]], g.Var]
    torch: Callable[[Any, dict[str, Any]], Any]


def _mlp_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"w1": rng.normal(size=(5, 8)) / 2, "b1": rng.normal(size=8) / 4,
            "w2": rng.normal(size=(8, 4)) / 3, "b2": rng.normal(size=4) / 4,
            "x": rng.normal(size=(16, 5)), "t": rng.dirichlet(np.ones(4), size=16)}


def _mlp_tape(v: dict) -> g.Var:
    h = g.relu(v["x"] @ v["w1"] + v["b1"])
    return g.mse(g.softmax(h @ v["w2"] + v["b2"], axis=-1), v["t"])


def _mlp_torch(torch: Any, v: dict) -> Any:
    h = torch.relu(v["x"] @ v["w1"] + v["b1"])
    d = torch.softmax(h @ v["w2"] + v["b2"], dim=-1) - v["t"]
    return (d * d).mean()


def _chain_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"a": rng.normal(size=(4, 6)), "b": rng.normal(size=(4, 3)),
            "r": rng.normal(size=(4, 7))}


def _chain_tape(v: dict) -> g.Var:
    c = g.concat([g.slice(v["a"], 1, 1, 5), v["b"]], axis=1)  # (4, 7)
    y = g.tanh(g.transpose(g.reshape(c, (7, 4))))  # (4, 7)
    return g.sum(y * v["r"])


def _chain_torch(torch: Any, v: dict) -> Any:
    c = torch.cat([v["a"][:, 1:5], v["b"]], dim=1)
    return (torch.tanh(c.reshape(7, 4).T) * v["r"]).sum()


def _bmm_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"p": rng.normal(size=(3, 4, 5)), "q": rng.normal(size=(3, 5, 2)),
            "t": rng.uniform(size=(3, 4, 2))}


def _bmm_tape(v: dict) -> g.Var:
    return g.mse(g.sigmoid(g.bmm(v["p"], v["q"])), v["t"])


def _bmm_torch(torch: Any, v: dict) -> Any:
    d = torch.sigmoid(torch.bmm(v["p"], v["q"])) - v["t"]
    return (d * d).mean()


_IDS = np.array([[3, 1, 4], [1, 5, 0], [2, 6, 3], [5, 5, 1]])
_LABELS = np.array([2, 0, 3, 1, 1, 0, 2, 3, 0, 1, 2, 2])


def _index_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"E": rng.normal(size=(7, 5)), "W": rng.normal(size=(5, 4)) * 3,
            "s": rng.normal(size=(12, 4))}


def _index_tape(v: dict) -> g.Var:
    e = g.reshape(g.embedding(v["E"], _IDS), (12, 5))
    h = g.where(e > 0.0, e, e * 0.1)  # leaky relu through where
    z = h @ v["W"]
    picked = g.take_along_axis(g.log_softmax(z, 0), _LABELS[:4].reshape(1, 4), 0)
    return (g.cross_entropy(z, _LABELS) + g.mean(g.logsumexp(g.minimum(z, v["s"]), 1))
            + g.mean(picked) + g.mean(g.clip(z, -1.0, 1.0)))


def _index_torch(torch: Any, v: dict) -> Any:
    e = v["E"][torch.from_numpy(_IDS)].reshape(12, 5)
    h = torch.where(e > 0.0, e, e * 0.1)
    z = h @ v["W"]
    picked = torch.take_along_dim(torch.log_softmax(z, 0),
                                  torch.from_numpy(_LABELS[:4].reshape(1, 4)), 0)
    return (torch.nn.functional.cross_entropy(z, torch.from_numpy(_LABELS))
            + torch.logsumexp(torch.minimum(z, v["s"]), 1).mean() + picked.mean()
            + torch.clamp(z, -1.0, 1.0).mean())


ORACLE_GRAPHS = [
    Graph("embedding_where_ce_logsumexp_minimum_clip", _index_inputs, ("E", "W", "s"),
          _index_tape, _index_torch),
    Graph("relu_softmax_mlp_mse", _mlp_inputs, ("w1", "b1", "w2", "b2"), _mlp_tape, _mlp_torch),
    Graph("tanh_transpose_reshape_slice_concat", _chain_inputs, ("a", "b"), _chain_tape,
          _chain_torch),
    Graph("sigmoid_bmm", _bmm_inputs, ("p", "q"), _bmm_tape, _bmm_torch),
]


def run_tape(graph: Graph, backend: str, dtype: str = "float64", seed: int = 0,
             inner: str = "plain") -> dict:
    """Build ``graph`` on a fresh tape; every node's value and gradient as numpy, plus params'."""
    data = graph.inputs(np.random.default_rng(seed))
    with g.Tape(backend, dtype, inner=inner) as tp:
        v = {k: tp.param(a) if k in graph.params else tp.const(a) for k, a in data.items()}
        loss = graph.tape(v)
        tp.backward(loss)
        be = tp.backend
        return {"data": data, "loss": be.to_numpy(tp.value(loss)),
                "values": [be.to_numpy(a) for a in values(tp)],
                "grads": [None if a is None else be.to_numpy(a) for a in grads(tp)],
                "param_grads": {k: be.to_numpy(tp.grad(v[k])) for k in graph.params}}
