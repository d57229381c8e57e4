"""Layers of issue 21 as torch names and shapes them, initialised from ``gtape.rng``:
``Embedding`` (more follow: Conv2d, MaxPool2d, Dropout).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> emb = g.nn.Embedding(tp, 10, 4, key=g.rng.key(0))
>>> emb(np.array([[1, 2], [3, 1]])).shape, emb.weight.shape
((2, 2, 4), (10, 4))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .modules import Module
from .nn_init import KeyLike, as_key, normal_init
from .tape import Tape
from .var import Var


def _positive(where: str, name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{where}: {name} is {n!r}; expected an int >= 1")
    return int(n)


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by int ids (``g.embedding``:
    a gather forward, a serial scatter-add backward), torch's ``nn.Embedding``; the weight
    N(0, 1) from ``key`` (``gtape.nn_init.normal_init``). ``padding_idx`` and ``max_norm`` are
    not supported."""

    def __init__(self, tp: Tape, num_embeddings: int, embedding_dim: int,
                 key: KeyLike = 0) -> None:
        self.tp = tp
        self.num_embeddings = _positive("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = _positive("Embedding", "embedding_dim", embedding_dim)
        (kw,) = as_key("Embedding", key).split(1)
        self.weight = tp.param(normal_init(kw, (self.num_embeddings, self.embedding_dim)))

    def forward(self, ids: Any) -> Var:
        """weight[ids]: host int ids (any shape) become an int64 const of the tape."""
        if isinstance(ids, Var):
            return ops.embedding(self.weight, ids)
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise TypeError(f"Embedding: ids have dtype {a.dtype}; expected int ids")
        if a.size and (a.min() < 0 or a.max() >= self.num_embeddings):
            raise ValueError(f"Embedding: ids must lie in [0, {self.num_embeddings}); got "
                             f"[{a.min()}, {a.max()}]")
        return ops.embedding(self.weight, self.tp.const(a.astype(np.int64), name="ids",
                                                       dtype="int64"))

    def extra_repr(self) -> str:
        """num_embeddings, embedding_dim."""
        return f"{self.num_embeddings}, {self.embedding_dim}"
