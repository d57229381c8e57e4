"""Selection and comparison: ``where`` and the five comparisons, on the ``Zip`` form.

Definitions (elementwise, numpy broadcasting; IEEE comparisons, exact on every engine):

* ``greater(a, b)`` = a > b, ``greater_equal`` a >= b, ``less`` a < b, ``less_equal`` a <= b,
  ``equal`` a == b, ``not_equal`` a != b: bool results; every comparison with a NaN is false
  but ``not_equal``, which is true; +0.0 == -0.0.
  Not differentiable (a comparison has no gradient; the tape records it as a constant mask).
* ``where(cond, a, b)``: a where cond (a bool mask), else b -- a selection, no arithmetic, so
  the bits (the sign of zeros, NaN payloads) are the selected input's. Backward: g to a where
  cond, +0.0 elsewhere; g to b where not cond, +0.0 elsewhere (``where(cond, g, 0)``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import dtypes, shapes
from ..kernels import Kernel
from ..scalar.dsl import BOOL, ScalarFn, scalar_fn
from .elementwise import BLOCK, grid_for
from .forms import Zip
from .registry import Op, register

_SFX = {t.suffix: t for t in dtypes.FLOATS}
_DSL = {"f64": "f64", "f32": "f32"}  # the scalar language's names of the float dtypes


def _fns(name: str, in_types: tuple[str, ...], out_type: str,
         body: Callable) -> dict[str, ScalarFn]:
    """``gt_<name>_<sfx>`` per float dtype; FLOAT slots take the float, BOOL slots bool."""
    def dt(t: str, sfx: str) -> str:
        return BOOL if t == dtypes.BOOL else _DSL[sfx]

    return {sfx: scalar_fn(f"gt_{name}_{sfx}", tuple(dt(t, sfx) for t in in_types),
                           dt(out_type, sfx))(body)
            for sfx in _SFX}


def _ctype(t: str, sfx: str) -> str:
    return "bool" if t == dtypes.BOOL else _SFX[sfx].ctype


def zip_op(name: str, in_types: tuple[str, ...], out_type: str, body: Callable, inputs: tuple,
           vjp=None, doc: str = "") -> Op:
    """An elementwise op of any arity on the ``Zip`` form: its scalar body and input types."""
    form = Zip(tuple(inputs))
    fns = _fns(name, in_types, out_type, body)

    def kernel(sfx: str, cpu: bool) -> Kernel:
        fn = fns[sfx]
        ps = form.params(tuple(_ctype(t, sfx) for t in in_types), _ctype(out_type, sfx))
        text = form.cpu_body(fn.cname) if cpu else form.cuda_body(fn.cname)
        return Kernel(f"k_{name}_{sfx}", ps, text, "select", (fn,), form)

    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        out = shapes_[0]
        for s in shapes_[1:]:
            out = shapes.broadcast(name, out, s)
        return out, attrs

    def float_sfx(arrays: tuple) -> str:
        for t, a in zip(in_types, arrays):
            if t == dtypes.FLOAT:
                return dtypes.float_type(a).suffix
        raise AssertionError(f"{name}: no float input")

    def reference(*arrays: np.ndarray) -> np.ndarray:
        return fns[float_sfx(arrays)].eval(*arrays)

    def launch(rt, ins, out) -> None:
        n = out.size
        if n:
            geom = rt.geom(form.geometry(out.shape, [a.shape for a in ins]))
            rt.launch(f"k_{name}_{float_sfx(ins)}", grid_for(n), BLOCK, (*ins, out, n, geom))

    return register(Op(name, inputs, (), infer, reference, lambda sfx: [kernel(sfx, False)],
                       launch, vjp, doc, cpu=lambda sfx: [kernel(sfx, True)],
                       types=in_types, out_type=out_type))


def _where_vjp(be, g, ins, out, needs):
    cond = ins[0]
    zero = be.fill((), 0.0, g.dtype)
    return (None,
            be.where(cond, g, zero) if needs[1] else None,
            be.where(cond, zero, g) if needs[2] else None)


F, B = dtypes.FLOAT, dtypes.BOOL
zip_op("where", (B, F, F), F, lambda m, c, a, b: m.where(c, a, b), ("cond", "a", "b"),
       _where_vjp, "a where cond (bool) else b, broadcasting (a selection: no arithmetic)")
for _name, _body, _sym in (("greater", lambda m, a, b: a > b, ">"),
                           ("greater_equal", lambda m, a, b: a >= b, ">="),
                           ("less", lambda m, a, b: a < b, "<"),
                           ("less_equal", lambda m, a, b: a <= b, "<="),
                           ("equal", lambda m, a, b: a == b, "==")):
    zip_op(_name, (F, F), B, _body, ("a", "b"), None,
           f"a {_sym} b as a bool mask (IEEE: false for any NaN; not differentiable)")
zip_op("not_equal", (F, F), B, lambda m, a, b: a != b, ("a", "b"), None,
       "a != b as a bool mask (IEEE: true for any NaN; not differentiable)")

COMPARISONS = ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal")
