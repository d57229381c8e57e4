"""The correctly rounded scalar functions: the exact value rounded once, float64 and float32.

Each is written in the scalar language (``gtensor.scalar.dsl``) as a fast path with a proven
error bound and a rounding test, and a cold accurate path (triple-double) taken where the test
cannot decide (Ziv's strategy); their definitions use the fused multiply-add (one rounding,
``__fma_rn``, exact in numpy by ``gtensor.scalar.npfma``), constant tables and loops, so they
are listed here for the checks that allow those only where a definition asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from . import crerf, crexp, crhyp, crlog, crtrig
from .dsl import ScalarFn

ALL: list[ScalarFn] = [*crerf.ALL, *crlog.ALL, *crexp.ALL, *crtrig.ALL, *crhyp.ALL,
                        crexp.EXP_F64, crexp.EXP_F32, crlog.LOG_F64, crlog.LOG_F32]


@dataclass(frozen=True)
class Function:
    """One correctly rounded function: its float64 / float32 scalar functions, their accurate
    paths alone, and the module (or object) with ``accurate_needed`` and ``fast_dd`` (tests)."""

    f64: ScalarFn
    f32: ScalarFn
    acc_f64: ScalarFn
    acc_f32: ScalarFn
    module: ModuleType | object


BY_NAME: dict[str, Function] = {
    "erf": Function(crerf.ERF_F64, crerf.ERF_F32, crerf.erf_acc_f64, crerf.erf_acc_f32, crerf),
    "log1p": Function(crlog.LOG1P_F64, crlog.LOG1P_F32, crlog.log1p_acc_f64,
                      crlog.log1p_acc_f32, crlog),
    "expm1": Function(crexp.EXPM1_F64, crexp.EXPM1_F32, crexp.expm1_acc_f64,
                      crexp.expm1_acc_f32, crexp),
    "exp": Function(crexp.EXP_F64, crexp.EXP_F32, crexp.exp_acc_f64, crexp.exp_acc_f32,
                    crexp.EXP_HOOKS),
    "log": Function(crlog.LOG_F64, crlog.LOG_F32, crlog.log_acc_f64, crlog.log_acc_f32,
                    crlog.LOG_HOOKS),
    "tanh": Function(crhyp.TANH_F64, crhyp.TANH_F32, crhyp.tanh_acc_f64, crhyp.tanh_acc_f32,
                     crhyp.TANH_HOOKS),
    "sigmoid": Function(crhyp.SIGMOID_F64, crhyp.SIGMOID_F32, crhyp.sigmoid_acc_f64,
                        crhyp.sigmoid_acc_f32, crhyp.SIGMOID_HOOKS),
    "sin": Function(crtrig.SIN_F64, crtrig.SIN_F32, crtrig.sin_acc_f64, crtrig.sin_acc_f32,
                    crtrig.SIN_HOOKS),
    "cos": Function(crtrig.COS_F64, crtrig.COS_F32, crtrig.cos_acc_f64, crtrig.cos_acc_f32,
                    crtrig.COS_HOOKS),
}


def closure(fns: list[ScalarFn] | None = None) -> list[ScalarFn]:
    """``fns`` (default: ``ALL``) and every scalar function they call, callees first."""
    order: list[ScalarFn] = []

    def visit(fn: ScalarFn) -> None:
        if fn in order:
            return
        for dep in fn.dependencies():
            visit(dep)
        order.append(fn)

    for fn in ALL if fns is None else fns:
        visit(fn)
    return order
