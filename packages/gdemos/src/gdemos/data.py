"""The rung-1 data set: a noisy 2-D manifold (a patch of the unit sphere) embedded in 6-D.

Built from uniform draws, + - * / and sqrt only (no libm, no BLAS), so the clean points are the
same bits on every machine; the noise is numpy's ``Generator.standard_normal``.
"""

from __future__ import annotations

import math

import numpy as np

DIM = 6
N = 2000
NOISE = 0.01
SPAN = 1.5       # latent coordinates a, b ~ U(-SPAN, SPAN)
MEAN_SQUARE = 0.3  # target mean square of the clean data (so an untrained AE starts near 0.3)

# three orthonormal directions of R^6 (columns), written out: the embedding of the sphere
_E = np.array([
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    [1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
    [1.0, 1.0, -1.0, -1.0, 0.0, 0.0],
]).T * np.array([1.0 / math.sqrt(6.0), 1.0 / math.sqrt(6.0), 0.5])


def rngs(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """Independent generators for (data, initial weights, minibatch order) from one seed."""
    data, init, order = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(data), np.random.default_rng(init), np.random.default_rng(order)


def manifold(seed: int, n: int = N, noise: float = NOISE) -> np.ndarray:
    """``n`` points (n, 6) in float64: a sphere patch (gnomonic chart) embedded, plus noise."""
    rng = rngs(seed)[0]
    ab = rng.uniform(-SPAN, SPAN, size=(n, 2))
    a, b = ab[:, 0], ab[:, 1]
    r = np.sqrt(a * a + b * b + 1.0)
    sphere = (a / r, b / r, 1.0 / r)  # a point of the unit sphere
    scale = math.sqrt(MEAN_SQUARE * DIM)  # unit-norm rows -> mean square MEAN_SQUARE
    x = np.zeros((n, DIM))
    for i in range(DIM):
        col = _E[i, 0] * sphere[0] + _E[i, 1] * sphere[1] + _E[i, 2] * sphere[2]
        x[:, i] = col * scale
    return x + noise * rng.standard_normal((n, DIM))


def batch_order(rng: np.random.Generator, n: int, batch: int) -> list[np.ndarray]:
    """One epoch's minibatches: a fresh permutation cut into index blocks of ``batch``."""
    perm = rng.permutation(n)
    return [perm[s:s + batch] for s in range(0, n, batch)]
