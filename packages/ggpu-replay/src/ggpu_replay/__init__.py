"""ggpu-replay: capture one training episode of a gtape tape, replay it on a device bit-exactly.

>>> import numpy as np, gtape as g
>>> from ggpu_replay import capture
>>> tp = g.Tape()
>>> w = tp.param(np.array([[0.5], [-0.25]]))
>>> x = tp.const(np.ones((3, 2)))
>>> loss = g.mse(x @ w, np.zeros((3, 1)))
>>> prog = capture(tp, loss, backend="sim")
>>> dopt = prog.sgd(lr=0.1)
>>> _ = dopt.add(w)
>>> prog.set_input(x, np.full((3, 2), 2.0))
>>> prog.step(dopt)
>>> prog.loss()
0.25
>>> prog.sync_params(tp)
>>> tp.value(w).ravel().tolist()
[0.3, -0.45]
"""

from __future__ import annotations

from gtape.trace import CaptureError

from .optim import DeviceOptimizer
from .program import Program, StaleInputError, capture

__version__ = "0.1.0"
__all__ = ["CaptureError", "DeviceOptimizer", "Program", "StaleInputError", "__version__",
           "capture"]
