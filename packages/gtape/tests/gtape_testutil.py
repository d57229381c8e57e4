"""Helpers shared by the gtape tests: bitwise comparison, finite differences, op counting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import gtape as g
import gtensor
import numpy as np

UINT = {np.dtype(np.float64): np.uint64, np.dtype(np.float32): np.uint32}


def bits(a: Any) -> np.ndarray:
    """The raw bits of a float array (numpy copy); int64 / bool arrays are their own bits."""
    a = np.asarray(a)
    return a if a.dtype.kind in "biu" else a.view(UINT[a.dtype])


def bits_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two float arrays (shape and dtype included)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def host(tp: g.Tape, a: Any) -> np.ndarray:
    """A numpy copy of a backend array of ``tp``."""
    return np.array(tp.backend.to_numpy(a))


def address(a: Any) -> int:
    """The device/host address of an array's first element (identity of its buffer)."""
    data = getattr(a, "data", None)
    if hasattr(data, "ptr"):  # cupy
        return int(data.ptr)
    return int(a.__array_interface__["data"][0])


def values(tp: g.Tape) -> list:
    """Every node's value (read-only views), through the public accessor."""
    return [tp.value_at(i) for i in range(len(tp))]


def grads(tp: g.Tape) -> list:
    """Every node's stored gradient or None, through the public accessor."""
    return [tp.grad_at(i) for i in range(len(tp))]


class CountingBackend:
    """A gtensor backend proxy counting every op call (``apply`` and the op methods)."""

    def __init__(self, name: str) -> None:
        self._be = gtensor.backend(name)
        self.calls: Counter = Counter()

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._be, attr)
        if attr == "apply":
            def counted_apply(op, *a, **k):
                self.calls[op if isinstance(op, str) else op.name] += 1
                return target(op, *a, **k)
            return counted_apply
        if attr in gtensor.REGISTRY:
            def counted(*a, **k):
                self.calls[attr] += 1
                return target(*a, **k)
            return counted
        return target

    def total(self) -> int:
        """Op calls so far."""
        return sum(self.calls.values())


def central_fd(f: Callable[[list[np.ndarray]], float], xs: list[np.ndarray], k: int,
               h: float = 1e-6) -> np.ndarray:
    """Central differences of scalar f with respect to xs[k], element by element."""
    out = np.zeros_like(xs[k])
    for idx in np.ndindex(xs[k].shape):
        step = h * max(1.0, abs(float(xs[k][idx])))
        plus = [x.copy() for x in xs]
        minus = [x.copy() for x in xs]
        plus[k][idx] += step
        minus[k][idx] -= step
        out[idx] = (f(plus) - f(minus)) / (2 * step)
    return out


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(max |want|, 1e-300)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.size == 0:
        return 0.0
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-300))

# measured errors, printed in the terminal summary (see conftest.pytest_terminal_summary)
REPORT: dict[str, dict[str, float]] = {}


def report(section: str, key: str, value: float) -> None:
    """Record one measured error for the end-of-run summary."""
    REPORT.setdefault(section, {})[key] = value


def applies(op, attrs: dict):
    """A function recording ``op`` with ``attrs`` on its Var operands (a declared row's build:
    ``Op.checks``)."""
    return lambda *xs: g.ops.apply(op, xs, **attrs)
