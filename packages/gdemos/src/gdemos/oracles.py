"""Independent bars for the rungs (optional dependencies, imported on use)."""

from __future__ import annotations

import warnings

import numpy as np

from . import model


def sklearn_alpha(alpha: float, batch: int, dim: int) -> float:
    """sklearn's ``alpha`` that gives the same update direction as our L2 ``g + alpha*p``.

    sklearn's weight gradient is (a^T delta + alpha_s W) / batch for the loss sum((p-y)^2)/2 per
    row; ours is a^T 2 (p-y) / (batch*dim) + alpha W: the two are proportional (Adam is blind to
    the factor) when alpha_s = alpha * batch * dim / 2.
    """
    return alpha * batch * dim / 2.0


def sklearn_ae_mse(x: np.ndarray, seed: int, epochs: int, batch: int, lr: float,
                   alpha: float) -> float:
    """Final full-data MSE of sklearn's MLPRegressor trained as the same autoencoder."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    reg = MLPRegressor(hidden_layer_sizes=model.HIDDEN, activation="relu", solver="adam",
                       alpha=sklearn_alpha(alpha, batch, x.shape[1]), batch_size=batch,
                       learning_rate_init=lr, max_iter=epochs, shuffle=True, random_state=seed,
                       tol=0.0, n_iter_no_change=epochs + 1, early_stopping=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(x, x)
    return float(np.mean((reg.predict(x) - x) ** 2))
