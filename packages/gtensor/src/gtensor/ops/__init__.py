"""The op set. Importing this package registers every op in ``REGISTRY``."""

from . import (  # noqa: F401  (registration)
    avg_pool,
    conv,
    elementwise,
    index,
    linalg,
    logsoftmax,
    movement,
    optim,
    pool,
    random,
    reduce,
    select,
    softmax,
)
from .registry import REGISTRY, Op, get

__all__ = ["REGISTRY", "Op", "get"]
