"""gverify: prove two training runs are the same bits; when they are not, name the first step
and the first op (the two-phase check of a disputed run, in the open).

>>> import numpy as np, gtape as g, gopt
>>> from gverify import digest
>>> def run(backend):
...     tp = g.Tape(backend)
...     w = tp.param(np.array([0.5, -1.5]))
...     opt = gopt.Adam(tp, lr=0.1); _ = opt.add(w)
...     tp.backward(g.sum(w * w)); opt.step()
...     return digest(tp, opt)
>>> run("numpy") == run("sim")
True
"""

from __future__ import annotations

from . import faults
from .checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from .digests import digest
from .runlog import LogError, RunLog, StepDivergence, compare_logs, read_log
from .steptrace import (
    NodeDivergence,
    StepTrace,
    TraceError,
    first_divergence,
    load_trace,
    report,
    trace_step,
)

__version__ = "0.1.0"
__all__ = [
    "Checkpoint", "CheckpointError", "LogError", "NodeDivergence", "RunLog", "StepDivergence",
    "StepTrace", "TraceError", "__version__", "compare_logs", "digest", "faults",
    "first_divergence", "load_checkpoint", "load_trace", "read_checkpoint", "read_log",
    "report", "save_checkpoint", "trace_step",
]
