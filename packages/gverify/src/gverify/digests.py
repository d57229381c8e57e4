"""``digest(tp, opt)``: the SHA-256 of a run's state (parameters + optimizer), canonical bytes."""

from __future__ import annotations

from typing import Any

from . import canonical, store


def digest(tp: Any, opt: Any = None) -> str:
    """The hex SHA-256 over the canonical bytes of ``tp``'s parameters and ``opt``'s state.

    ``tp`` is a ``gtape.Tape`` or a captured ``ggpu_replay.Program``; ``opt`` its optimizer (a
    ``gopt`` optimizer or the program's ``DeviceOptimizer``) or None. Covered: the tape's dtype,
    every parameter's node index, shape and bits, the optimizer's kind, step count,
    hyperparameters, host scalars, L2 weights, registered parameters and every state buffer.
    Not covered: the backend, array types, memory layout, byte order, NaN payloads.

    >>> import numpy as np, gtape as g, gopt
    >>> tp = g.Tape()
    >>> w = tp.param(np.array([1.0, 2.0]))
    >>> opt = gopt.SGD(tp, lr=0.1); _ = opt.add(w)
    >>> len(digest(tp, opt)), digest(tp, opt) == digest(g.Tape("numpy"), None)
    (64, False)
    """
    return canonical.entries_digest(store.entries(tp, opt, "digest"))
