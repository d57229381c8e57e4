"""gdist: exact data-parallel training of any gtape model on a Dask cluster.

The batch is cut into microbatches of m rows in order; each microbatch's gradient is computed
by a replica (one per worker, built once, holding its optimizer and resident data); the
gradients are summed in a fixed pairwise tree over microbatch index (never over workers),
between the replicas, then divided by their count; every replica steps its own optimizer on
that. The bits depend on the data, m and the tree only: 1, 2 or N workers, any placement,
any completion order, and ``gdist.Local`` (one process, no Dask) give the same bits.

>>> import numpy as np, gtape as g, gopt, gdist
>>> def loss_fn(tp, params, batch):
...     return g.mse(batch["x"] @ params["w"], batch["y"])
>>> x = np.linspace(-1.0, 1.0, 24).reshape(8, 3)
>>> a = gdist.Local(loss_fn, {"w": np.zeros((3, 1))}, gopt.Adam, {"lr": 0.1}, microbatch=2)
>>> b = gdist.Local(loss_fn, {"w": np.zeros((3, 1))}, gopt.Adam, {"lr": 0.1}, microbatch=2)
>>> for t in (a, b):
...     _ = [t.step({"x": x, "y": x[:, :1] * 2}) for _ in range(3)]
>>> a.digest() == b.digest()
True
"""

from __future__ import annotations

from . import faults, tree
from .capture import CaptureRefused
from .cluster import ReplicaMismatch, WorkerRefused
from .digest import params_digest
from .stats import stats as worker_stats
from .trainer import DataParallel, Local, OptimizerView, Trainer

__version__ = "0.1.0"
__all__ = ["CaptureRefused", "DataParallel", "Local", "OptimizerView", "ReplicaMismatch",
           "Trainer", "WorkerRefused", "__version__", "faults", "params_digest", "tree",
           "worker_stats"]
