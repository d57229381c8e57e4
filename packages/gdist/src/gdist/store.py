"""The driver's parameters as a gopt *parameter store*: values and reduced gradients.

gopt's optimizers step over a ``gtape.Tape`` or any object with ``backend``, ``dtype``,
``value(p)``, ``grad(p)``, ``set_value(p, x)`` and ``check_param(where, p)`` (see
``gopt.Optimizer``). Here the gradient of each param is not computed by a local backward but
written in: the batch gradient reduced from the workers' microbatch gradients (``set_grads``).
The optimizer then steps on it with its usual ops, clip and L2 included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gtensor
import numpy as np
from gtensor import describe


@dataclass(frozen=True)
class Handle:
    """One parameter of the store: what gopt registers (``add``) in place of a tape Var."""

    name: str
    index: int
    shape: tuple[int, ...]


class GradStore:
    """Host-side parameter store on one gtensor backend and dtype."""

    def __init__(self, backend: str, dtype: np.dtype, values: Mapping[str, np.ndarray]) -> None:
        self._be = gtensor.backend(backend)
        self._dtype = np.dtype(dtype)
        self.handles = {name: Handle(name, i, tuple(v.shape))
                        for i, (name, v) in enumerate(values.items())}
        self._values = [self._be.asarray(v, dtype=self._dtype) for v in values.values()]
        self._grads = [self._be.zeros(v.shape, self._dtype) for v in values.values()]
        self._count = 0

    @property
    def backend(self) -> gtensor.Backend:
        """The gtensor backend every value and gradient lives on."""
        return self._be

    @property
    def dtype(self) -> np.dtype:
        """float64 or float32."""
        return self._dtype

    @property
    def backward_count(self) -> int:
        """Gradients written so far (gopt refuses a step without new ones)."""
        return self._count

    def check_param(self, where: str, p: Any) -> Handle:
        """``p`` checked to be one of this store's handles."""
        if not isinstance(p, Handle) or self.handles.get(p.name) is not p:
            raise TypeError(f"{where}: param is {describe(p)}; expected a gdist store handle")
        return p

    def value(self, p: Handle) -> Any:
        """The parameter's value buffer (a backend array)."""
        return self._values[p.index]

    def grad(self, p: Handle) -> Any:
        """The parameter's reduced gradient buffer (a backend array)."""
        return self._grads[p.index]

    def set_value(self, p: Handle, x: Any) -> None:
        """Overwrite a parameter's value (a backend array is copied with the copy op)."""
        buf = self._values[p.index]
        if self._be.is_array(x):
            self._be.copy(x, out=buf)
        else:
            self._be.write(buf, np.asarray(x))

    def set_grads(self, grads: Mapping[str, Any]) -> None:
        """Write every parameter's gradient (backend arrays or host data of its shape)."""
        for name, h in self.handles.items():
            g = grads[name]
            if self._be.is_array(g):
                self._be.copy(g, out=self._grads[h.index])
            else:
                self._be.write(self._grads[h.index], np.asarray(g))
        self._count += 1

    def values(self) -> dict[str, np.ndarray]:
        """Every parameter's current value as a host numpy copy."""
        return {name: self._be.to_numpy(self._values[h.index])
                for name, h in self.handles.items()}

    def grads(self) -> dict[str, np.ndarray]:
        """Every parameter's last written gradient as a host numpy copy."""
        return {name: self._be.to_numpy(self._grads[h.index])
                for name, h in self.handles.items()}
