"""Rung 1's three bars, on one shared full run (60 epochs, 600 Adam steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gdemos import ae, data, model

sklearn = pytest.importorskip("sklearn")


def test_mse_falls_from_about_0_3_to_the_bar(full_run):
    assert 0.25 <= full_run.initial_mse <= 0.35, full_run.initial_mse
    assert full_run.steps == 600 and len(full_run.losses) == 600
    assert full_run.final_mse <= ae.MSE_BAR, full_run.final_mse


def test_final_mse_at_or_below_sklearn(full_run):
    from gdemos.oracles import sklearn_ae_mse

    cfg = full_run.config
    x = data.manifold(cfg.seed, cfg.n, cfg.noise)
    sk = sklearn_ae_mse(x, cfg.seed, cfg.epochs, cfg.batch, cfg.lr, cfg.alpha)
    assert full_run.final_mse <= sk, (full_run.final_mse, sk)


def _numpy_backprop_losses(cfg: ae.AEConfig) -> list[float]:
    """The same network and Adam, written plainly in numpy (BLAS matmuls, numpy reductions)."""
    x = data.manifold(cfg.seed, cfg.n, cfg.noise)
    _, init_rng, order_rng = data.rngs(cfg.seed)
    params = model.init_params(init_rng, model.layer_sizes(x.shape[1]))
    ws, bs = params[0::2], params[1::2]
    mw = [np.zeros_like(w) for w in ws]
    vw = [np.zeros_like(w) for w in ws]
    mb = [np.zeros_like(b) for b in bs]
    vb = [np.zeros_like(b) for b in bs]
    b1, b2, eps = 0.9, 0.999, 1e-8
    b1_pow = b2_pow = 1.0
    losses = []
    for _ in range(cfg.epochs):
        for idx in data.batch_order(order_rng, cfg.n, cfg.batch):
            xb = x[idx]
            # forward: keep every layer's input and pre-activation
            acts, pre = [xb], []
            for k in range(4):
                z = acts[-1] @ ws[k] + bs[k]
                pre.append(z)
                acts.append(np.maximum(z, 0.0) if k < 3 else z)
            diff = acts[-1] - xb
            losses.append(float(np.mean(diff * diff)))
            # backward
            delta = 2.0 * diff / diff.size
            gw, gb = [None] * 4, [None] * 4
            for k in range(3, -1, -1):
                gw[k] = acts[k].T @ delta
                gb[k] = delta.sum(axis=0, keepdims=True)
                if k > 0:
                    delta = (delta @ ws[k].T) * (pre[k - 1] > 0)
            # Adam with L2 on the weights
            b1_pow *= b1
            b2_pow *= b2
            lr_t = cfg.lr * math.sqrt(1.0 - b2_pow) / (1.0 - b1_pow)
            for k in range(4):
                gw[k] = gw[k] + cfg.alpha * ws[k]
                for p, gr, m, v in ((ws[k], gw[k], mw[k], vw[k]), (bs[k], gb[k], mb[k], vb[k])):
                    m[...] = b1 * m + (1.0 - b1) * gr
                    v[...] = b2 * v + (1.0 - b2) * (gr * gr)
                    p -= lr_t * m / (np.sqrt(v) + eps)
    return losses


def test_hand_written_numpy_backprop_agrees_to_13_digits(full_run):
    want = np.array(_numpy_backprop_losses(full_run.config))
    got = np.array(full_run.losses)
    rel = np.abs(got - want) / np.abs(want)
    worst = float(rel.max())
    print(f"tape vs hand-written numpy backprop: worst relative loss difference {worst:.2e} "
          f"over {len(got)} steps")
    assert worst <= 1e-13, (worst, int(rel.argmax()))
