"""gtensor: tensor ops defined once, bit-identical on numpy, sim and cuda.

>>> import gtensor
>>> be = gtensor.backend("numpy")
>>> x = be.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> be.to_numpy(be.sum(be.matmul(x, x))).item()
54.0
"""

from __future__ import annotations

from .backends import NAMES as BACKENDS
from .backends import Backend, backend, host_backend
from .messages import describe
from .ops import REGISTRY, Op

__version__ = "0.1.0"
__all__ = ["BACKENDS", "Backend", "Op", "REGISTRY", "backend", "describe", "host_backend",
           "__version__"]
