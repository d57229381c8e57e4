"""A float64 PyTorch oracle fed the same input bits: loss ~1e-15 relative, grads ~1e-13."""

from __future__ import annotations

import numpy as np
import pytest
from gtape_graphs import ORACLE_GRAPHS, run_tape
from gtape_testutil import rel_err, report

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("graph", ORACLE_GRAPHS, ids=[gr.name for gr in ORACLE_GRAPHS])
def test_pytorch_oracle(bname, graph):
    got = run_tape(graph, bname)
    tv = {k: torch.from_numpy(a.copy()).requires_grad_(k in graph.params)
          for k, a in got["data"].items()}
    assert all(t.dtype == torch.float64 for t in tv.values())
    loss = graph.torch(torch, tv)
    loss.backward()
    lerr = rel_err(got["loss"], loss.detach().numpy())
    gerr = max(rel_err(got["param_grads"][k], tv[k].grad.numpy()) for k in graph.params)
    report("torch oracle loss relative error", f"{graph.name}[{bname}]", lerr)
    report("torch oracle grad relative error", f"{graph.name}[{bname}]", gerr)
    print(f"{graph.name}: loss rel err {lerr:.2e}, worst grad rel err {gerr:.2e}")
    assert lerr <= 1e-15, f"loss differs from PyTorch by {lerr:.3e} (relative)"
    assert gerr <= 1e-13, f"a parameter gradient differs from PyTorch by {gerr:.3e}"
    assert np.isfinite(got["loss"]).all()
