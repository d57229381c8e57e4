"""Helpers: run a per-example loss on the tape and through emitted C, compare bitwise."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gtape as g
import numpy as np
from gemit import compile_c, emit_c
from gtensor import testing

Build = Callable[..., g.Var]


def tape_backend() -> str:
    """The reference tape's backend: the session's, where it is a host backend, else numpy."""
    name = testing.backend_name()
    return name if name in ("numpy", "sim") else "numpy"


def tape_run(build: Build, pvals: Sequence[np.ndarray], xvals: Sequence[np.ndarray],
             dtype: str, backend: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The tape's loss (0-d) and parameter gradients (one flat vector) for one example."""
    with g.Tape(backend or tape_backend(), dtype) as tp:
        ps = [tp.param(a) for a in pvals]
        xs = [tp.const(a) for a in xvals]
        loss = build(*ps, *xs)
        tp.backward(loss)
        be = tp.backend
        lv = np.asarray(be.to_numpy(tp.value(loss)), dtype).reshape(())
        gv = [np.asarray(be.to_numpy(tp.grad(p)), dtype).ravel() for p in ps]
        return lv, np.concatenate(gv) if gv else np.zeros(0, dtype)


def emit(build: Build, pvals: Sequence[np.ndarray], xvals: Sequence[np.ndarray], dtype: str,
         emitter: Callable = emit_c, name: str = "grad") -> str:
    """Source of the emitted function for the episode of one example."""
    with g.Tape("numpy", dtype) as tp:
        ps = [tp.param(a) for a in pvals]
        xs = [tp.const(a) for a in xvals]
        return emitter(tp, build(*ps, *xs), params=ps, inputs=xs, name=name)


def flat(arrays: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    """The arrays raveled (C order) and concatenated, in ``dtype``."""
    parts = [np.asarray(a, dtype).ravel() for a in arrays]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def check_examples(build: Build, make: Callable[[np.random.Generator], tuple[list, list]],
                   dtype: str, n: int, seed: int = 0, where: str = "") -> int:
    """Emit from the first example, then compare C with the tape on ``n`` examples, bitwise.

    ``make(rng)`` returns (param arrays, input arrays) of one example (float64; rounded to
    ``dtype`` once). Returns the number of examples compared.
    """
    rng = np.random.default_rng(seed)
    examples = [make(rng) for _ in range(n)]
    examples = [([np.asarray(a, dtype) for a in p], [np.asarray(a, dtype) for a in x])
                for p, x in examples]
    p0, x0 = examples[0]
    src = emit(build, p0, x0, dtype)
    fn = compile_c(src, "grad", dtype, flat(p0, dtype).size, flat(x0, dtype).size)
    for k, (p, x) in enumerate(examples):
        want_l, want_g = tape_run(build, p, x, dtype)
        got_l, got_g = fn(flat(p, dtype), flat(x, dtype))
        assert testing.bits_equal(got_l, want_l), (
            f"{where} example {k}: loss {got_l!r} vs tape {want_l!r}: "
            f"{testing.first_difference(got_l, want_l)}")
        assert testing.bits_equal(got_g, want_g), (
            f"{where} example {k}: grad: {testing.first_difference(got_g, want_g)}")
    return len(examples)
