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
from ..dtypes import FloatType
from ..kernels import Kernel, Kind
from ..scalar.dsl import BOOL, I64, ScalarFn, scalar_fn
from .forms import BLOCK, Zip, grid_for
from .registry import Op, register


def _fns(name: str, in_types: tuple[str, ...], out_type: str,
         body: Callable) -> dict[FloatType, ScalarFn]:
    """``gt_<name>_<sfx>`` per float dtype; FLOAT (and NUMBER) slots take the float, BOOL
    slots bool."""
    def dt(t: str, ft: FloatType) -> str:
        return BOOL if t == dtypes.BOOL else ft.suffix

    return {ft: scalar_fn(ft.fn(name), tuple(dt(t, ft) for t in in_types), dt(out_type, ft))(body)
            for ft in dtypes.FLOATS}


def _ctype(t: str, ft: FloatType) -> str:
    return dtypes.CTYPES[dtypes.MASK] if t == dtypes.BOOL else ft.ctype


def _int_fn(name: str, in_types: tuple[str, ...], body: Callable) -> ScalarFn | None:
    """``gt_<name>_i64``: the comparison on int64 NUMBER inputs (None: no NUMBER input)."""
    if dtypes.NUMBER not in in_types:
        return None
    return scalar_fn(f"gt_{name}_i64", tuple(I64 for _ in in_types), BOOL)(body)


def zip_op(name: str, in_types: tuple[str, ...], out_type: str, body: Callable, inputs: tuple,
           vjp=None, doc: str = "") -> Op:
    """An elementwise op of any arity on the ``Zip`` form: its scalar body and input types."""
    form = Zip(tuple(inputs))
    fns = _fns(name, in_types, out_type, body)
    ifn = _int_fn(name, in_types, body)

    def kernel(ft: FloatType, cpu: bool) -> Kernel:
        fn = fns[ft]
        ps = form.params(tuple(_ctype(t, ft) for t in in_types), _ctype(out_type, ft))
        text = form.cpu_body(fn.cname) if cpu else form.cuda_body(fn.cname)
        return Kernel(ft.kernel(name), ps, text, Kind.SELECT, (fn,), form)

    def int_kernel(cpu: bool) -> Kernel:  # the int64 comparison: in the float64 set
        ps = form.params(tuple(dtypes.CTYPES[dtypes.INDEX] for _ in in_types),
                         _ctype(out_type, dtypes.F64))
        text = form.cpu_body(ifn.cname) if cpu else form.cuda_body(ifn.cname)
        return Kernel(dtypes.F64.kernel(f"{name}_i64"), ps, text, Kind.SELECT, (ifn,), form)

    def kernels(ft: FloatType, cpu: bool = False) -> list[Kernel]:
        extra = [int_kernel(cpu)] if ifn is not None and ft is dtypes.F64 else []
        return [kernel(ft, cpu), *extra]

    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        out = shapes_[0]
        for s in shapes_[1:]:
            out = shapes.broadcast(name, out, s)
        return out, attrs

    def is_int(arrays: tuple) -> bool:  # NUMBER inputs holding int64 data
        return ifn is not None and any(
            t == dtypes.NUMBER and a.dtype == dtypes.INDEX for t, a in zip(in_types, arrays))

    def float_of(arrays: tuple) -> FloatType:
        for t, a in zip(in_types, arrays):
            if t in (dtypes.FLOAT, dtypes.NUMBER):
                return dtypes.float_type(a)
        raise AssertionError(f"{name}: no float input")

    def reference(*arrays: np.ndarray) -> np.ndarray:
        return (ifn if is_int(arrays) else fns[float_of(arrays)]).eval(*arrays)

    def launch(rt, ks, ins, out) -> None:
        n = out.size
        if n:
            geom = rt.geom(form.geometry(out.shape, [a.shape for a in ins]))
            k = ks[f"{name}_i64"] if is_int(ins) else ks[name]
            rt.launch(k, grid_for(n), BLOCK, (*ins, out, n, geom))

    return register(Op(name, inputs, (), infer, reference, lambda ft: kernels(ft),
                       launch, vjp, doc, cpu=lambda ft: kernels(ft, True),
                       types=in_types, out_type=out_type))


def _where_vjp(be, g, ins, out, needs):
    cond = ins[0]
    zero = be.fill((), 0.0, g.dtype)
    return (None,
            be.where(cond, g, zero) if needs[1] else None,
            be.where(cond, zero, g) if needs[2] else None)


F, B, N = dtypes.FLOAT, dtypes.BOOL, dtypes.NUMBER
zip_op("where", (B, F, F), F, lambda m, c, a, b: m.where(c, a, b), ("cond", "a", "b"),
       _where_vjp, "a where cond (bool) else b, broadcasting (a selection: no arithmetic)")
for _name, _body, _sym in (("greater", lambda m, a, b: a > b, ">"),
                           ("greater_equal", lambda m, a, b: a >= b, ">="),
                           ("less", lambda m, a, b: a < b, "<"),
                           ("less_equal", lambda m, a, b: a <= b, "<="),
                           ("equal", lambda m, a, b: a == b, "==")):
    zip_op(_name, (N, N), B, _body, ("a", "b"), None,
           f"a {_sym} b as a bool mask, floats or int64 (IEEE: false for any NaN; not "
           "differentiable)")
zip_op("not_equal", (N, N), B, lambda m, a, b: a != b, ("a", "b"), None,
       "a != b as a bool mask, floats or int64 (IEEE: true for any NaN; not differentiable)")

COMPARISONS = ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal")
