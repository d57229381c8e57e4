"""The parity matrix: graphs x engines x dtypes x inner-product contracts, every engine bitwise
against the numpy tape of the same contract.

Columns: the eager tape on each backend (a second numpy run checks determinism) and the
ggpu-replay program on sim, cuda and cpu (captured from a numpy tape, inputs re-sent), the same
program fused by ggpu-fuse (on cpu: one compiled function per phase; also with every matmul
alone in its segment), and gemit's
emitted C. An engine adds a column with
``@engine(name, backend)``:
a function ``(graph, dtype) -> Result``, called with ``inner="fma"`` too for the fma
contract's rows. Whatever a Result carries (loss, parameter gradients, and optionally every
node's value and gradient) is compared bitwise (NaN by class).
``GRAD_TEST_BACKEND`` (set by ``nox -s parity``) restricts the columns to one backend.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import gtape as g
import gtensor
import numpy as np
import pytest
from graphs import GRAPHS, Graph
from gtensor import testing
from gtensor.testing import bits_equal

DTYPES = ["float64", "float32"]


@dataclass
class Result:
    """What an engine produced for one graph (numpy arrays)."""

    loss: np.ndarray
    param_grads: dict[str, np.ndarray]
    values: list[np.ndarray] | None = None  # per tape node, when the engine has nodes
    grads: list[np.ndarray | None] | None = None
    extra: dict = field(default_factory=dict)


ENGINES: dict[str, tuple[str, Callable[[Graph, str], Result]]] = {}


def engine(name: str, backend: str):
    """Register a column: ``fn(graph, dtype) -> Result`` running on ``backend``."""

    def deco(fn: Callable[[Graph, str], Result]) -> Callable[[Graph, str], Result]:
        ENGINES[name] = (backend, fn)
        return fn

    return deco


def run_tape(graph: Graph, dtype: str, backend: str, inner: str = "plain") -> Result:
    """The eager tape on ``backend``: loss, parameter gradients, every node's value and grad."""
    data = graph.data()
    with g.Tape(backend, dtype, inner=inner) as tp:
        v = {k: tp.param(a) if k in graph.params else tp.const(a) for k, a in data.items()}
        loss = graph.build(v)
        tp.backward(loss)
        be = tp.backend
        return Result(be.to_numpy(tp.value(loss)),
                      {k: be.to_numpy(tp.grad(v[k])) for k in graph.params},
                      [be.to_numpy(tp.value_at(i)) for i in range(len(tp))],
                      [None if a is None else be.to_numpy(a)
                       for a in (tp.grad_at(i) for i in range(len(tp)))])


for _b in ("numpy", "sim", "cuda", "cpu"):
    engine(f"tape-{_b}", _b)(lambda graph, dtype, inner="plain", _b=_b:
                             run_tape(graph, dtype, _b, inner))


# graphs gemit declares it cannot emit (name -> why): any other NotImplementedError from emit
# fails the test, and a graph listed here that emits fails too (the list must stay true)
UNEMITTABLE: dict[str, str] = {}  # none since gemit emits int64 / bool data (issue 23)


@engine("emit-c", "numpy")
def run_emit_c(graph: Graph, dtype: str, inner: str = "plain") -> Result:
    """gemit's emitted C (compiled with -ffp-contract=off): loss and parameter gradients."""
    gemit = pytest.importorskip("gemit", reason="gemit is not installed")
    data = graph.data()
    consts = [k for k in data if k not in graph.params]
    with g.Tape("numpy", dtype, inner=inner) as tp:
        v = {k: tp.param(a) if k in graph.params else tp.const(a) for k, a in data.items()}
        loss = graph.build(v)
        ps, xs, shape = [v[k] for k in graph.params], [v[k] for k in consts], loss.shape
        try:
            src = gemit.emit_c(tp, loss, params=ps, inputs=xs)
        except NotImplementedError as e:
            if graph.name in UNEMITTABLE:
                pytest.skip(f"emit-c: {graph.name} is declared un-emittable "
                            f"({UNEMITTABLE[graph.name]}): {e}")
            pytest.fail(f"emit-c: {graph.name} cannot be emitted ({e}) and is not declared "
                        "un-emittable (UNEMITTABLE)")
        if graph.name in UNEMITTABLE:
            pytest.fail(f"emit-c: {graph.name} is declared un-emittable but emitted; remove it "
                        "from UNEMITTABLE")
    fn = gemit.compile_c(src, "grad", dtype, sum(data[k].size for k in graph.params),
                         sum(data[k].size for k in consts))
    flat = [np.asarray(data[k], dtype).ravel() for k in (*graph.params, *consts)]
    npar = fn.n_params
    vec = np.concatenate(flat) if flat else np.zeros(0, dtype)
    lossv, gvec = fn(vec[:npar], vec[npar:])
    grads, start = {}, 0
    for k in graph.params:
        grads[k] = gvec[start:start + data[k].size].reshape(data[k].shape)
        start += data[k].size
    return Result(lossv.reshape(shape), grads)


def run_replay(graph: Graph, dtype: str, device: str, fused: bool = False,
               alone: tuple[str, ...] = (), inner: str = "plain") -> Result:
    """ggpu-replay: the episode recorded on a numpy tape, captured and replayed on ``device``
    (with ``fused``: through ggpu-fuse's generated kernels; ``alone``: launch kinds the planner
    keeps each in its own segment)."""
    from ggpu_replay import capture

    data = graph.data()
    with g.Tape("numpy", dtype, inner=inner) as tp:
        v = {k: tp.param(a) if k in graph.params else tp.const(a) for k, a in data.items()}
        prog = capture(tp, graph.build(v), backend=device)
        if fused:
            from ggpu_fuse import fuse

            prog = fuse(prog, alone=alone)
        for k in data:  # re-send the inputs: the replay must not lean on capture-time values
            if k not in graph.params:
                prog.set_input(v[k], data[k])
        prog.forward()
        prog.backward()
        n = len(prog.nodes)
        return Result(prog.value_at(n - 1), {k: prog.grad(v[k]) for k in graph.params},
                      [prog.value_at(i) for i in range(n)], [prog.grad_at(i) for i in range(n)])


for _d in ("sim", "cuda", "cpu"):
    engine(f"replay-{_d}", _d)(lambda graph, dtype, inner="plain", _d=_d:
                               run_replay(graph, dtype, _d, inner=inner))
for _d in ("sim", "cuda", "cpu"):  # on cpu: each phase one compiled function
    engine(f"fused-{_d}", _d)(lambda graph, dtype, inner="plain", _d=_d:
                              run_replay(graph, dtype, _d, True, inner=inner))
    # every matmul alone in its segment: one reading a dropped transpose must still be right
    engine(f"fused-alone-{_d}", _d)(
        lambda graph, dtype, inner="plain", _d=_d:
        run_replay(graph, dtype, _d, True, ("matmul",), inner))


def _columns() -> list[str]:
    only = os.environ.get("GRAD_TEST_BACKEND")
    return [n for n, (b, _) in ENGINES.items() if only is None or b == only]


_REFERENCE: dict[tuple[str, str, str], Result] = {}


def reference(graph: Graph, dtype: str, inner: str = "plain") -> Result:
    """The numpy tape's result (cached)."""
    key = (graph.name, dtype, inner)
    if key not in _REFERENCE:
        _REFERENCE[key] = run_tape(graph, dtype, "numpy", inner)
    return _REFERENCE[key]


# the inner-product contracts: every column runs both (an engine takes ``inner=`` for "fma")
INNERS = ["plain", "fma"]
# the compiled cpu columns: each row a cold compile of its own modules, so CI runs one row per
# graph (GRAD_SLOW=1: all): fused-cpu alternates (float64, plain) and (float32, fma) over the
# graphs (both dtypes, both contracts); the matmul-alone plan is the same plan for every dtype
# and contract: (float64, plain)
SAMPLED_COLUMNS = {"fused-cpu": (("float64", "plain"), ("float32", "fma")),
                   "fused-alone-cpu": (("float64", "plain"),)}


def _sampled_row(column: str, graph: Graph) -> tuple[str, str]:
    """The (dtype, inner) row of ``graph`` a sampled column runs in CI."""
    rows = SAMPLED_COLUMNS[column]
    return rows[[gr.name for gr in GRAPHS].index(graph.name) % len(rows)]


@pytest.mark.parametrize("inner", INNERS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("graph", GRAPHS, ids=[gr.name for gr in GRAPHS])
@pytest.mark.parametrize("column", _columns())
def test_parity(column: str, graph: Graph, dtype: str, inner: str) -> None:
    backend, fn = ENGINES[column]
    if column in SAMPLED_COLUMNS and not testing.slow_runs() and \
            (dtype, inner) != _sampled_row(column, graph):
        pytest.skip(f"{column}: each row compiles its own modules on cpu (cold: seconds "
                    f"each): CI runs one row per graph ({_sampled_row(column, graph)} for "
                    f"{graph.name}), the sim columns every row; GRAD_SLOW=1 runs all")
    try:
        gtensor.backend(backend)
    except RuntimeError as e:
        pytest.skip(f"{column}: backend {backend!r} unavailable here: {e}")
    want = reference(graph, dtype, inner)
    got = fn(graph, dtype) if inner == "plain" else fn(graph, dtype, inner=inner)
    where = f"{column} / {graph.name} / {dtype} / {inner}"
    assert bits_equal(want.loss, got.loss), f"{where}: loss {got.loss!r} vs {want.loss!r}"
    for k in graph.params:
        assert bits_equal(want.param_grads[k], got.param_grads[k]), f"{where}: grad of {k}"
    if got.values is not None:
        assert len(got.values) == len(want.values), f"{where}: node count"
        for i, (a, b) in enumerate(zip(want.values, got.values)):
            assert bits_equal(a, b), f"{where}: value of node {i}"
    if got.grads is not None:
        for i, (a, b) in enumerate(zip(want.grads, got.grads)):
            assert (a is None) == (b is None), f"{where}: gradient stored for node {i}"
            assert a is None or bits_equal(a, b), f"{where}: gradient of node {i}"


@pytest.mark.parametrize("graph", GRAPHS, ids=[gr.name for gr in GRAPHS])
def test_graphs_are_finite_and_differentiable(graph: Graph) -> None:
    """Sanity of the matrix itself: every graph has a finite loss and nonzero gradients."""
    r = reference(graph, "float64")
    assert np.isfinite(r.loss).all()
    assert all(np.isfinite(v).all() and np.any(v != 0) for v in r.param_grads.values())


def test_conv_graph_fma_rows_run_the_conv_fma_contract() -> None:
    """The CNN graph's fma rows run conv2d's fma contract too (not only the linear layer's
    matmul): its conv nodes carry inner="fma", and the first conv's weight gradient differs
    from the plain contract's."""
    graph = next(gr for gr in GRAPHS if "cnn" in gr.name)
    plain, fused = reference(graph, "float64"), reference(graph, "float64", "fma")
    assert not bits_equal(plain.param_grads["w1"], fused.param_grads["w1"])
    with g.Tape("numpy", inner="fma") as tp:
        v = {k: tp.param(a) if k in graph.params else tp.const(a)
             for k, a in graph.data().items()}
        graph.build(v)
        conv = [n.attrs["inner"] for n in tp.nodes() if n.op.name == "conv2d"]
    assert conv == ["fma", "fma"]
