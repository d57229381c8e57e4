"""The op set. Importing this package registers every op in ``REGISTRY``."""

from . import elementwise, index, linalg, logsoftmax, movement, optim, reduce, select, softmax  # noqa: F401  (registration)
from .registry import REGISTRY, Op, get

__all__ = ["REGISTRY", "Op", "get"]
