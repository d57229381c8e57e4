"""gemit: a gtape per-example loss and its gradient emitted as standalone C or CUDA.

The emitted function runs gtensor's own kernels (their text, one thread) in the order the tape's
forward and backward ran them, so it is bitwise equal to the tape (compiled without FMA).

>>> import numpy as np, gtape as g
>>> from gemit import emit_c
>>> tp = g.Tape()
>>> w, x = tp.param(np.ones(2)), tp.const(np.ones(2))
>>> "grad(" in emit_c(tp, g.sum(w * x), params=[w], inputs=[x])
True
"""

from __future__ import annotations

from .build import GradFn, compile_c
from .emit import emit_c, emit_cuda

__version__ = "0.1.0"
__all__ = ["GradFn", "__version__", "compile_c", "emit_c", "emit_cuda"]
