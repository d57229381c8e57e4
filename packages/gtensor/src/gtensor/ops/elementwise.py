"""Elementwise ops: each is a scalar function (written once) mapped over arrays.

The scalar function's text is both the numpy reference and the CUDA ``__device__`` function
(see ``gtensor.scalar.dsl``); the kernels below only do indexing around it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import dtypes, shapes
from ..dtypes import F32, F64, FLOATS, FloatType, round_scalar
from ..kernels import Kernel, Kind
from ..scalar import crerf, crexp, crhyp, crlog, crtrig
from ..scalar.dsl import ScalarFn, scalar_fn
from .checks import ANY, AWAY0, POS, Checks, binary_checks, unary_checks
from .forms import BLOCK, ELEMENT_COST, MAP, SCALAR, ZIP2, Map, Zip, grid_for, split_cost
from .registry import Op, register

of = dtypes.of  # an array's FloatType (the references pick their scalar function by it)


def pair(name: str, arity: int, body: Callable) -> dict[FloatType, ScalarFn]:
    """The float64 and float32 scalar functions ``gt_<name>_f64/_f32`` of one body."""
    return {ft: scalar_fn(ft.fn(name), (ft.suffix,) * arity, ft.suffix)(body) for ft in FLOATS}


# --------------------------------------------------------------------------- scalar functions
ADD = pair("add", 2, lambda m, a, b: a + b)
SUB = pair("sub", 2, lambda m, a, b: a - b)
MUL = pair("mul", 2, lambda m, a, b: a * b)
DIV = pair("div", 2, lambda m, a, b: a / b)
NEG = pair("neg", 1, lambda m, x: -x)
SQRT = pair("sqrt", 1, lambda m, x: m.sqrt(x))
# relu(x) = x for x > 0 and for NaN (propagates), else +0.0 (so relu(-0.0) = +0.0).
RELU = pair("relu", 1, lambda m, x: m.where((x > 0.0) | m.isnan(x), x, 0.0))
# d relu: g where x > 0, else +0.0 (as PyTorch's threshold_backward; NaN x gives 0).
RELU_GRAD = pair("relu_grad", 2, lambda m, g, x: m.where(x > 0.0, g, 0.0))
# d sigmoid from its output y: g * (y * (1 - y)).
SIGMOID_GRAD = pair("sigmoid_grad", 2, lambda m, g, y: g * (y * (1.0 - y)))
# d tanh from its output y: g * (1 - y * y).
TANH_GRAD = pair("tanh_grad", 2, lambda m, g, y: g * (1.0 - y * y))
# max(a, b): a where a > b or a is NaN, else b (so ties, +-0 included, give b; NaN propagates
# from either side). The selection is the definition (softmax's row max uses it too).
MAX = pair("max", 2, lambda m, a, b: m.where((a > b) | m.isnan(a), a, b))
# min(a, b): a where a < b or a is NaN, else b -- maximum's rule mirrored (ties, +-0 included,
# give b; NaN propagates from either side).
MIN = pair("min", 2, lambda m, a, b: m.where((a < b) | m.isnan(a), a, b))
# correctly rounded (gtensor.scalar.crmath): the exact value rounded once, in both dtypes
EXP = {F64: crexp.EXP_F64, F32: crexp.EXP_F32}
LOG = {F64: crlog.LOG_F64, F32: crlog.LOG_F32}
TANH = {F64: crhyp.TANH_F64, F32: crhyp.TANH_F32}
SIGMOID = {F64: crhyp.SIGMOID_F64, F32: crhyp.SIGMOID_F32}
ERF = {F64: crerf.ERF_F64, F32: crerf.ERF_F32}
LOG1P = {F64: crlog.LOG1P_F64, F32: crlog.LOG1P_F32}
EXPM1 = {F64: crexp.EXPM1_F64, F32: crexp.EXPM1_F32}
SIN = {F64: crtrig.SIN_F64, F32: crtrig.SIN_F32}
COS = {F64: crtrig.COS_F64, F32: crtrig.COS_F32}
TWO_OVER_SQRTPI = 1.1283791670955126  # 2/sqrt(pi) rounded to float64 (0x1.20dd750429b6dp+0)
SQRT1_2 = 0.7071067811865476  # 1/sqrt(2) rounded to float64 (C's M_SQRT1_2, torch's GELU's)
# GELU's gate 1 + erf(x / sqrt 2) (twice the normal CDF; gtape's exact gelu is
# (x * 0.5) * gelu_gate(x)): the scale and the add of the composite muls -> erf -> adds, each
# rounded once in the dtype (the constant rounded once to it), in one pass
GELU_GATE = pair("gelu_gate", 1, lambda m, x: m.call(ERF, x * SQRT1_2) + 1.0)
# its backward, the composite's chain: u = x * SQRT1_2 (the forward's scale, recomputed),
# (g * (exp(-(u * u)) * 2/sqrt(pi))) * SQRT1_2 (erf's rule, then the scale's)
GELU_GATE_GRAD = pair("gelu_gate_grad", 2, lambda m, g, x: (
    g * (m.call(EXP, -((x * SQRT1_2) * (x * SQRT1_2))) * TWO_OVER_SQRTPI)) * SQRT1_2)

# GELU's product with its gate, one pass: (x * 0.5) * q (the composite's muls, then mul), and
# its two backward forms, each the composite's chain in one pass: x's (g * q) * 0.5 (mul's rule
# for x * 0.5, then muls's) and the gate's g * (x * 0.5) (mul's rule, x * 0.5 recomputed)
GELU_MUL = pair("gelu_mul", 2, lambda m, x, q: (x * 0.5) * q)
GELU_MUL_GRAD = pair("gelu_mul_grad", 2, lambda m, g, q: (g * q) * 0.5)
GELU_MUL_GRAD_GATE = pair("gelu_mul_grad_gate", 2, lambda m, g, x: g * (x * 0.5))

# --------------------------------------------------------------------------- kernels
def _cpu_kernels(cuda: Callable[[FloatType], list[Kernel]],
                 fns: dict[FloatType, ScalarFn]) -> Callable[[FloatType], list[Kernel]]:
    """CPU kernels with the names and parameters of ``cuda``'s, bodies from their form."""

    def kernels(ft: FloatType) -> list[Kernel]:
        fn = fns[ft]
        return [Kernel(k.name, k.params, _cpu_body(k, fn, ft), form=k.form) for k in cuda(ft)]

    return kernels


def _cpu_body(k: Kernel, fn: ScalarFn, ft: FloatType) -> str:
    """The cpu body of kernel ``k`` over ``fn``: a map or a two-input zip of a function with
    a first stage runs the stage over blocks (``Map.cpu_body``, ``Zip.cpu_body``)."""
    cost = split_cost(k.calls, ELEMENT_COST)
    if isinstance(k.form, (Map, Zip)) and fn.first_stage:
        return k.form.cpu_body(fn.cname, ft.ctype, cost, first=fn.first_cname)
    return k.form.cpu_body(fn.cname, ft.ctype, cost)


FORMS = {Kind.MAP: MAP, Kind.SCALAR: SCALAR, Kind.ZIP: ZIP2}  # kernel kind -> its form


def form_kernel(kind: Kind, kname: str, ft: FloatType, fn: ScalarFn) -> Kernel:
    """The CUDA kernel ``kname`` of form ``kind`` (MAP, SCALAR, ZIP) over ``fn``."""
    form = FORMS[kind]
    ps = form.params((ft.ctype,) * 2, ft.ctype) if form is ZIP2 else form.params(ft.ctype)
    return Kernel(kname, ps, form.cuda_body(fn.cname), kind, (fn,), form)


def _form_kernels(kind: Kind, name: str,
                  fns: dict[FloatType, ScalarFn]) -> Callable[[FloatType], list[Kernel]]:
    """An op's kernels (``Op.kernels``): ``k_<name>_<sfx>`` of form ``kind`` over fns[ft]."""

    def kernels(ft: FloatType) -> list[Kernel]:
        return [form_kernel(kind, ft.kernel(name), ft, fns[ft])]

    return kernels


# --------------------------------------------------------------------------- op builders
def _same_shape(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    return shapes_[0], attrs


def unary(name: str, fns: dict[FloatType, ScalarFn], vjp=None, doc: str = "",
          inputs=("x",), checks: Checks | None = None) -> Op:
    """An op y = f(x) elementwise."""

    def reference(x: np.ndarray) -> np.ndarray:
        return fns[of(x)].eval(x)

    def launch(rt, ks, ins, out) -> None:
        n = out.size
        if n:
            rt.launch(ks.only, grid_for(n), BLOCK, (ins[0], out, n))

    kernels = _form_kernels(Kind.MAP, name, fns)
    return register(Op(name, inputs, (), _same_shape, reference, kernels, launch, vjp, doc,
                       cpu=_cpu_kernels(kernels, fns), checks=checks))


def binary(name: str, fns: dict[FloatType, ScalarFn], vjp=None, doc: str = "",
           inputs=("a", "b"), checks: Checks | None = None) -> Op:
    """An op y = f(a, b) elementwise, with numpy broadcasting."""

    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        return shapes.broadcast(name, shapes_[0], shapes_[1]), attrs

    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fns[of(a)].eval(a, b)

    def launch(rt, ks, ins, out) -> None:
        n = out.size
        if not n:
            return
        a, b = ins
        geom = rt.geom(ZIP2.geometry(out.shape, [a.shape, b.shape]))
        rt.launch(ks.only, grid_for(n), BLOCK, (a, b, out, n, geom))

    kernels = _form_kernels(Kind.ZIP, name, fns)
    return register(Op(name, inputs, (), infer, reference, kernels, launch, vjp, doc,
                       cpu=_cpu_kernels(kernels, fns), checks=checks))


def scalar_form(name: str, fns: dict[FloatType, ScalarFn], vjp=None, doc: str = "") -> Op:
    """An op y = f(x, s) with a Python scalar s, rounded once to the array's dtype (an integer
    exactly, never through float64 first)."""

    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        s = attrs["s"]
        if isinstance(s, bool) or not isinstance(s, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}: s must be a real Python number, got {type(s).__name__}")
        # an integer stays exact until it is rounded once, to the array's dtype
        return shapes_[0], {"s": int(s) if isinstance(s, (int, np.integer)) else float(s)}

    def reference(x: np.ndarray, *, s: float) -> np.ndarray:
        return fns[of(x)].eval(x, round_scalar(s, x.dtype))

    def launch(rt, ks, ins, out, *, s: float) -> None:
        n = out.size
        if n:
            rt.launch(ks.only, grid_for(n), BLOCK, (ins[0], out, n, round_scalar(s, out.dtype)))

    kernels = _form_kernels(Kind.SCALAR, name, fns)
    return register(Op(name, ("x",), ("s",), infer, reference, kernels, launch, vjp, doc,
                       cpu=_cpu_kernels(kernels, fns)))


# --------------------------------------------------------------------------- the ops
def selects_a(be, a, b, beats):
    """1.0 where maximum (``beats`` = ``be.greater``) or minimum (``be.less``) selects ``a`` --
    ``a`` beats ``b`` or ``a`` is NaN -- else +0.0: a typed composite (the comparisons' bool
    masks choosing between constants), the float mask the backward routes g with."""
    one, zero = be.fill((), 1.0, a.dtype), be.fill((), 0.0, a.dtype)
    return be.where(beats(a, b), one, be.where(be.not_equal(a, a), one, zero))


def _routed(be, g, mask, needs):
    # g to the selected input, +0.0 to the other: relu_grad(g, mask) passes g exactly where
    # mask is 1.0 (and 1 - mask selects b); ties go to b, as the forward does
    return (be.relu_grad(g, mask) if needs[0] else None,
            be.relu_grad(g, be.adds(be.neg(mask), 1.0)) if needs[1] else None)


def _maximum_vjp(be, g, ins, out, needs):
    return _routed(be, g, selects_a(be, ins[0], ins[1], be.greater), needs)


def _relu_grad_vjp(be, g, ins, out, needs):
    # linear in a through x's mask, piecewise constant in x
    return (be.relu_grad(g, ins[1]) if needs[0] else None,
            be.fill(tuple(ins[1].shape), 0.0, g.dtype) if needs[1] else None)


def _sigmoid_grad_vjp(be, g, ins, out, needs):
    # out = a * (y * (1 - y)): d/da = sigmoid_grad(g, y); d/dy = (g * a) * ((y * -2) + 1)
    a, y = ins
    return (be.sigmoid_grad(g, y) if needs[0] else None,
            be.mul(be.mul(g, a), be.adds(be.muls(y, -2.0), 1.0)) if needs[1] else None)


def _tanh_grad_vjp(be, g, ins, out, needs):
    # out = a * (1 - y * y): d/da = tanh_grad(g, y); d/dy = (g * a) * (y * -2)
    a, y = ins
    return (be.tanh_grad(g, y) if needs[0] else None,
            be.mul(be.mul(g, a), be.muls(y, -2.0)) if needs[1] else None)


def _minimum_vjp(be, g, ins, out, needs):
    return _routed(be, g, selects_a(be, ins[0], ins[1], be.less), needs)


def _erf_vjp(be, g, ins, out, needs):
    # d erf(x)/dx = 2/sqrt(pi) exp(-x^2), in this order: g * (exp(-(x * x)) * 2/sqrt(pi))
    x = ins[0]
    return (be.mul(g, be.muls(be.exp(be.neg(be.mul(x, x))), TWO_OVER_SQRTPI)),)


def _gelu_gate_grad_vjp(be, g, ins, out, needs):
    # out = (a * (exp(-(u * u)) * K)) * c with u = x * c: d/da = gelu_gate_grad(g, x);
    # d/dx = gelu_gate_grad(g * a, x) * ((u * -2) * c)
    a, x = ins
    return (be.gelu_gate_grad(g, x) if needs[0] else None,
            be.mul(be.gelu_gate_grad(be.mul(g, a), x),
                   be.muls(be.muls(be.muls(x, SQRT1_2), -2.0), SQRT1_2)) if needs[1] else None)


def _gate_slope(T, q, x):
    """The pin of gelu_gate's rule at one element: (q * (exp(-(u * u)) * K)) * c."""
    c = T(SQRT1_2)
    u = x * c
    return (q * (ref(EXP, -(u * u)) * T(TWO_OVER_SQRTPI))) * c


def _gelu_mul_vjp(be, g, ins, out, needs):
    # y = (x * 0.5) * q: d/dx = (g * q) * 0.5, d/dq = g * (x * 0.5) (the composite's rules)
    x, q = ins
    return (be.gelu_mul_grad(g, q) if needs[0] else None,
            be.gelu_mul_grad_gate(g, x) if needs[1] else None)


def _gelu_mul_grad_vjp(be, g, ins, out, needs):
    # y = (a * q) * 0.5: d/da = (g * 0.5) * q, d/dq = (g * 0.5) * a (muls's rule, then mul's)
    a, q = ins
    return (be.gelu_mul(g, q) if needs[0] else None, be.gelu_mul(g, a) if needs[1] else None)


def _gelu_mul_grad_gate_vjp(be, g, ins, out, needs):
    # y = a * (x * 0.5): d/da = g * (x * 0.5), d/dx = (g * a) * 0.5 (mul's rule, then muls's)
    a, x = ins
    return (be.gelu_mul_grad_gate(g, x) if needs[0] else None,
            be.gelu_mul_grad(g, a) if needs[1] else None)


def _div_vjp(be, g, ins, out, needs):
    ga = be.div(g, ins[1])
    return ga if needs[0] else None, be.neg(be.mul(ga, out)) if needs[1] else None


def ref(family: dict[FloatType, ScalarFn], x):
    """Our function ``family`` (EXP, COS, ...) on a numpy scalar or array (its numpy
    reference): what the pin formulas call for a function of the op set."""
    return family[of(x)].numpy(np.asarray(x))[()]


def _selects_a(a, b) -> bool:  # maximum's choice (ties and +-0 go to b; NaN a is chosen)
    return a > b or a != a


def _selects_a_min(a, b) -> bool:
    return a < b or a != a


# The pin formulas below (``formula(T, q, *inputs, y)``, numpy scalars of type T) are the
# documented rules of docs/semantics.md, evaluated independently of the backend rules above.
binary("add", ADD, lambda be, g, ins, out, needs: (g, g), "a + b",
       checks=binary_checks(lambda T, q, a, b, y: (q, q), lambda t, a, b: t.add(a, b)))
binary("sub", SUB, lambda be, g, ins, out, needs: (g, be.neg(g) if needs[1] else None), "a - b",
       checks=binary_checks(lambda T, q, a, b, y: (q, -q), lambda t, a, b: t.sub(a, b)))
binary("mul", MUL, lambda be, g, ins, out, needs: (
    be.mul(g, ins[1]) if needs[0] else None, be.mul(g, ins[0]) if needs[1] else None), "a * b",
    checks=binary_checks(lambda T, q, a, b, y: (q * b, q * a), lambda t, a, b: t.mul(a, b)))
binary("div", DIV, _div_vjp, "a / b",
       checks=binary_checks(lambda T, q, a, b, y: (q / b, -((q / b) * y)),
                            lambda t, a, b: t.div(a, b), (ANY, AWAY0)))
binary("maximum", MAX, _maximum_vjp,
       "a where a > b or a is NaN, else b (ties and +-0 give b)",
       checks=binary_checks(lambda T, q, a, b, y: (q if _selects_a(a, b) else T(0.0),
                                                    T(0.0) if _selects_a(a, b) else q),
                            lambda t, a, b: t.maximum(a, b)))
binary("minimum", MIN, _minimum_vjp,
       "a where a < b or a is NaN, else b (ties and +-0 give b)",
       checks=binary_checks(lambda T, q, a, b, y: (q if _selects_a_min(a, b) else T(0.0),
                                                    T(0.0) if _selects_a_min(a, b) else q),
                            lambda t, a, b: t.minimum(a, b)))
scalar_form("adds", ADD, lambda be, g, ins, out, needs, s: (g,), "x + s")
scalar_form("muls", MUL, lambda be, g, ins, out, needs, s: (be.muls(g, s),), "x * s")
unary("neg", NEG, lambda be, g, ins, out, needs: (be.neg(g),), "-x",
      checks=unary_checks(lambda T, q, x, y: (-q,), lambda t, x: t.neg(x)))
unary("relu", RELU, lambda be, g, ins, out, needs: (be.relu_grad(g, ins[0]),), "max(x, 0)",
      checks=unary_checks(lambda T, q, x, y: (q if x > 0 else T(0.0),),
                          lambda t, x: t.relu(x), AWAY0))
unary("sigmoid", SIGMOID, lambda be, g, ins, out, needs: (be.sigmoid_grad(g, out),),
      "1 / (1 + exp(-x))",
      checks=unary_checks(lambda T, q, x, y: (q * (y * (T(1.0) - y)),),
                          lambda t, x: t.sigmoid(x)))
unary("tanh", TANH, lambda be, g, ins, out, needs: (be.tanh_grad(g, out),), "tanh(x)",
      checks=unary_checks(lambda T, q, x, y: (q * (T(1.0) - y * y),), lambda t, x: t.tanh(x)))
unary("exp", EXP, lambda be, g, ins, out, needs: (be.mul(g, out),), "e ** x",
      checks=unary_checks(lambda T, q, x, y: (q * y,), lambda t, x: t.exp(x)))
unary("log", LOG, lambda be, g, ins, out, needs: (be.div(g, ins[0]),), "natural log",
      checks=unary_checks(lambda T, q, x, y: (q / x,), lambda t, x: t.log(x), POS))
unary("sqrt", SQRT, lambda be, g, ins, out, needs: (be.div(g, be.add(out, out)),),
      "square root",
      checks=unary_checks(lambda T, q, x, y: (q / (y + y),), lambda t, x: t.sqrt(x), POS))
unary("erf", ERF, _erf_vjp, "error function 2/sqrt(pi) int_0^x exp(-t^2) dt, correctly rounded",
      checks=unary_checks(
          lambda T, q, x, y: (q * (ref(EXP, -(x * x)) * T(TWO_OVER_SQRTPI)),),
          lambda t, x: t.erf(x)))
unary("log1p", LOG1P, lambda be, g, ins, out, needs: (be.div(g, be.adds(ins[0], 1.0)),),
      "log(1 + x), correctly rounded",
      checks=unary_checks(lambda T, q, x, y: (q / (x + T(1.0)),), lambda t, x: t.log1p(x), POS))
# expm1's derivative e^x from the output: g * (out + 1), as torch (no second exp; below
# x = -37.4 out + 1 is exactly 0, an absolute error under 2^-54)
unary("expm1", EXPM1, lambda be, g, ins, out, needs: (be.mul(g, be.adds(out, 1.0)),),
      "exp(x) - 1, correctly rounded",
      checks=unary_checks(lambda T, q, x, y: (q * (y + T(1.0)),), lambda t, x: t.expm1(x)))
# sin' = cos, cos' = -sin (torch's forms: g * cos(x), g * -sin(x))
unary("sin", SIN, lambda be, g, ins, out, needs: (be.mul(g, be.cos(ins[0])),),
      "sine, correctly rounded over the whole domain",
      checks=unary_checks(lambda T, q, x, y: (q * ref(COS, x),), lambda t, x: t.sin(x)))
unary("cos", COS, lambda be, g, ins, out, needs: (be.mul(g, be.neg(be.sin(ins[0]))),),
      "cosine, correctly rounded over the whole domain",
      checks=unary_checks(lambda T, q, x, y: (q * -ref(SIN, x),), lambda t, x: t.cos(x)))
unary("gelu_gate", GELU_GATE, lambda be, g, ins, out, needs: (be.gelu_gate_grad(g, ins[0]),),
      "1 + erf(x * M_SQRT1_2) (GELU's gate; erf correctly rounded, the scale and the add "
      "each rounded once)",
      checks=unary_checks(lambda T, q, x, y: (_gate_slope(T, q, x),),
                          lambda t, x: t.erf(x * SQRT1_2) + 1.0))
binary("gelu_gate_grad", GELU_GATE_GRAD, _gelu_gate_grad_vjp,
       "(g * (exp(-(u * u)) * 2/sqrt(pi))) * M_SQRT1_2 with u = x * M_SQRT1_2 (gelu_gate's "
       "backward)", ("g", "x"),
       checks=binary_checks(
           lambda T, q, g, x, y: (_gate_slope(T, q, x), _gate_slope(T, q * g, x) * (
               (x * T(SQRT1_2)) * T(-2.0) * T(SQRT1_2))),
           lambda t, g, x: (g * (t.exp(-((x * SQRT1_2) * (x * SQRT1_2))) * TWO_OVER_SQRTPI))
           * SQRT1_2))
binary("gelu_mul", GELU_MUL, _gelu_mul_vjp,
       "(x * 0.5) * q (the exact GELU's product with its gate q = gelu_gate(x); each product "
       "rounded once)", ("x", "q"),
       checks=binary_checks(lambda T, u, x, q, y: ((u * q) * T(0.5), u * (x * T(0.5))),
                            lambda t, x, q: (x * 0.5) * q))
binary("gelu_mul_grad", GELU_MUL_GRAD, _gelu_mul_grad_vjp,
       "(g * q) * 0.5 (gelu_mul's backward for x)", ("g", "q"),
       checks=binary_checks(lambda T, u, g, q, y: ((u * T(0.5)) * q, (u * T(0.5)) * g),
                            lambda t, g, q: (g * q) * 0.5))
binary("gelu_mul_grad_gate", GELU_MUL_GRAD_GATE, _gelu_mul_grad_gate_vjp,
       "g * (x * 0.5) (gelu_mul's backward for the gate)", ("g", "x"),
       checks=binary_checks(lambda T, u, g, x, y: (u * (x * T(0.5)), (u * g) * T(0.5)),
                            lambda t, g, x: g * (x * 0.5)))
binary("relu_grad", RELU_GRAD, _relu_grad_vjp, "g where x > 0 else 0 (relu's backward)",
       ("g", "x"))
binary("sigmoid_grad", SIGMOID_GRAD, _sigmoid_grad_vjp,
       "g * (y * (1 - y)) (sigmoid's backward from y)", ("g", "y"))
binary("tanh_grad", TANH_GRAD, _tanh_grad_vjp, "g * (1 - y * y) (tanh's backward from y)",
       ("g", "y"))
