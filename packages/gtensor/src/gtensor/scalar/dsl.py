"""The scalar language: one Python text per elementwise function, run by numpy or emitted as CUDA.

A scalar function is written once as ``def f(m, x, ...)`` using only:

* operators ``+ - * /`` and unary ``-`` on floats (each one correctly rounded, no FMA);
  comparisons ``< <= > >= == !=``; ``& | ~`` on booleans; ``+ - * & | << >>`` on int64;
* helpers of ``m``: ``where``, ``isnan``, ``const``, ``rint``, ``floor``, ``sqrt``, ``fabs``,
  ``bits``, ``from_bits``, ``to_f64``, ``to_f32``, ``i2f``, ``f2i``, ``call`` (a
  function, or a per-dtype family ``{FloatType: function}`` such as ``elementwise.EXP``: the
  member of the first float argument's dtype, so one body serves float64 and float32);
* ``fma(a, b, c)``: the fused multiply-add, one rounding (``__fma_rn``; numpy: the exact
  emulation of :mod:`gtensor.scalar.npfma`), used only where a function's definition says so;
* ``table(tab, i)``: entry ``i`` (int64, in range in every lane) of a constant ``Table``;
* ``loop(n, body, *init)``: ``n`` fixed iterations of ``carry = body(m, k, *carry)`` (a C
  ``for`` loop; numpy: a Python loop over whole arrays);
* ``rare(ok, value, fn, *args)``: ``value`` where ``ok``, else ``call(fn, *args)``, the call
  evaluated only where ``ok`` is false (a C conditional; numpy: on those elements only). ``fn``
  is declared ``cold``: an out-of-line function, the accurate path of a Ziv-style evaluation.
  A function with a ``rare`` on its way also gets a *first stage* for cpu builds
  (``ScalarFn.first_stage``): the same text with the ``rare`` as a flag, so that a loop over it
  vectorizes and the whole function runs only on the flagged lanes (``ops.forms.Map``);
* ``call_multi(fn, *args)``: a cold function with several results (``out_dt`` a tuple): a C
  function writing through pointers, called once, so shared pieces of the accurate paths are
  compiled once (numpy: the body's tuple).

Run with ``m = NUMPY`` and numpy arrays, the text *is* the numpy reference (vectorized,
every operation an IEEE operation of numpy). Run with ``m = CEmitter(...)`` and traced
values, the same text produces the body of a CUDA ``__device__`` function that spells every
operation with a ``__d*_rn`` / ``__f*_rn`` intrinsic, so no compiler can fuse or reorder it.
Python float constants take the dtype of the value they meet, in both modes (NEP 50).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .. import dtypes
from . import npfma

# The scalar language's dtypes: the float ones are named by their ``FloatType.suffix``.
F64, F32, I64, BOOL = dtypes.F64.suffix, dtypes.F32.suffix, "i64", "bool"
_NP = {F64: dtypes.F64.np, F32: dtypes.F32.np, I64: dtypes.INDEX, BOOL: dtypes.MASK}
CTYPE = {dt: dtypes.CTYPES[npdt] for dt, npdt in _NP.items()}
NPTYPE = {dt: npdt.type for dt, npdt in _NP.items()}


def pick(family: dict, dt: str) -> "ScalarFn":
    """The member of a per-dtype family (``{FloatType: ScalarFn}``, as ``elementwise.EXP``)
    for the scalar language's float dtype ``dt``; TypeError naming the missing dtype."""
    for ft, fn in family.items():
        if ft.suffix == dt:
            return fn
    raise TypeError(f"scalar language: no {dt} member in the family "
                    f"{sorted(f.suffix for f in family)}")


def _np_float_dt(x: Any) -> str | None:
    """The scalar language's name of a numpy value's float dtype, else None."""
    d = np.asarray(x).dtype
    return F64 if d == np.float64 else F32 if d == np.float32 else None


# --------------------------------------------------------------------------- numpy mode
class _NumpyMath:
    """Helpers of the scalar language for numpy arrays."""

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        """Select ``a`` where ``c`` else ``b``."""
        return np.where(c, a, b)

    @staticmethod
    def isnan(x: Any) -> Any:
        """NaN test (``x != x``)."""
        return x != x

    @staticmethod
    def const(value: float, like: Any) -> Any:
        """The constant ``value`` in the dtype of ``like`` (for a where with two constants)."""
        return np.asarray(value, dtype=np.asarray(like).dtype)

    @staticmethod
    def rint(x: Any) -> Any:
        """Round to nearest integer, ties to even."""
        return np.rint(x)

    @staticmethod
    def floor(x: Any) -> Any:
        """Round toward minus infinity."""
        return np.floor(x)

    @staticmethod
    def sqrt(x: Any) -> Any:
        """Correctly rounded square root."""
        return np.sqrt(x)

    @staticmethod
    def fabs(x: Any) -> Any:
        """Absolute value (clears the sign bit)."""
        return np.abs(x)

    @staticmethod
    def bits(x: Any) -> Any:
        """The IEEE bit pattern of a float64 as int64."""
        return np.asarray(x, dtype=np.float64).view(np.int64)

    @staticmethod
    def from_bits(i: Any) -> Any:
        """The float64 with the given int64 bit pattern."""
        return np.asarray(i, dtype=np.int64).view(np.float64)

    @staticmethod
    def to_f64(x: Any) -> Any:
        """Widen to float64 (exact)."""
        return np.asarray(x).astype(np.float64)

    @staticmethod
    def to_f32(x: Any) -> Any:
        """Round to float32 (to nearest, ties to even)."""
        return np.asarray(x).astype(np.float32)

    @staticmethod
    def i2f(i: Any) -> Any:
        """int64 to float64 (exact for |i| < 2**53)."""
        return np.asarray(i).astype(np.float64)

    @staticmethod
    def f2i(x: Any) -> Any:
        """float64 to int64, truncating (callers pass integral values)."""
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def wrapping_add(a: Any, b: Any) -> Any:
        """int64 a + b modulo 2**64 (two's complement wraparound, as numpy and torch)."""
        with np.errstate(over="ignore"):
            return np.add(np.asarray(a, np.int64), np.asarray(b, np.int64), dtype=np.int64)

    @staticmethod
    def call(fn: "ScalarFn | dict", *args: Any) -> Any:
        """Call another scalar function (a per-dtype family: the one of the first float
        argument's dtype)."""
        if isinstance(fn, dict):
            fn = pick(fn, next(_np_float_dt(a) for a in args if _np_float_dt(a)))
        return fn.body(NUMPY, *args)

    @staticmethod
    def fma(a: Any, b: Any, c: Any) -> Any:
        """``a*b + c`` rounded once."""
        return npfma.fma(a, b, c)

    @staticmethod
    def table(tab: "Table", i: Any) -> Any:
        """Entry ``i`` of the constant table ``tab``."""
        return tab.array[np.asarray(i)]

    @staticmethod
    def loop(n: int, body: Callable, *init: Any) -> tuple:
        """``n`` iterations of ``carry = body(m, k, *carry)``, k = 0 .. n-1 (int64)."""
        carry = tuple(init)
        for k in range(n):
            carry = tuple(body(NUMPY, np.int64(k), *carry))
        return carry

    @staticmethod
    def call_multi(fn: "ScalarFn", *args: Any) -> tuple:
        """Call a function with several results."""
        return tuple(fn.body(NUMPY, *args))

    @staticmethod
    def rare(ok: Any, value: Any, fn: "ScalarFn", *args: Any) -> Any:
        """``value`` where ``ok``, else ``fn(*args)``, computed only on those elements."""
        ok = np.asarray(ok)
        shape = np.broadcast_shapes(ok.shape, np.shape(value), *(np.shape(a) for a in args))
        out = np.array(np.broadcast_to(np.asarray(value), shape), copy=True)
        bad = ~np.broadcast_to(ok, shape)
        if bad.any():
            sub = [np.broadcast_to(np.asarray(a), shape)[bad] for a in args]
            out[bad] = fn.body(NUMPY, *sub)
        return out


NUMPY = _NumpyMath()


class _FloatMath:
    """Helpers of the scalar language for one Python float64 (``ScalarFn.eval_float``): each
    operation the IEEE double one numpy applies (Python's float arithmetic is the C double's),
    so a value is numpy's bits; the helpers a float64 elementwise function uses, others
    absent (an AttributeError: the caller evaluates on numpy)."""

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        """``a`` if ``c`` else ``b``."""
        return a if c else b

    @staticmethod
    def isnan(x: float) -> bool:
        """NaN test (``x != x``)."""
        return x != x

    @staticmethod
    def rint(x: float) -> float:
        """Round to nearest integer, ties to even (Python's round of a float), keeping the
        sign of a zero result as numpy's rint does (-0.3 -> -0.0)."""
        return math.copysign(float(round(x)), x) if math.isfinite(x) else x

    @staticmethod
    def floor(x: float) -> float:
        """Round toward minus infinity (-0.0 stays -0.0)."""
        return math.copysign(float(math.floor(x)), x) if math.isfinite(x) else x

    @staticmethod
    def fabs(x: float) -> float:
        """Absolute value (clears the sign bit)."""
        return math.fabs(x)

    @staticmethod
    def f2i(x: float) -> int:
        """float64 to int, truncating (callers pass integral values)."""
        return int(x)


FLOAT = _FloatMath()


class _NumpyFirst(_NumpyMath):
    """numpy under the first stage's rules (``ScalarFn.first_numpy``): ``rare`` flags its
    lanes, f2i flags arguments outside +-2^31 (and NaN) and converts 0 there, table indices
    are clamped -- what the C first stage computes (cpu_runtime.h, f2i_first/index_first)."""

    def __init__(self) -> None:
        self.bad: Any = np.False_

    def _flag(self, lanes: Any) -> None:
        self.bad = self.bad | np.asarray(lanes)

    def rare(self, ok: Any, value: Any, fn: "ScalarFn", *args: Any) -> Any:
        """``value``; the lanes where ``ok`` is false are flagged."""
        self._flag(~np.asarray(ok))
        return value

    def f2i(self, x: Any) -> Any:
        """float64 to int64, truncating, inside +-2^31; 0 and a flag elsewhere."""
        x = np.asarray(x)
        inside = np.abs(x) < 2.0**31
        self._flag(~inside)
        return np.where(inside, x, 0.0).astype(np.int64)

    def table(self, tab: "Table", i: Any) -> Any:
        """Entry ``i`` of ``tab``, the index clamped to the table."""
        return tab.array[np.clip(np.asarray(i), 0, len(tab.values) - 1)]

    def call(self, fn: "ScalarFn | dict", *args: Any) -> Any:
        """A callee with a first stage runs under these rules, any other as numpy."""
        if isinstance(fn, dict):
            fn = pick(fn, next(_np_float_dt(a) for a in args if _np_float_dt(a)))
        return fn.body(self if fn.first_stage else NUMPY, *args)

    def loop(self, n: int, body: Callable, *init: Any) -> tuple:
        """``n`` iterations of the body under these rules."""
        carry = tuple(init)
        for k in range(n):
            carry = tuple(body(self, np.int64(k), *carry))
        return carry


# --------------------------------------------------------------------------- CUDA mode
_BINOPS_FLOAT = {
    "+": ("__dadd_rn", "__fadd_rn"),
    "-": ("__dsub_rn", "__fsub_rn"),
    "*": ("__dmul_rn", "__fmul_rn"),
    "/": ("__ddiv_rn", "__fdiv_rn"),
}


def float_literal(value: float, dt: str) -> str:
    """An exact C literal of ``value`` rounded to dtype ``dt`` ("f64" or "f32"):
    ``FloatType.literal``."""
    return dtypes.BY_SUFFIX[dt].literal(value)


@dataclass
class CVal:
    """A traced value: the name of a C variable and its dtype."""

    em: "CEmitter"
    expr: str
    dt: str

    # arithmetic ----------------------------------------------------------
    def _bin(self, other: Any, op: str, reverse: bool = False) -> "CVal":
        other = self.em.coerce(other, self.dt)
        if other.dt != self.dt:
            raise TypeError(f"scalar language: {self.dt} {op} {other.dt} mixes dtypes")
        a, b = (other, self) if reverse else (self, other)
        if self.dt in (F64, F32) and op in _BINOPS_FLOAT:
            fn = _BINOPS_FLOAT[op][0 if self.dt == F64 else 1]
            return self.em.let(f"{fn}({a.expr}, {b.expr})", self.dt)
        if self.dt == I64 and op in ("+", "-", "*", "&", "|", "<<", ">>"):
            return self.em.let(f"({a.expr} {op} {b.expr})", I64)
        if self.dt == BOOL and op in ("&", "|"):
            return self.em.let(f"({a.expr} {op}{op} {b.expr})", BOOL)
        raise TypeError(f"scalar language: operator {op} is not defined on {self.dt}")

    def __add__(self, o: Any) -> "CVal":
        return self._bin(o, "+")

    def __radd__(self, o: Any) -> "CVal":
        return self._bin(o, "+", True)

    def __sub__(self, o: Any) -> "CVal":
        return self._bin(o, "-")

    def __rsub__(self, o: Any) -> "CVal":
        return self._bin(o, "-", True)

    def __mul__(self, o: Any) -> "CVal":
        return self._bin(o, "*")

    def __rmul__(self, o: Any) -> "CVal":
        return self._bin(o, "*", True)

    def __truediv__(self, o: Any) -> "CVal":
        return self._bin(o, "/")

    def __rtruediv__(self, o: Any) -> "CVal":
        return self._bin(o, "/", True)

    def __and__(self, o: Any) -> "CVal":
        return self._bin(o, "&")

    def __rand__(self, o: Any) -> "CVal":
        return self._bin(o, "&", True)

    def __or__(self, o: Any) -> "CVal":
        return self._bin(o, "|")

    def __ror__(self, o: Any) -> "CVal":
        return self._bin(o, "|", True)

    def __lshift__(self, o: Any) -> "CVal":
        return self._bin(o, "<<")

    def __rshift__(self, o: Any) -> "CVal":
        return self._bin(o, ">>")

    def __neg__(self) -> "CVal":
        if self.dt == BOOL:
            raise TypeError("scalar language: unary minus on bool")
        return self.em.let(f"(-{self.expr})", self.dt)

    def __invert__(self) -> "CVal":
        if self.dt != BOOL:
            raise TypeError("scalar language: ~ is only defined on bool")
        return self.em.let(f"(!{self.expr})", BOOL)

    # comparisons ---------------------------------------------------------
    def _cmp(self, other: Any, op: str) -> "CVal":
        other = self.em.coerce(other, self.dt)
        if other.dt != self.dt or self.dt == BOOL:
            raise TypeError(f"scalar language: cannot compare {self.dt} {op} {other.dt}")
        return self.em.let(f"({self.expr} {op} {other.expr})", BOOL)

    def __lt__(self, o: Any) -> "CVal":
        return self._cmp(o, "<")

    def __le__(self, o: Any) -> "CVal":
        return self._cmp(o, "<=")

    def __gt__(self, o: Any) -> "CVal":
        return self._cmp(o, ">")

    def __ge__(self, o: Any) -> "CVal":
        return self._cmp(o, ">=")

    def __eq__(self, o: Any) -> "CVal":  # type: ignore[override]
        return self._cmp(o, "==")

    def __ne__(self, o: Any) -> "CVal":  # type: ignore[override]
        return self._cmp(o, "!=")

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        raise TypeError("scalar language: a traced value has no truth value; use m.where")


@dataclass
class CEmitter:
    """Traces a scalar function into the statements of a CUDA ``__device__`` function."""

    lines: list[str] = field(default_factory=list)
    called: list = field(default_factory=list)  # the callee of every call statement
    rare_called: list = field(default_factory=list)  # the callees of ``rare`` (cold paths)
    tables: list = field(default_factory=list)  # the tables read, in order of first use
    loop_cost: int = 0  # statements a loop repeats beyond its one traced body
    # tracing the first stage (``ScalarFn.first_stage``): ``rare`` sets the flag ``gt_bad``
    # instead of calling its cold function; f2i and table reads without branches
    first: bool = False
    flagged: bool = False  # (first stage) some ``rare`` of this body sets the flag
    multi: bool = False  # some ``call_multi`` is made outside ``rare`` (no first stage then)
    _n: int = 0
    _indent: str = "    "

    def let(self, expr: str, dt: str) -> CVal:
        """Bind ``expr`` to a fresh ``const`` variable."""
        self._n += 1
        name = f"t{self._n}"
        self.lines.append(f"{self._indent}const {CTYPE[dt]} {name} = {expr};")
        return CVal(self, name, dt)

    def coerce(self, value: Any, dt: str) -> CVal:
        """Turn a Python constant into a literal of dtype ``dt``; pass traced values through."""
        if isinstance(value, CVal):
            return value
        if isinstance(value, bool):
            return CVal(self, "true" if value else "false", BOOL)
        if dt in (F64, F32) and isinstance(value, (int, float)):
            return CVal(self, float_literal(float(value), dt), dt)
        if dt == I64 and isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise OverflowError(f"scalar language: int constant {value} exceeds int64")
            text = f"({value}LL)" if value != -(2**63) else "(-9223372036854775807LL-1)"
            return CVal(self, text, I64)
        raise TypeError(f"scalar language: cannot use {value!r} as a {dt} constant")

    def _unary(self, x: CVal, f64: str, f32: str) -> CVal:
        if x.dt == F64:
            return self.let(f"{f64}({x.expr})", F64)
        if x.dt == F32:
            return self.let(f"{f32}({x.expr})", F32)
        raise TypeError(f"scalar language: {f64} needs a float, got {x.dt}")

    def where(self, c: Any, a: Any, b: Any) -> CVal:
        """Select ``a`` where ``c`` else ``b``."""
        dt = a.dt if isinstance(a, CVal) else b.dt
        a, b = self.coerce(a, dt), self.coerce(b, dt)
        if not isinstance(c, CVal) or c.dt != BOOL or a.dt != b.dt:
            raise TypeError("scalar language: where(bool, x, y) with x and y of one dtype")
        return self.let(f"({c.expr} ? {a.expr} : {b.expr})", dt)

    def isnan(self, x: CVal) -> CVal:
        """NaN test (``x != x``)."""
        return x != x

    def const(self, value: float, like: CVal) -> CVal:
        """The constant ``value`` in the dtype of ``like`` (for a where with two constants)."""
        return self.coerce(value, like.dt)

    def rint(self, x: CVal) -> CVal:
        """Round to nearest integer, ties to even."""
        return self._unary(x, "rint", "rintf")

    def floor(self, x: CVal) -> CVal:
        """Round toward minus infinity."""
        return self._unary(x, "floor", "floorf")

    def sqrt(self, x: CVal) -> CVal:
        """Correctly rounded square root."""
        return self._unary(x, "__dsqrt_rn", "__fsqrt_rn")

    def fabs(self, x: CVal) -> CVal:
        """Absolute value (clears the sign bit)."""
        return self._unary(x, "fabs", "fabsf")

    def bits(self, x: CVal) -> CVal:
        """The IEEE bit pattern of a float64 as int64."""
        self._expect(x, F64, "bits")
        return self.let(f"__double_as_longlong({x.expr})", I64)

    def from_bits(self, i: Any) -> CVal:
        """The float64 with the given int64 bit pattern."""
        i = self.coerce(i, I64)
        self._expect(i, I64, "from_bits")
        return self.let(f"__longlong_as_double({i.expr})", F64)

    def to_f64(self, x: CVal) -> CVal:
        """Widen float32 to float64 (exact)."""
        self._expect(x, F32, "to_f64")
        return self.let(f"((double)({x.expr}))", F64)

    def to_f32(self, x: CVal) -> CVal:
        """Round float64 to float32 (to nearest, ties to even)."""
        self._expect(x, F64, "to_f32")
        return self.let(f"__double2float_rn({x.expr})", F32)

    def i2f(self, i: CVal) -> CVal:
        """int64 to float64 (exact for |i| < 2**53)."""
        self._expect(i, I64, "i2f")
        return self.let(f"__ll2double_rn({i.expr})", F64)

    def f2i(self, x: CVal) -> CVal:
        """float64 to int64, truncating."""
        self._expect(x, F64, "f2i")
        if self.first:
            return self.let(f"gtcpu::f2i_first({x.expr}, gt_bad)", I64)
        return self.let(f"__double2ll_rz({x.expr})", I64)

    def wrapping_add(self, a: CVal, b: CVal) -> CVal:
        """int64 a + b modulo 2**64: the sum of the unsigned images (defined in C, where a
        signed overflow is not), converted back (two's complement)."""
        a, b = self.coerce(a, I64), self.coerce(b, I64)
        self._expect(a, I64, "wrapping_add")
        self._expect(b, I64, "wrapping_add")
        return self.let(f"(long long)((unsigned long long){a.expr} + "
                        f"(unsigned long long){b.expr})", I64)

    def call(self, fn: "ScalarFn | dict", *args: CVal) -> CVal:
        """Call another scalar function's ``__device__`` function (a per-dtype family: the
        one of the first float argument's dtype)."""
        if isinstance(fn, dict):
            dt = next((a.dt for a in args if isinstance(a, CVal) and a.dt in (F64, F32)), None)
            if dt is None:
                raise TypeError("scalar language: a per-dtype call needs a float argument")
            fn = pick(fn, dt)
        self._check_args(fn, args)
        self.called.append(fn)
        if self.first and fn.first_stage:
            return self.let(f"{fn.first_cname}({', '.join(a.expr for a in args)}, gt_bad)",
                            fn.out_dt)
        return self.let(f"{fn.cname}({', '.join(a.expr for a in args)})", fn.out_dt)

    def fma(self, a: Any, b: Any, c: Any) -> CVal:
        """``a*b + c`` rounded once (``__fma_rn`` / ``__fmaf_rn``)."""
        dt = next((v.dt for v in (a, b, c) if isinstance(v, CVal)), None)
        if dt not in (F64, F32):
            raise TypeError("scalar language: fma needs float operands")
        a, b, c = (self.coerce(v, dt) for v in (a, b, c))
        if not a.dt == b.dt == c.dt == dt:
            raise TypeError("scalar language: fma mixes dtypes")
        fn = "__fma_rn" if dt == F64 else "__fmaf_rn"
        return self.let(f"{fn}({a.expr}, {b.expr}, {c.expr})", dt)

    def table(self, tab: "Table", i: Any) -> CVal:
        """Entry ``i`` of the constant table ``tab``."""
        i = self.coerce(i, I64)
        self._expect(i, I64, tab.cname)
        if tab not in self.tables:
            self.tables.append(tab)
        if self.first:
            last = len(tab.values) - 1
            return self.let(f"{tab.cname}[gtcpu::index_first({i.expr}, {last}LL)]", tab.dt)
        return self.let(f"{tab.cname}[{i.expr}]", tab.dt)

    def loop(self, n: int, body: Callable, *init: Any) -> tuple:
        """``n`` iterations of ``carry = body(m, k, *carry)`` as a C ``for`` loop."""
        carries = []
        for v in init:
            if not isinstance(v, CVal):
                raise TypeError("scalar language: loop carries must be traced values")
            self._n += 1
            name = f"c{self._n}"
            self.lines.append(f"{self._indent}{CTYPE[v.dt]} {name} = {v.expr};")
            carries.append(CVal(self, name, v.dt))
        self._n += 1
        k = CVal(self, f"k{self._n}", I64)
        self.lines.append(f"{self._indent}for (long long {k.expr} = 0; {k.expr} < {int(n)}LL; "
                          f"++{k.expr}) {{")
        outer, start = self._indent, len(self.lines)
        self._indent = outer + "    "
        new = [self.coerce(v, c.dt) for v, c in zip(body(self, k, *carries), carries)]
        if len(new) != len(carries) or any(v.dt != c.dt for v, c in zip(new, carries)):
            raise TypeError("scalar language: a loop body returns its carries, same dtypes")
        names = {c.expr for c in carries}
        new = [self.let(v.expr, v.dt) if v.expr in names else v for v in new]  # c1, c2 = c2, c1
        for c, v in zip(carries, new):
            self.lines.append(f"{self._indent}{c.expr} = {v.expr};")
        self.loop_cost += (int(n) - 1) * (len(self.lines) - start)
        self._indent = outer
        self.lines.append(f"{outer}}}")
        return tuple(carries)

    def call_multi(self, fn: "ScalarFn", *args: Any) -> tuple:
        """Call a cold function with several results (out-parameters in C)."""
        if not (fn.cold and isinstance(fn.out_dt, tuple)):
            raise TypeError(f"scalar language: call_multi calls cold functions with several "
                            f"results, {fn.cname} is not one")
        args = tuple(self.coerce(a, dt) for a, dt in zip(args, fn.in_dts))
        self._check_args(fn, args)
        self.called.append(fn)
        self.multi = True
        outs = []
        for dt in fn.out_dt:
            self._n += 1
            outs.append(CVal(self, f"m{self._n}", dt))
        self.lines.append(f"{self._indent}{' '.join(f'{CTYPE[o.dt]} {o.expr};' for o in outs)}")
        ptrs = ", ".join(f"&{o.expr}" for o in outs)
        self.lines.append(f"{self._indent}{fn.cname}({', '.join(a.expr for a in args)}, {ptrs});")
        return tuple(outs)

    def rare(self, ok: Any, value: Any, fn: "ScalarFn", *args: Any) -> CVal:
        """``value`` where ``ok``, else ``fn(*args)`` (evaluated only then: a C conditional)."""
        if not fn.cold:
            raise TypeError(f"scalar language: rare() calls cold functions, {fn.cname} is not")
        args = tuple(self.coerce(a, dt) for a, dt in zip(args, fn.in_dts))
        self._check_args(fn, args)
        value = self.coerce(value, fn.out_dt)
        if not isinstance(ok, CVal) or ok.dt != BOOL or value.dt != fn.out_dt:
            raise TypeError("scalar language: rare(bool, value, fn, ...) with value of fn's "
                            "dtype")
        self.rare_called.append(fn)
        if self.first:  # the lane is bad where ok is false; the value is used only where true
            self.flagged = True
            self.lines.append(f"{self._indent}gt_bad = gt_bad | !{ok.expr};")
            return value
        return self.let(f"({ok.expr} ? {value.expr} : "
                        f"{fn.cname}({', '.join(a.expr for a in args)}))", fn.out_dt)

    def _check_args(self, fn: "ScalarFn", args: tuple) -> None:
        if len(args) != len(fn.in_dts):
            raise TypeError(f"scalar language: {fn.cname} takes {len(fn.in_dts)} arguments")
        for a, dt in zip(args, fn.in_dts):
            self._expect(a, dt, fn.cname)

    @staticmethod
    def _expect(x: Any, dt: str, what: str) -> None:
        if not isinstance(x, CVal) or x.dt != dt:
            got = x.dt if isinstance(x, CVal) else type(x).__name__
            raise TypeError(f"scalar language: {what} expects {dt}, got {got}")


# --------------------------------------------------------------------------- definitions
@dataclass(frozen=True, eq=False)
class ScalarFn:
    """A scalar function written once in the scalar language, with fixed argument dtypes."""

    cname: str
    in_dts: tuple[str, ...]
    out_dt: str | tuple[str, ...]  # a tuple: several results (a cold function, call_multi)
    body: Callable[..., Any]
    cold: bool = False  # an out-of-line function (``rare``'s accurate paths): GT_COLD, not inline

    def numpy(self, *arrays: Any) -> np.ndarray:
        """Evaluate on numpy arrays (broadcasting); the numpy reference of this function."""
        with np.errstate(all="ignore"):
            return self.eval(*arrays)

    def eval(self, *arrays: Any) -> np.ndarray:
        """``numpy`` without its ``np.errstate`` (for callers that already set it)."""
        if isinstance(self.out_dt, tuple):
            return tuple(np.asarray(v, dtype=NPTYPE[dt])
                         for v, dt in zip(self.body(NUMPY, *arrays), self.out_dt))
        return np.asarray(self.body(NUMPY, *arrays), dtype=NPTYPE[self.out_dt])

    def eval_float(self, x: float) -> float:
        """This float64 function of one float64 ``x`` as a Python float, the bits ``eval``
        gives (host-side scalars, e.g. a learning-rate schedule's cosine: no numpy array per
        operation); evaluated on numpy where the body needs a helper ``_FloatMath`` lacks or
        a Python float operation raises (a division by zero, an int of inf)."""
        if self.in_dts != (F64,) or self.out_dt != F64:
            raise TypeError(f"{self.cname}.eval_float: for float64 -> float64 functions; this "
                            f"one takes {self.in_dts} to {self.out_dt}")
        try:
            return float(self.body(FLOAT, float(x)))
        except (AttributeError, ArithmeticError, ValueError):
            with np.errstate(all="ignore"):
                return float(self.eval(np.float64(x)))

    def device_source(self) -> str:
        """The CUDA ``__device__`` definition of this function."""
        em = CEmitter()
        names = [f"a{i}" for i in range(len(self.in_dts))]
        args = [CVal(em, n, dt) for n, dt in zip(names, self.in_dts)]
        out = self.body(em, *args)
        if isinstance(self.out_dt, tuple):
            outs = [em.coerce(v, dt) for v, dt in zip(out, self.out_dt)]
            if len(outs) != len(self.out_dt) or any(
                    v.dt != dt for v, dt in zip(outs, self.out_dt)):
                raise TypeError(f"{self.cname}: returns the wrong results")
            params = ", ".join([f"{CTYPE[dt]} {n}" for n, dt in zip(names, self.in_dts)]
                               + [f"{CTYPE[dt]}* o{i}" for i, dt in enumerate(self.out_dt)])
            stores = "\n".join(f"    *o{i} = {v.expr};" for i, v in enumerate(outs))
            body = "\n".join(em.lines)
            return (f"__device__ GT_COLD void {self.cname}({params})\n"
                    f"{{\n{body}\n{stores}\n}}\n")
        out = em.coerce(out, self.out_dt)
        if out.dt != self.out_dt:
            raise TypeError(f"{self.cname}: returns {out.dt}, declared {self.out_dt}")
        params = ", ".join(f"{CTYPE[dt]} {n}" for n, dt in zip(names, self.in_dts))
        body = "\n".join(em.lines)
        qualifier = "GT_COLD" if self.cold else "__forceinline__"
        return (
            f"__device__ {qualifier} {CTYPE[self.out_dt]} {self.cname}({params})\n"
            f"{{\n{body}\n    return {out.expr};\n}}\n" + self._first_source(params)
        )

    def _first_source(self, params: str) -> str:
        """The first stage's C definition (cpu builds only), or "" when there is none."""
        if not self.first_stage:
            return ""
        em, out = self._first_traced
        out = em.coerce(out, self.out_dt)
        body = "\n".join(em.lines)
        return (f"#ifdef GTCPU_FIRST_STAGES\n"
                f"__device__ __forceinline__ {CTYPE[self.out_dt]} {self.first_cname}("
                f"{params}, bool& gt_bad)\n{{\n{body}\n    return {out.expr};\n}}\n"
                f"#endif\n")

    @property
    def first_cname(self) -> str:
        """The C name of the first stage: ``<cname>_first``."""
        return f"{self.cname}_first"

    @cached_property
    def first_stage(self) -> bool:
        """Whether this function has a first stage ``<cname>_first(args..., bool& gt_bad)``
        for cpu builds: its body with every ``rare`` (its own and its callees') replaced by
        the flag -- the value where no lane's flag is set, which is then the function's own
        value (the same operations on the same operands); a flagged lane's value is
        meaningless and the caller computes the function instead. Only hot single-result
        functions with a ``rare`` and no ``call_multi`` on the way have one: the stage is
        branch-free, so a loop over it vectorizes (``gtensor.ops.forms.Map``)."""
        if self.cold or isinstance(self.out_dt, tuple):
            return False
        em, _ = self._first_traced
        return not em.multi and (em.flagged or any(fn.first_stage for fn in em.called))

    def first_numpy(self, *arrays: Any) -> tuple[np.ndarray, np.ndarray]:
        """(value, bad) of the first stage on numpy arrays: the value the stage gives, and
        the lanes it leaves to the whole function (ValueError when there is no stage)."""
        if not self.first_stage:
            raise ValueError(f"{self.cname} has no first stage")
        m = _NumpyFirst()
        with np.errstate(all="ignore"):
            value = np.asarray(self.body(m, *arrays), dtype=NPTYPE[self.out_dt])
        return value, np.broadcast_to(m.bad, value.shape)

    @cached_property
    def _first_traced(self) -> tuple[CEmitter, Any]:
        em = CEmitter(first=True)
        return em, self.body(em, *[CVal(em, f"a{i}", dt) for i, dt in enumerate(self.in_dts)])

    def dependencies(self) -> list["ScalarFn"]:
        """Scalar functions this one calls (directly, ``rare``'s cold ones included), in a
        stable order."""
        em = self._traced
        return sorted(set(em.called) | set(em.rare_called), key=lambda f: f.cname)

    def tables(self) -> list["Table"]:
        """The constant tables this function reads directly."""
        return list(self._traced.tables)

    @cached_property
    def cost(self) -> int:
        """The operations one evaluation performs (its C statements, loops counted for every
        iteration, each call counted as its callee's cost, a ``rare`` cold call as one): the
        per-element work a cpu kernel weighs its thread split by."""
        em = self._traced
        return (len(em.lines) + em.loop_cost - len(em.called)
                + sum(fn.cost for fn in em.called))

    @cached_property
    def _traced(self) -> CEmitter:
        em = CEmitter()
        self.body(em, *[CVal(em, f"a{i}", dt) for i, dt in enumerate(self.in_dts)])
        return em


def scalar_fn(cname: str, in_dts: tuple[str, ...], out_dt: str,
              cold: bool = False) -> Callable[[Callable], ScalarFn]:
    """Decorator: declare ``def body(m, *args)`` as a scalar function named ``cname`` in C
    (``cold``: an out-of-line accurate path, called through ``rare``)."""

    def wrap(body: Callable) -> ScalarFn:
        return ScalarFn(cname, tuple(in_dts), out_dt, body, cold)

    return wrap


@dataclass(frozen=True, eq=False)
class Table:
    """A constant table of one dtype, read with ``m.table(tab, i)``: a numpy array, and a
    ``__device__ const`` array in C (exact literals) emitted once before its readers."""

    cname: str
    dt: str
    values: tuple

    @cached_property
    def array(self) -> np.ndarray:
        """The values as a numpy array of the table's dtype."""
        return np.array([NPTYPE[self.dt](v) for v in self.values], dtype=_NP[self.dt])

    def device_source(self) -> str:
        """The C definition."""
        if self.dt in (F64, F32):
            items = [float_literal(float(v), self.dt) for v in self.values]
        else:
            items = [f"{int(v)}LL" for v in self.values]
        rows = [", ".join(items[i:i + 4]) for i in range(0, len(items), 4)]
        body = ",\n    ".join(rows)
        return (f"__device__ const {CTYPE[self.dt]} {self.cname}[{len(items)}] = {{\n"
                f"    {body}\n}};\n")


# out-of-line accurate paths: never inlined into their (vectorized) callers
COLD_MACRO = """\
#ifndef GT_COLD
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GT_COLD __noinline__
#else
#define GT_COLD __attribute__((noinline, cold))
#endif
#endif
"""


def widened_f32(f64: ScalarFn) -> ScalarFn:
    """The float32 function ``gt_<name>_f32`` of the unary float64 function ``gt_<name>_f64``:
    the float64 function of the exactly widened argument, rounded once to float32."""
    cname = f64.cname.removesuffix("_f64") + "_f32"
    return ScalarFn(cname, (F32,), F32, lambda m, x: m.to_f32(m.call(f64, m.to_f64(x))))


def device_sources(fns: list[ScalarFn]) -> str:
    """``__device__`` definitions of ``fns`` and everything they call, callees first."""
    order: list[ScalarFn] = []
    seen: set[int] = set()

    def visit(fn: ScalarFn) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for dep in fn.dependencies():
            visit(dep)
        order.append(fn)

    for fn in fns:
        visit(fn)
    tables: list[Table] = []
    for fn in order:
        tables += [t for t in fn.tables() if t not in tables]
    head = [COLD_MACRO] if any(fn.cold for fn in order) else []
    head += [t.device_source() for t in tables]
    return "\n".join(head + [fn.device_source() for fn in order])
