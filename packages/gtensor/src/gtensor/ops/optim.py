"""Fused optimizer updates: one elementwise kernel per parameter and quantity (gopt uses them).

Each op computes, element by element, exactly gopt's documented formula in its operation order
(docs/optimizers.md), which the unfused path spelled as a dozen separate ops:

    gk     = g * scale          (clip on: mul by the 0-d clip scale)
    gk     = gk + p * alpha     (L2 on: muls then add)
    adam_m = m * b1 + gk * (1 - b1)
    adam_v = v * b2 + (gk * gk) * (1 - b2)
    adam_p = p - (m * lr_t) / (sqrt(v) + eps)          (lr_t a 0-d buffer: the per-step scalar)
    sgd_p  = p - gk * lr

Every host scalar (b1, 1 - b1 computed in float64, alpha, eps, lr) is rounded once to the
array's dtype, as ``muls``/``adds`` round theirs. With clipping or L2 off, the step is skipped
(not multiplied by one or added to zero: ``-0.0 + +0.0`` would change a sign bit), so each op
comes in variants; the attrs pick one. Bitwise equal to the unfused ops (tested against gopt's
hand computations), in one launch instead of about twelve.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import FLOATS, FloatType
from ..kernels import Kernel, Kind
from ..scalar.dsl import ScalarFn, scalar_fn
from .elementwise import of
from .forms import ADAM_P as FORM_ADAM_P
from .forms import BLOCK, UPDATE, grid_for
from .registry import Op, register


def _gk(m, g, p, scale, alpha, clip: bool, l2: bool):
    """The gradient as gopt prepares it: clipped, then L2 added (each only when on)."""
    gk = g * scale if clip else g
    return gk + p * alpha if l2 else gk


def _variant(name: str, clip: bool, l2: bool) -> str:
    """The base name of a clip/L2 variant: ``<name>[_c][_l]`` (its kernel and function)."""
    return name + ("_c" if clip else "") + ("_l" if l2 else "")


def _variants(name: str, arity: int, body) -> dict[tuple[FloatType, bool, bool], ScalarFn]:
    """``gt_<name>[_c][_l]_<sfx>`` for clip/L2 on or off, float64 and float32."""
    out = {}
    for ft in FLOATS:
        dt = ft.suffix
        for clip in (False, True):
            for l2 in (False, True):
                out[(ft, clip, l2)] = scalar_fn(ft.fn(_variant(name, clip, l2)), (dt,) * arity,
                                                dt)(
                    lambda m_, *a, clip=clip, l2=l2: body(m_, clip, l2, *a))
    return out


# (x, g, p, scale, k, c, alpha) -> new moment; k = beta, c = 1 - beta
ADAM_M = _variants("adam_m", 7, lambda m, clip, l2, x, g, p, scale, k, c, alpha:
                   x * k + _gk(m, g, p, scale, alpha, clip, l2) * c)


def _adam_v(m, clip, l2, x, g, p, scale, k, c, alpha):
    gk = _gk(m, g, p, scale, alpha, clip, l2)
    return x * k + (gk * gk) * c


ADAM_V = _variants("adam_v", 7, _adam_v)
# (x, g, p, scale, lr, unused, alpha) -> new parameter
SGD_P = _variants("sgd_p", 7, lambda m, clip, l2, x, g, p, scale, lr, unused, alpha:
                  x - _gk(m, g, p, scale, alpha, clip, l2) * lr)
ADAM_P = {ft: scalar_fn(ft.fn("adam_p"), (ft.suffix,) * 5, ft.suffix)(
    lambda m, p, mo, v, lr_t, eps: p - (mo * lr_t) / (m.sqrt(v) + eps))
    for ft in FLOATS}

def _update_kernels(name: str, fns: dict, cpu: bool = False):
    def kernels(ft: FloatType) -> list[Kernel]:
        body = UPDATE.cpu_body if cpu else UPDATE.cuda_body
        out = []
        for clip in (False, True):
            for l2 in (False, True):
                fn = fns[(ft, clip, l2)]
                out.append(Kernel(ft.kernel(_variant(name, clip, l2)), UPDATE.params(ft.ctype),
                                  body(fn.cname, ft.ctype), Kind.ELEMENTWISE, (fn,), UPDATE))
        return out

    return kernels


def _adam_p_kernels(cpu: bool = False):
    def kernels(ft: FloatType) -> list[Kernel]:
        body = (FORM_ADAM_P.cpu_body if cpu else FORM_ADAM_P.cuda_body)(ADAM_P[ft].cname,
                                                                          ft.ctype)
        return [Kernel(ft.kernel("adam_p"), FORM_ADAM_P.params(ft.ctype), body, Kind.ELEMENTWISE,
                       (ADAM_P[ft],), FORM_ADAM_P)]

    return kernels


def _infer(op: str, scalars: int):
    """Same-shape arrays, then ``scalars`` 0-d arrays; the attrs checked as real numbers."""
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        arrays, zero_d = shapes_[:len(shapes_) - scalars], shapes_[len(shapes_) - scalars:]
        for k, s in enumerate(arrays):
            if s != arrays[0]:
                raise ValueError(f"{op}: input {k} has shape {s}, input 0 has {arrays[0]}; "
                                 "expected equal shapes")
        for s in zero_d:
            if s != ():
                raise ValueError(f"{op}: the scalar input has shape {s}; expected a 0-d array")
        out = {}
        for key, value in attrs.items():
            if key in ("clip", "l2"):
                if not isinstance(value, (bool, np.bool_)):
                    raise TypeError(f"{op}: {key} must be a bool, got {value!r}")
                out[key] = bool(value)
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                                     np.integer)):
                    raise TypeError(f"{op}: {key} must be a real number, got {value!r}")
                out[key] = float(value)
        return arrays[0], out

    return infer


def _update_op(name: str, fns: dict, coef: str, doc: str) -> Op:
    """adam_m / adam_v / sgd_p: (x, g, p, scale) -> y, attrs coef (beta or lr), alpha, clip."""

    def host(x, k, alpha):
        """The scalar arguments, each rounded once to the dtype: k, 1 - k (float64), alpha."""
        t = of(x)
        return t.scalar(k), t.scalar(1.0 - k), t.scalar(alpha)

    def reference(x, g, p, scale, **a):
        fn = fns[(of(x), a["clip"], a["alpha"] != 0.0)]
        return fn.eval(x, g, p, scale, *host(x, a[coef], a["alpha"]))

    def launch(rt, ks, ins, out, **a):
        x = ins[0]
        if out.size:
            rt.launch(ks[_variant(name, a["clip"], a["alpha"] != 0.0)], grid_for(out.size),
                      BLOCK, (*ins, out, out.size, *host(x, a[coef], a["alpha"])))

    return register(Op(name, ("x", "g", "p", "scale"), (coef, "alpha", "clip"),
                       _infer(name, 1), reference, _update_kernels(name, fns),
                       launch, None, doc, {"alpha": 0.0, "clip": False},
                       cpu=_update_kernels(name, fns, cpu=True)))


_update_op("adam_m", ADAM_M, "beta",
           "Adam's first moment: x * b1 + gk * (1 - b1), gk = g (clipped, + L2)")
_update_op("adam_v", ADAM_V, "beta",
           "Adam's second moment: x * b2 + (gk * gk) * (1 - b2), gk = g (clipped, + L2)")
_update_op("sgd_p", SGD_P, "lr", "SGD's new parameter: x - gk * lr, gk = g (clipped, + L2)")


def _adam_p_reference(p, m, v, lr_t, *, eps):
    ft = of(p)
    return ADAM_P[ft].eval(p, m, v, lr_t, ft.scalar(eps))


def _adam_p_launch(rt, ks, ins, out, *, eps):
    if out.size:
        rt.launch(ks.only, grid_for(out.size), BLOCK, (*ins, out, out.size, of(out).scalar(eps)))


register(Op("adam_p", ("p", "m", "v", "lr_t"), ("eps",), _infer("adam_p", 1), _adam_p_reference,
            _adam_p_kernels(), _adam_p_launch, None,
            "Adam's new parameter: p - (m * lr_t) / (sqrt(v) + eps), lr_t a 0-d array",
            cpu=_adam_p_kernels(cpu=True)))

UPDATE_OPS = ("adam_m", "adam_v", "adam_p", "sgd_p")
