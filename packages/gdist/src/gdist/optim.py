"""A replica's optimizer: gopt's, over the replica's parameter store, stepped on the reduced
gradient; its device half recorded once and replayed (one native call on cpu).

The optimizer is built exactly as the definition says -- ``optimizer(store, **opt_kwargs)``
with every parameter added with its L2 weight, or ``optimizer(groups, store=store,
**opt_kwargs)`` with torch-style groups of the named parameters -- then ``set_clip`` and the
schedule. Every replica builds the same optimizer and applies the same reduced gradient, so
every replica lands on the same bits, and ``Local`` on them too.
"""

from __future__ import annotations

from typing import Any

import gopt
from gtape.recording import Recording
from gtensor.recording import Recorder, replayable

from .definition import Definition, check_names
from .store import GradStore


def build(where: str, defn: Definition, store: GradStore) -> gopt.Optimizer:
    """The definition's optimizer over ``store`` (parameters, groups, L2 weights, clip)."""
    names = list(store.vars)
    check_names(where, defn, names)
    kind = defn.optimizer
    alphas = ({n: float(defn.l2.get(n, 0.0)) for n in names} if isinstance(defn.l2, dict)
              else {n: float(defn.l2) for n in names})
    try:
        if defn.param_groups is None:
            opt = kind(store, **defn.opt_kwargs)
            for n in names:
                opt.add(store.vars[n], alphas[n])
        else:
            groups = [{**g, "params": [store.vars[n] for n in g["params"]]}
                      for g in defn.param_groups]
            opt = kind(groups, store=store, **defn.opt_kwargs)
            for n in names:
                if n in defn.l2 if isinstance(defn.l2, dict) else defn.l2:
                    opt.set_alpha(store.vars[n], alphas[n])
    except TypeError as e:
        raise TypeError(f"{where}: {kind.__name__}(**opt_kwargs) refused "
                        f"{defn.opt_kwargs!r}: {e}") from None
    if defn.clip is not None:
        opt.set_clip(defn.clip, rule=defn.clip_rule)
    return opt


class Stepper:
    """``opt.step()`` with the device half recorded on the store's Recorder the first time
    and replayed after (re-recorded when the optimizer's configuration or the buffers move)."""

    def __init__(self, opt: gopt.Optimizer, store: GradStore) -> None:
        self.opt, self.store = opt, store
        self.rec = store.backend if isinstance(store.backend, Recorder) else None
        self._replay: Recording[Any] = Recording("gdist's recorded optimizer step",
                                                 opt.recorded_deps)

    def step(self) -> None:
        """One optimizer step on the store's current gradients."""
        if self.rec is None:
            self.opt.step()
            return
        self.opt.check_step()
        self.opt.advance()
        key = self.store.buffers_key()
        run = self._replay.current(key)
        if run is None:
            with self.rec.recording() as launches:
                self.opt.device_step()
            self._replay.keep(replayable(self.rec, launches), key)
        else:
            run()
            for p in self.opt.params:
                self.store.note_updated(p)
