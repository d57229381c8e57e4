"""Episodes as a context manager: ``with tp.episode():`` marks, and resets on exit.

The mark/reset habit written once: the mark is taken on entry (after the parameters registered
so far), ``reset_to`` runs on exit -- also when the body raises -- so a training or evaluation
step leaves the tape as it found it: params and buffers kept, the episode's nodes dropped.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> w = tp.param(np.array([1.0, -2.0]))
>>> for step in range(3):
...     with tp.episode():
...         loss = g.sum(w * w)
...         loss.backward()
...         grad = w.grad.tolist()
>>> len(tp), grad, w.grad
(1, [2.0, -4.0], None)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .leaves import PARAM

if TYPE_CHECKING:
    from .tape import Mark, Tape


class EpisodeError(RuntimeError):
    """A parameter was registered inside ``with tp.episode():`` (the exit's reset drops it)."""


class Episode:
    """The context manager ``Tape.episode`` returns; ``with`` gives the entry mark."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.mark: Mark | None = None

    def __enter__(self) -> Mark:
        if self.mark is not None:
            raise RuntimeError("episode: this episode is already open; call tp.episode() again "
                               "for each `with` block")
        self.mark = self.tape.mark()
        return self.mark

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        tp, mark = self.tape, self.mark
        if tp.closed:
            return
        # NOTE: read from the op list directly: a node description per node would cost more
        # than the reset itself on long episodes
        born = [mark.length + k for k, op in enumerate(tp._op[mark.length:]) if op is PARAM]
        tp.reset_to(mark)
        if born and exc_type is None:
            raise EpisodeError(
                f"episode: param node(s) {born} were registered inside `with tp.episode():`; "
                "leaving the episode dropped them with every other node it recorded. Register "
                "the params (build the model) before the `with tp.episode():` block")


def dropped_param_message(where: str, index: int) -> str:
    """The error for a param Var that a ``reset_to`` dropped: the mark came before the params."""
    return (f"{where}: the Var is parameter node {index}, which reset_to dropped: the mark was "
            "taken before the params were registered, so each reset_to(mark) throws the "
            "params away. Take mark = tp.mark() after registering every param (after building "
            "the model), or write each step as `with tp.episode(): ...`, which marks on entry")
