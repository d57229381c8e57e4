"""Backward passes replayed: a steady training loop records the same graph on the same buffers
every episode, so its backward pass launches the same kernels on the same buffers each time.

The second time in a row that ``backward`` meets a graph (same nodes, ops, inputs, attributes,
shapes, requires-grad flags and value buffers) its pass is recorded on a kernel backend; from
then on, while the graph stays the same, the recording is replayed -- the same launches in the
same order on the same buffers, so the same bits (on cpu: one native call). Any difference
runs the pass op by op again. The numpy backend always runs op by op.
"""

from __future__ import annotations

from typing import Any

from gtensor.ops.registry import attr_key
from gtensor.recording import record, recordable

from . import backward as _backward
from .buffers import ReusedOutputs
from .recording import Recording


def graph_key(graph: _backward.Graph, loss: int) -> tuple | None:
    """Everything a backward pass's launches depend on, or None when an attribute is
    unhashable (such a pass is never replayed). Attributes compare by ``attr_key`` (-0.0 is
    not 0.0); value buffers by identity."""
    try:
        attrs = tuple([tuple([(k, attr_key(v)) for k, v in a.items()]) if a else ()
                       for a in graph.attrs])
    except TypeError:
        return None
    return (loss, tuple(graph.ops), tuple(graph.inputs), tuple(graph.shapes), tuple(graph.req),
            tuple(map(id, graph.values)), attrs)


class BackwardPasses:
    """Runs a tape's backward passes, replaying the recorded pass of a repeated graph."""

    def __init__(self, be: Any) -> None:
        self.be = be
        self.outputs = ReusedOutputs(be)  # stable homes of the pass's results
        self._seen: tuple | None = None  # the key of the last pass
        # (run, grads after the pass, stats, the values the key names: kept alive so their
        # ids stay theirs), recorded under the graph's key
        self._recorded: Recording[tuple] = Recording("the recorded backward pass")

    @property
    def replaying(self) -> bool:
        """Whether a recorded pass is held (the next pass of its graph replays it)."""
        return self._recorded.held is not None

    def clear(self) -> None:
        """Drop the recording and every kept buffer."""
        self.outputs.clear()
        self._seen = None
        self._recorded.clear()

    def run(self, graph: _backward.Graph, loss: int, dtype: Any) -> dict:
        """``backward.run`` of ``graph`` from ``loss`` (replayed when recorded); its stats."""
        key = graph_key(graph, loss) if recordable(self.be) else None
        held = self._recorded.current(key) if key is not None else None
        if held is not None:
            held[0]()
            graph.grads[:] = held[1]
            return dict(held[2])
        self.outputs.start()
        if key is None or key != self._seen:
            self._seen = key
            return _backward.run(self.outputs, graph, loss, dtype)

        def on(rec: Any) -> dict:  # the second pass in a row over this graph: record it
            self.outputs.inner = rec
            try:
                return _backward.run(self.outputs, graph, loss, dtype)
            finally:
                self.outputs.inner = self.be

        stats, run = record(self.be, on)
        self._recorded.keep((run, list(graph.grads), dict(stats), tuple(graph.values)), key)
        return stats
