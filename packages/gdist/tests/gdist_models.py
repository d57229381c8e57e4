"""The two models the tests train (and their data), plus loss_fns that fail on purpose.

Registered with cloudpickle by value: worker processes get the functions themselves.
"""

from __future__ import annotations

import os
import signal

import cloudpickle
import gopt
import gtape as g
import numpy as np


def mlp_ce(tp, params, batch):
    """A relu MLP classifier: cross-entropy against int labels."""
    h = g.relu(batch["x"] @ params["W1"] + params["b1"])
    return g.cross_entropy(h @ params["W2"] + params["b2"], batch["y"])


def tanh_reg(tp, params, batch):
    """A tanh regression net with a skip term: mean squared error against float targets."""
    h = g.tanh(batch["x"] @ params["enc"])
    pred = h @ params["dec"] + batch["x"] @ params["skip"] + params["bias"]
    return g.mse(pred, batch["t"])


def mlp_ce_boom(tp, params, batch):
    """``mlp_ce``, but a microbatch with a nonzero ``boom`` row raises."""
    if np.any(batch["boom"]):
        raise RuntimeError("boom: this microbatch refuses to run")
    return mlp_ce(tp, params, {"x": batch["x"], "y": batch["y"]})


def killer(flag: str, driver_pid: int):
    """``mlp_ce``, but the first call in any process other than the driver SIGKILLs its own
    process (once: the flag file records it)."""

    def loss_fn(tp, params, batch):
        if os.getpid() != driver_pid and not os.path.exists(flag):
            with open(flag, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return mlp_ce(tp, params, batch)

    return loss_fn


def returns_non_scalar(tp, params, batch):
    """A mistake: the per-row losses instead of their mean."""
    return batch["x"] @ params["W1"]




def mlp_case(seed: int = 0, rows: int = 24):
    """(init params, batch) of the classifier: 8 features, 16 hidden, 3 classes."""
    rng = np.random.default_rng(seed)
    init = {"W1": rng.normal(0, 0.4, (8, 16)), "b1": rng.normal(0, 0.1, (1, 16)),
            "W2": rng.normal(0, 0.4, (16, 3)), "b2": np.zeros((1, 3))}
    batches = [{"x": rng.normal(size=(rows, 8)), "y": rng.integers(0, 3, rows)}
               for _ in range(3)]
    return init, batches


def tanh_case(seed: int = 1, rows: int = 15):
    """(init params, batches) of the regression net: 5 features, 7 hidden, 2 targets."""
    rng = np.random.default_rng(seed)
    init = {"enc": rng.normal(0, 0.5, (5, 7)), "dec": rng.normal(0, 0.5, (7, 2)),
            "skip": rng.normal(0, 0.1, (5, 2)), "bias": np.zeros((1, 2))}
    batches = [{"x": rng.normal(size=(rows, 5)), "t": rng.normal(size=(rows, 2))}
               for _ in range(3)]
    return init, batches


# name -> (loss_fn, case, microbatch, optimizer, opt kwargs, trainer extras)
CASES = {
    "mlp": (mlp_ce, mlp_case, 4, gopt.Adam, {"lr": 1e-2}, {"l2": {"W1": 1e-3, "W2": 1e-3}}),
    "tanh": (tanh_reg, tanh_case, 5, gopt.SGD, {"lr": 0.05}, {"clip": 0.5, "l2": 1e-4}),
}

cloudpickle.register_pickle_by_value(__import__(__name__))
