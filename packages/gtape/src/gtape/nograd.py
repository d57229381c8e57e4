"""``with tp.no_grad():`` -- ops run and record as usual, but nothing inside needs a gradient
(torch's ``no_grad`` / ``inference_mode``): no backward work, no gradient memory, and
``backward`` is refused inside the block.

The block's nodes are not kept forever: its results stay readable after the block (e.g. the
logits of a sampling step), until the next ``no_grad`` block begins, which drops them when
nothing was recorded after them (and no param was registered among them) -- so a sampling
loop of ``no_grad`` blocks needs no episode and does not grow the tape. Any ``reset_to`` drops
them as it drops any node.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> w = tp.param(np.ones(3))
>>> with tp.no_grad():
...     y = g.sum(w * 2.0)
>>> y.requires_grad, y.item(), len(tp)
(False, 6.0, 4)
>>> with tp.no_grad():        # the previous block's nodes are dropped first
...     z = g.sum(w * 3.0)
>>> z.item(), len(tp), y.alive
(9.0, 4, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .leaves import PARAM

if TYPE_CHECKING:
    from .tape import Tape


class NoGrad:
    """The context manager of ``Tape.no_grad`` (re-entrant: nested blocks are one block)."""

    def __init__(self, tape: Tape) -> None:
        self._tape = tape

    def __enter__(self) -> Tape:
        tp = self._tape
        tp._check_open("no_grad")
        if tp._no_grad == 0:
            _drop_previous(tp)
            tp._no_grad_start = len(tp)
        tp._no_grad += 1
        return tp

    def __exit__(self, *exc: Any) -> None:
        tp = self._tape
        tp._no_grad -= 1
        if tp._no_grad == 0 and not tp.closed:
            n = len(tp)
            if n > tp._no_grad_start and PARAM not in tp._op[tp._no_grad_start:]:
                tp._no_grad_block = (tp._no_grad_start, tp._serial[n - 1])
            else:
                tp._no_grad_block = None


def _drop_previous(tp: Tape) -> None:
    """Drop the last ``no_grad`` block's nodes if they are still the tape's last nodes."""
    block = tp._no_grad_block
    tp._no_grad_block = None
    if block is None:
        return
    start, last_serial = block
    n = len(tp)
    if n > start and tp._serial[n - 1] == last_serial and start <= n:
        tp._commit_states(start)
        tp._truncate(start)
