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


def is_typed(a: np.ndarray) -> bool:
    """An int64 / bool input (an ``example_ids`` entry), not a float one."""
    return np.asarray(a).dtype in (np.int64, np.bool_)


def _record(tp: g.Tape, build: Build, pvals: Sequence[np.ndarray],
            xvals: Sequence[np.ndarray]) -> tuple[list, list, g.Var]:
    """Params, inputs (float consts, then the typed leaves) and the loss of one episode.

    Float inputs become ``tp.const`` Vars; int64 / bool inputs go to ``build`` as host arrays
    (a typed op records each as an int64 / bool const) and must be the first typed leaves the
    episode records, in the order given: any later typed leaf is a baked constant table.
    """
    ps = [tp.param(a) for a in pvals]
    xs = [a if is_typed(a) else tp.const(a) for a in xvals]
    n0 = len(tp.nodes())
    loss = build(*ps, *xs)
    typed_given = [a for a in xvals if is_typed(a)]
    leaves = [tp.var_at(n.index) for n in tp.nodes()[n0:] if n.is_leaf and
              tp.var_at(n.index).dtype in (np.int64, np.bool_)][:len(typed_given)]
    for v, a in zip(leaves, typed_given, strict=True):
        got = tp.backend.to_numpy(tp.value(v))
        # (raveled: cross_entropy records its (rows,) labels as (rows, 1))
        assert np.array_equal(got.ravel(), np.ravel(a)), (
            "gemit_testutil: a typed input is not the episode's next typed leaf")
    return ps, [x for x in xs if isinstance(x, g.Var)] + leaves, loss


def tape_run(build: Build, pvals: Sequence[np.ndarray], xvals: Sequence[np.ndarray],
             dtype: str, backend: str | None = None, inner: str = "plain"
             ) -> tuple[np.ndarray, np.ndarray]:
    """The tape's loss (0-d) and parameter gradients (one flat vector) for one example."""
    with g.Tape(backend or tape_backend(), dtype, inner=inner) as tp:
        ps, _, loss = _record(tp, build, pvals, xvals)
        tp.backward(loss)
        be = tp.backend
        lv = np.asarray(be.to_numpy(tp.value(loss)), dtype).reshape(())
        gv = [np.asarray(be.to_numpy(tp.grad(p)), dtype).ravel() for p in ps]
        return lv, np.concatenate(gv) if gv else np.zeros(0, dtype)


def emit(build: Build, pvals: Sequence[np.ndarray], xvals: Sequence[np.ndarray], dtype: str,
         emitter: Callable = emit_c, name: str = "grad", inner: str = "plain") -> str:
    """Source of the emitted function for the episode of one example."""
    with g.Tape("numpy", dtype, inner=inner) as tp:
        ps, xs, loss = _record(tp, build, pvals, xvals)
        return emitter(tp, loss, params=ps, inputs=xs, name=name)


def flat(arrays: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    """The float arrays raveled (C order) and concatenated, in ``dtype`` (typed ones skipped)."""
    parts = [np.asarray(a, dtype).ravel() for a in arrays if not is_typed(a)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def flat_ids(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The int64 / bool arrays raveled and concatenated as int64: the ``example_ids`` vector."""
    parts = [np.asarray(a).astype(np.int64).ravel() for a in arrays if is_typed(a)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def check_examples(build: Build, make: Callable[[np.random.Generator], tuple[list, list]],
                   dtype: str, n: int, seed: int = 0, where: str = "",
                   inner: str = "plain") -> int:
    """Emit from the first example, then compare C with the tape on ``n`` examples, bitwise.

    ``make(rng)`` returns (param arrays, input arrays) of one example (float64, rounded to
    ``dtype`` once; int64 / bool input arrays stay as they are and are passed through the
    ``example_ids`` vector, see ``_record``). Returns the number of examples compared.
    """
    rng = np.random.default_rng(seed)
    examples = [make(rng) for _ in range(n)]
    examples = [([np.asarray(a, dtype) for a in p],
                 [np.asarray(a) if is_typed(a) else np.asarray(a, dtype) for a in x])
                for p, x in examples]
    p0, x0 = examples[0]
    src = emit(build, p0, x0, dtype, inner=inner)
    assert ("gt_dot_fma_" in src) == (inner == "fma" and "gt_dot_" in src), where
    n_ids = flat_ids(x0).size
    assert ("example_ids" in src) == (n_ids > 0), f"{where}: example_ids in the signature"
    fn = compile_c(src, "grad", dtype, flat(p0, dtype).size, flat(x0, dtype).size, n_ids=n_ids)
    for k, (p, x) in enumerate(examples):
        want_l, want_g = tape_run(build, p, x, dtype, inner=inner)
        ids = flat_ids(x) if n_ids else None
        got_l, got_g = fn(flat(p, dtype), flat(x, dtype), ids)
        assert testing.bits_equal(got_l, want_l), (
            f"{where} example {k}: loss {got_l!r} vs tape {want_l!r}: "
            f"{testing.first_difference(got_l, want_l)}")
        assert testing.bits_equal(got_g, want_g), (
            f"{where} example {k}: grad: {testing.first_difference(got_g, want_g)}")
    return len(examples)
