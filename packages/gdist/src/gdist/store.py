"""A replica's parameters as a gopt *parameter store*: the model's values, the reduced gradient.

gopt's optimizers step over a ``gtape.Tape`` or any object with ``backend``, ``dtype``,
``value(p)``, ``grad(p)``, ``set_value(p, x)`` and ``check_param(where, p)`` (see
``gopt.Optimizer``). Here the parameters are the model's own param Vars and their values are
the buffers the model computes with (the tape's, or the captured program's), updated in place;
the gradient is not a local backward's but written in: the batch gradient reduced along the
fixed tree (``set_grads``). The optimizer then steps on it with its usual ops, clip and L2
included.

On a kernel backend the store's backend is a ``gtensor.recording.Recorder``: ops run as usual,
and the optimizer's device half can be recorded once and replayed as one native call
(``gdist.optim``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gtape
import gtensor
import numpy as np
from gtensor import describe
from gtensor.recording import Recorder, recordable

from .model import Model


class GradStore:
    """The model's parameters (values in place) with separately written gradients."""

    def __init__(self, model: Model) -> None:
        inner = gtensor.backend(model.defn.backend)
        self._be = Recorder(inner) if recordable(inner) else inner
        self._model = model
        self._dtype = np.dtype(model.defn.dtype)
        self.vars = dict(model.vars)
        self._name = {v.index: n for n, v in self.vars.items()}
        self._grads = {n: self._be.zeros(tuple(v.shape), self._dtype)
                       for n, v in self.vars.items()}
        self._count = 0

    @property
    def backend(self) -> Any:
        """The backend every value and gradient lives on (a Recorder over a kernel backend)."""
        return self._be

    @property
    def dtype(self) -> np.dtype:
        """float64 or float32."""
        return self._dtype

    @property
    def backward_count(self) -> int:
        """Gradients written so far (gopt refuses a step without new ones)."""
        return self._count

    def check_param(self, where: str, p: Any) -> gtape.Var:
        """``p`` checked to be one of the model's parameter Vars."""
        if not isinstance(p, gtape.Var) or self.vars.get(self._name.get(p.index, "")) is not p:
            raise TypeError(f"{where}: param is {describe(p)}; expected a parameter of the "
                            "gdist replica's model")
        return p

    def value(self, p: gtape.Var) -> Any:
        """The parameter's live value buffer."""
        return self._model.buffer(self._name[p.index])

    param_buffer = value  # gopt updates it in place, then calls note_updated

    def note_updated(self, p: gtape.Var) -> None:
        """The optimizer wrote the parameter in place (the model's tape clock ticks)."""
        self._model.note_updated(self._name[p.index])

    def grad(self, p: gtape.Var) -> Any:
        """The parameter's reduced gradient buffer."""
        return self._grads[self._name[p.index]]

    def set_value(self, p: gtape.Var, x: Any) -> None:
        """Overwrite a parameter's value (a backend array by the copy op, host data written)."""
        name = self._name[p.index]
        buf = self._model.buffer(name)
        if self._be.is_array(x):
            self._be.copy(x, out=buf)
        else:
            self._be.write(buf, np.asarray(x, self._dtype))
        self._model.note_updated(name)

    def set_grads(self, grads: Mapping[str, np.ndarray], k: int | None) -> None:
        """Write every parameter's gradient: host ``grads`` divided by ``k`` (one IEEE
        division per element, rounded once: gtensor's ``div``, as its ``mean`` divides), or as
        they are when ``k`` is None."""
        kk = None if k is None else np.asarray(k, self._dtype)
        for name, buf in self._grads.items():
            g = np.asarray(grads[name], self._dtype)  # (ascontiguousarray makes 0-d 1-d)
            if kk is not None and isinstance(buf, np.ndarray) and g.shape == buf.shape:
                np.divide(g, kk, out=buf.view(np.ndarray))  # a host buffer: divided in place
            else:
                self._be.write(buf, g if kk is None else np.divide(g, kk))
        self._count += 1

    def grads(self) -> dict[str, np.ndarray]:
        """Every parameter's last written gradient as a host copy."""
        return {n: self._be.to_numpy(g) for n, g in self._grads.items()}

    def buffers_key(self) -> tuple[int, ...]:
        """The identities of the value and gradient buffers (a recorded step reads them)."""
        return tuple(id(self._model.buffer(n)) for n in self.vars) + tuple(
            id(g) for g in self._grads.values())
