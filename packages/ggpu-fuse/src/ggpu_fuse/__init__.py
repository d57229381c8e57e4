"""ggpu-fuse: a captured training step fused into a few generated kernels, bit-identical.

>>> import numpy as np, gtape as g
>>> from ggpu_replay import capture
>>> from ggpu_fuse import fuse
>>> tp = g.Tape()
>>> w = tp.param(np.full((3, 2), 0.5))
>>> x = tp.const(np.ones((4, 3)))
>>> prog = capture(tp, g.mse(g.relu(x @ w) * 2.0 + 1.0, np.zeros((4, 2))), backend="sim")
>>> fp = fuse(prog)
>>> fp.forward(); fp.backward()
>>> fp.loss(), fp.grad(w).ravel().tolist()
(16.0, [24.0, 24.0, 24.0, 24.0, 24.0, 24.0])
"""

from __future__ import annotations

from .program import Fused, FusedProgram, fuse, worthwhile

__version__ = "0.1.0"
__all__ = ["Fused", "FusedProgram", "__version__", "fuse", "worthwhile"]
