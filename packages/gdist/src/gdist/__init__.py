"""gdist: exact data-parallel training of any gtape tape on a Dask cluster.

The batch is cut into microbatches of m rows in order; each microbatch's gradient is computed
by a tape on some worker; the gradients are summed in a fixed pairwise tree over microbatch
index (never over workers), then divided by their count; the driver's gopt optimizer steps once
on that. The bits depend on the data, m and the tree only: 1, 2 or N workers, any placement,
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

from . import tree
from .digest import params_digest
from .trainer import DataParallel, Local, Trainer
from .worker import stats as worker_stats

__version__ = "0.1.0"
__all__ = ["DataParallel", "Local", "Trainer", "__version__", "params_digest", "tree",
           "worker_stats"]
