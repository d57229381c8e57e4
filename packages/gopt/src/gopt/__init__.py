"""gopt: SGD, Adam, AdamW and lr schedules over a gtape Tape, in gtensor ops (bit-exact).

An optimizer takes torch's ``params``: parameters, or param-group dicts (``params``, ``lr``,
``weight_decay``, ``betas``, ``eps``); ``opt.param_groups`` reads and writes them as torch's,
``opt.set_clip(max_norm, rule="torch")`` is ``clip_grad_norm_``'s coefficient over every
group, and the schedules act on every group (docs/optimizers.md). The form before groups --
``SGD(tp, lr)`` then ``opt.add(param, alpha)`` -- still works, on the same bits:

>>> import numpy as np
>>> import gtape as g
>>> from gopt import SGD
>>> tp = g.Tape()
>>> w = tp.param(np.array([1.0, -2.0]))
>>> opt = SGD(tp, lr=0.25)
>>> _ = opt.add(w)
>>> tp.backward(g.sum(w * w))
>>> opt.step()
>>> tp.value(w).tolist()
[0.5, -1.0]
>>> opt = SGD([{"params": [w], "lr": 0.5}], lr=0.1)
>>> opt.param_groups[0]["lr"], opt.lr
(0.5, 0.5)
"""

from __future__ import annotations

from . import schedules
from .adam import Adam, adam_lr_t
from .adamw import AdamW
from .base import Optimizer
from .sgd import SGD

__version__ = "0.1.0"
__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "__version__", "adam_lr_t", "schedules"]
