"""gopt: SGD, Adam, AdamW and lr schedules over a gtape Tape, in gtensor ops (bit-exact).

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
"""

from __future__ import annotations

from . import schedules
from .adam import Adam, adam_lr_t
from .adamw import AdamW
from .base import Optimizer
from .sgd import SGD

__version__ = "0.1.0"
__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "__version__", "adam_lr_t", "schedules"]
