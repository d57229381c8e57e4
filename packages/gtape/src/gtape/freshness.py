"""Freshness checks: parameter write clocks, stale Var errors, the tape growth warning."""

from __future__ import annotations

import warnings
from typing import Any

from gtensor import describe

from .leaves import PARAM, STATE, Leaf
from .var import StaleVarError, Var

GROWTH_WARNING_AFTER = 8  # backward calls on an ever longer tape without a reset_to


class TapeGrowthWarning(UserWarning):
    """Episodes pile up on a tape: backward after backward with no ``reset_to`` in between."""


class Freshness:
    """Staleness bookkeeping, mixed into ``Tape`` (reads its node table and ``_closed``)."""

    def _init_freshness(self) -> None:
        """Fresh clocks: a clock ticks at every set_value; each node remembers the clock it was
        recorded at (``_node_clock``), each param the clock of its last write."""
        self._clock = 0
        self._written: dict[int, int] = {}
        self._last_write = -1
        self._growth: list[int] = []  # tape lengths at the backward calls since the last reset
        self._warned_growth = False
        self._dropped_params: dict[int, int] = {}  # serial -> index of params reset_to dropped

    def _note_write(self, i: int) -> None:
        """Tick the clock for a write of param (or state) node ``i``."""
        self._clock += 1
        self._written[i] = self._last_write = self._clock

    def _check_fresh(self, loss: int) -> None:
        """Refuse gradients of a forward whose parameter values were overwritten since."""
        last = self._last_write
        # NOTE: clocks never decrease along the tape, so only a prefix can be stale
        stale = 0
        while stale <= loss and self._node_clock[stale] < last:
            stale += 1
        if not any(not isinstance(self._op[k], Leaf) for k in range(stale)):
            return
        needed = [False] * (loss + 1)  # the loss's ancestors: only their values matter
        needed[loss] = True
        for k in range(loss, -1, -1):
            if needed[k]:
                for j in self._inputs[k]:
                    needed[j] = True
        for k in range(stale):
            if not needed[k] or isinstance(self._op[k], Leaf):
                continue
            for j in self._inputs[k]:
                if (self._op[j] is PARAM or self._op[j] is STATE) and \
                        self._written.get(j, -1) > self._node_clock[k]:
                    what = ("parameter node {j} was overwritten (set_value or an optimizer "
                            "step)" if self._op[j] is PARAM else
                            "state node {j} was overwritten (set_state or a state update)")
                    raise RuntimeError(
                        f"backward: {what.format(j=j)} after node {k} "
                        f"({self._op[k].name}) used it in the "
                        "forward; the gradients would belong to neither value. Record the "
                        "episode again after the update (reset_to(mark), then rebuild the loss)")

    def _note_growth(self) -> None:
        """Warn once when episodes pile up on the tape (backward after backward, no reset)."""
        if self._growth and len(self) <= self._growth[-1]:
            self._growth = []
        self._growth.append(len(self))
        if len(self._growth) >= GROWTH_WARNING_AFTER and not self._warned_growth:
            self._warned_growth = True
            warnings.warn(
                f"the tape has grown to {len(self)} nodes over {len(self._growth)} backward "
                "calls without reset_to: every episode stays recorded (memory and time grow "
                "with each step). Take mark = tp.mark() after registering the params and call "
                "tp.reset_to(mark) after each step", TapeGrowthWarning, stacklevel=3)

    def _note_dropped_params(self, n: int) -> None:
        """Remember the params a reset to length ``n`` drops (their Vars' errors name it)."""
        if PARAM not in self._op[n:]:  # the common case, at C speed: an episode of op nodes
            return
        for i in range(n, len(self._op)):
            if self._op[i] is PARAM:
                if len(self._dropped_params) >= 4096:
                    self._dropped_params.clear()
                self._dropped_params[self._serial[i]] = i

    def _check_open(self, where: str) -> None:
        if self._closed:
            raise RuntimeError(f"{where}: the tape is closed; its values and gradients were "
                               "released")

    def _alive(self, v: Var) -> bool:
        i = v.index
        return not self._closed and i < len(self._serial) and self._serial[i] == v._serial

    def _check_var(self, v: Any, where: str) -> None:
        if not isinstance(v, Var):
            raise TypeError(f"{where}: expected a Var, got {describe(v)}")
        if v.tape is not self:
            raise ValueError(f"{where}: the Var belongs to another tape")
        if self._closed:
            raise StaleVarError(f"{where}: the Var's tape is closed; its values and gradients "
                                "were released")
        if not self._alive(v) and v._serial in self._dropped_params:
            from .episode import dropped_param_message
            raise StaleVarError(dropped_param_message(where, v.index))
        if not self._alive(v):
            raise StaleVarError(f"{where}: the Var of node {v.index} was dropped by reset_to "
                                "(its node and buffers now belong to a later episode); use the "
                                "Vars of the current episode")
