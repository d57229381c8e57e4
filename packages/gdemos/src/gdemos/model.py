"""The d-64-32-64-d autoencoder: initial weights and its forward pass on a tape."""

from __future__ import annotations

import math

import gtape as g
import numpy as np

HIDDEN = (64, 32, 64)
INIT_GAIN = 0.5  # Glorot-uniform bound times this gain; biases start at 0


def layer_sizes(dim: int, hidden: tuple[int, ...] = HIDDEN) -> list[int]:
    """[dim, *hidden, dim]."""
    return [dim, *hidden, dim]


def init_params(rng: np.random.Generator, sizes: list[int]) -> list[np.ndarray]:
    """[W1, b1, W2, b2, ...]: W ~ U(-l, l), l = gain*sqrt(6/(fan_in+fan_out)); b = 0 (1, out)."""
    out = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = INIT_GAIN * math.sqrt(6.0 / (fan_in + fan_out))
        out.append(rng.uniform(-bound, bound, size=(fan_in, fan_out)))
        out.append(np.zeros((1, fan_out)))
    return out


def forward(x: g.Var, params: list[g.Var]) -> g.Var:
    """relu(x W1 + b1) ... then a linear output layer."""
    h = x
    n_layers = len(params) // 2
    for k in range(n_layers):
        h = h @ params[2 * k] + params[2 * k + 1]
        if k < n_layers - 1:
            h = g.relu(h)
    return h
