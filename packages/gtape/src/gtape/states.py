"""Tape-resident state: leaves that are not trained but that the training step updates
(BatchNorm's running statistics), mixed into ``Tape``.

A state is a leaf of kind ``STATE`` (``tp.state(x)``): registered like a parameter (before
the episode's mark, so it survives ``reset_to``), with no gradient. An update is data flow,
not a write: ``tp.update_state(s, v)`` says "s's value is now v's" for a Var ``v`` computed
in the episode (the new running mean, from the batch's mean), and ``tp.state_var(s)`` is the
state's current value as a Var -- ``v`` while the update is pending, else the leaf -- so a
second update in one episode chains on the first exactly as torch's in-place updates do,
while every node keeps the value it was computed from. The pending value is written into the
leaf's buffer (the ``copy`` op) when its node is dropped: by ``reset_to`` or by a ``no_grad``
block dropping the previous one. So:

* an eager training loop (``with tp.episode(): ...``) ends each step with the state updated
  once per forward, as torch's;
* a captured program (``gtape.trace``) copies each pending value into the state's buffer at
  the end of its backward launches: a replayed step updates the state exactly as the eager
  step does (the trace starts from the leaf's value, the episode's start);
* readers of a run's state (``Module.state_dict``, gverify's digests and checkpoints) read the
  current value (``state_value``).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> s = tp.state(np.zeros(2))
>>> mark = tp.mark()
>>> tp.update_state(s, tp.state_var(s) + 1.0)
>>> tp.update_state(s, tp.state_var(s) * 3.0)
>>> tp.state_value(s).tolist(), tp.value(s).tolist()
([3.0, 3.0], [0.0, 0.0])
>>> tp.reset_to(mark)
>>> tp.value(s).tolist()
[3.0, 3.0]
"""

from __future__ import annotations

from typing import Any

from gtensor import describe

from .convert import to_backend
from .leaves import STATE
from .var import Var


class States:
    """State leaves and their pending updates (mixed into ``Tape``: reads its node table)."""

    def _init_states(self) -> None:
        """No pending update: state index -> (source index, source serial)."""
        self._pending: dict[int, tuple[int, int]] = {}

    def state(self, x: Any) -> Var:
        """Register a state leaf (``x`` copied in, tape dtype): not trained, no gradient;
        updated by ``update_state``. Register it before the episode's mark, as a param."""
        self._check_open("state")
        value = to_backend(self._be, x, self._dtype, "state")
        return self._append(STATE, (), {}, value, False)

    def states(self) -> list[Var]:
        """The state Vars, in registration order."""
        self._check_open("states")
        return [self._var(i) for i, op in enumerate(self._op) if op is STATE]

    def _check_state(self, s: Any, where: str) -> int:
        self._check_var(s, where)
        if self._op[s.index] is not STATE:
            raise ValueError(f"{where}: {s!r} is a {self._op[s.index].name!r} node; expected a "
                             "state made by tp.state(...)")
        return s.index

    def update_state(self, s: Var, v: Var) -> None:
        """State ``s`` takes ``v``'s value (a Var of this tape, of ``s``'s shape and the
        tape's dtype): pending until ``v``'s node is dropped, then copied into ``s``'s
        buffer; ``state_var(s)`` is ``v`` meanwhile."""
        j = self._check_state(s, "update_state")
        if not isinstance(v, Var) or v.tape is not self:
            raise TypeError(f"update_state: v is {describe(v)}; expected a Var of this tape")
        self._check_var(v, "update_state")
        if self._shape[v.index] != self._shape[j] or self._values[v.index].dtype != self._dtype:
            raise ValueError(f"update_state: v has shape {self._shape[v.index]} and dtype "
                             f"{self._values[v.index].dtype}; state node {j} holds "
                             f"{self._shape[j]} of {self._dtype}")
        if v.index < j:
            raise ValueError(f"update_state: v (node {v.index}) was recorded before state "
                             f"node {j}; expected a value computed after it")
        self._pending[j] = (v.index, v.serial)

    def state_var(self, s: Var) -> Var:
        """State ``s``'s current value as a Var: its pending update, else ``s`` itself."""
        j = self._check_state(s, "state_var")
        got = self._pending.get(j)
        return s if got is None else self._var(got[0])

    def state_value(self, s: Var) -> Any:
        """A read-only view of state ``s``'s current value (its pending update's, if any)."""
        return self.value(self.state_var(s))

    def set_state(self, s: Var, x: Any) -> None:
        """Overwrite state ``s`` with ``x`` (its shape), dropping a pending update (a load)."""
        j = self._check_state(s, "set_state")
        src = to_backend(self._be, x, self._dtype, "set_state")
        if tuple(src.shape) != self._shape[j]:
            raise ValueError(f"set_state: state node {j} has shape {self._shape[j]}; got "
                             f"{describe(x)}; expected the same shape")
        self._be.copy(src, out=self._values[j])
        self._pending.pop(j, None)
        self._note_write(j)

    def pending_states(self) -> list[tuple[int, int]]:
        """(state index, source index) of every pending update, in state order."""
        self._check_open("pending_states")
        return sorted((j, i) for j, (i, _) in self._pending.items())

    def _commit_states(self, n: int) -> None:
        """Before the nodes from index ``n`` on are dropped: write each pending update whose
        source goes into its state's buffer (states dropped themselves forget theirs)."""
        if not self._pending:
            return
        for j, (i, _) in sorted(self._pending.items()):
            if j >= n:
                del self._pending[j]
            elif i >= n:
                self._be.copy(self._values[i], out=self._values[j])
                self._note_write(j)
                del self._pending[j]
