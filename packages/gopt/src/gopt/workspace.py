"""Preallocated backend buffers, reused step after step through ``out=``."""

from __future__ import annotations

from typing import Any

import gtensor


class Workspace:
    """Named scratch buffers of one backend and dtype, allocated on first use and then reused."""

    def __init__(self, be: gtensor.Backend, dtype: Any) -> None:
        self.be = be
        self.dtype = dtype
        self._bufs: dict[tuple, Any] = {}

    def __call__(self, key: Any, shape: tuple[int, ...]) -> Any:
        """The buffer called ``key`` with ``shape`` (zeros when first made; contents then stale)."""
        k = (key, tuple(shape))
        buf = self._bufs.get(k)
        if buf is None:
            buf = self._bufs[k] = self.be.zeros(shape, self.dtype)
        return buf

    def on(self, be: gtensor.Backend) -> Workspace:
        """The same buffers seen through backend ``be`` (a recording view of this backend):
        new buffers made through the view are kept here too."""
        view = Workspace.__new__(Workspace)
        view.be, view.dtype, view._bufs = be, self.dtype, self._bufs
        return view

    def scalar(self, value: float) -> Any:
        """A fresh 0-d backend array holding ``value`` rounded once to the dtype."""
        return self.be.asarray(value, dtype=self.dtype)

    def put(self, key: Any, value: float) -> Any:
        """The 0-d buffer ``key``, overwritten with ``value`` rounded once to the dtype.

        How a per-step host scalar reaches the backend: the buffer never moves, so a captured
        step that reads it sees each step's value (``Backend.write``, a transfer, not a launch).
        """
        return self.be.write(self(key, ()), value)
