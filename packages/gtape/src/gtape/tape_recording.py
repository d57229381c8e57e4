"""The tape's recording of one op call: operands checked and converted, the op run eagerly on
the backend (into the buffer this position had last episode), one node appended. A mixin of
``Tape``: the hot path reads the node table's lists directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gtensor
import numpy as np
from gtensor import Op
from gtensor.dtypes import ANY, BOOL, FLOAT, INT, NUMBER, TYPE_DTYPES
from gtensor.ops.registry import REGISTRY as _OPS
from gtensor.ops.registry import attr_key

from . import const_roles
from .convert import into_backend, typed_dtype
from .leaves import CONST
from .var import Var

CALL_CACHE = 4096  # (op, attrs, input shapes) -> out shape, attrs, dtype kept per tape


class TapeRecording:
    """How a Tape records an op call (``gtape.ops.apply`` calls ``_record``)."""
    def _record(self, name: Op | str, operands: Sequence[Any], attrs: dict) -> Var:
        """Run op ``name`` on ``operands`` (Vars of this tape or data) and append its node.

        Everything is checked and computed before anything is appended, so a failing call
        leaves the tape exactly as it was.
        """
        op = _OPS.get(name) if type(name) is str else None  # an op name: the common case
        if op is None:
            op = name if isinstance(name, Op) else gtensor.ops.get(name)  # raises if unknown
        if self._closed:
            self._check_open(op.name)
        values, serial = self._values, self._serial
        n = len(values)
        arrays, idx, consts = [], [], []
        for x in operands:
            if type(x) is Var and x._tape is self and x._index < n and (
                    serial[x._index] == x._serial):  # a live Var of this tape: the common case
                arrays.append(values[x._index])
                idx.append(x._index)
                continue
            k = len(arrays)  # x's position: each operand before it added one array
            arg = f"xs[{k}]" if op.variadic else op.inputs[k]
            if isinstance(x, Var):
                if x.tape is not self:
                    raise ValueError(f"{op.name}: {arg} {x!r} belongs to another tape")
                self._check_var(x, f"{op.name}: {arg}")  # raises if the Var is stale
                arrays.append(values[x.index])
                idx.append(x.index)
                continue
            j = n + len(consts)
            home = self._vcache[j] if j < len(self._vcache) else None
            kind = op.input_type(k) if op.typed or op.out_type == ANY else FLOAT
            if kind in (ANY, NUMBER):  # a movement op's or a comparison's data: held as its
                # Var operands' dtype
                kind = self._var_kind(operands)
            dt = self._dtype if kind == FLOAT else typed_dtype(x, kind, f"{op.name}: {arg}")
            arr = into_backend(self._be, x, dt, f"{op.name}: {arg}", home)
            arrays.append(arr)
            idx.append(j)
            consts.append((arr, np.isscalar(x)))
        shapes = (arrays[0].shape, arrays[1].shape) if len(arrays) == 2 else tuple(
            [a.shape for a in arrays])
        # a call seen before on this tape (same op, attrs as given, input shapes): its out
        # shape, normalized attrs (one dict its nodes share; nothing changes it) and dtype
        try:
            key = (op, shapes, *[(k, attr_key(v)) for k, v in attrs.items()]) if attrs else (
                op, shapes)
            if op.out_type == ANY:  # the result's dtype is the inputs'
                key += (arrays[0].dtype,)
            hit = self._calls.get(key)
        except TypeError:  # an unhashable attr: never kept
            key = hit = None
        if hit is None:
            out_shape, norm, out_dt = self._infer(op, shapes, attrs, arrays)
            if key is not None:
                if len(self._calls) >= CALL_CACHE:
                    self._calls.clear()
                self._calls[key] = (out_shape, norm, out_dt)
        else:
            out_shape, norm, out_dt = hit
        i = n + len(consts)
        buf = self._vcache[i] if i < len(self._vcache) else None
        if buf is not None and (buf.shape != out_shape or buf.dtype != out_dt):
            buf = None
        value = self._be.apply(op, arrays, out=buf, **norm)
        for arr, number in consts:
            v = self._append(CONST, (), {}, arr, False)
            if number:  # a number written in code (x / 2.0, where(m, 0.0, x)): a constant
                const_roles.mark(v, const_roles.CONSTANT)
        # an int64 / bool result (a mask, an argmax) carries no gradient; nor does no_grad's
        grad_path = False
        if (op.out_type == FLOAT or out_dt == self._dtype) and not self._no_grad:
            req = self._req
            for j in idx:
                if req[j]:
                    grad_path = True
                    break
        return self._append(op, tuple(idx), norm, value, grad_path)

    def _var_kind(self, operands: Sequence[Any]) -> str:
        """FLOAT, INT or BOOL: what the first Var among ``operands`` holds (data operands of a
        movement op are converted to it)."""
        for x in operands:
            if isinstance(x, Var) and x.tape is self and self._alive(x):
                dt = self._values[x.index].dtype
                return BOOL if dt == TYPE_DTYPES[BOOL] else INT if dt == TYPE_DTYPES[INT] else FLOAT
        return FLOAT

    def _infer(self, op: Op, shapes: tuple, attrs: dict,
               arrays: Sequence[Any] = ()) -> tuple[tuple, dict, np.dtype]:
        """(out shape, normalized attrs, out dtype) of ``op`` on ``shapes`` with ``attrs`` as
        given: the defaults filled in, the tape's contract for an inner product (raises for
        another, or for what the op's shape rule refuses)."""
        if op.defaults:
            full = dict(op.defaults)
            full.update(attrs)
            if "inner" in op.defaults:  # an inner product: the tape's contract
                if attrs.get("inner", self._inner) != self._inner:
                    raise ValueError(f"{op.name}: inner is {attrs['inner']!r} but the tape's "
                                     f"contract is {self._inner!r} (Tape(..., inner=...) "
                                     "chooses it for every inner product of the tape)")
                full["inner"] = self._inner
        else:
            full = attrs
        out_shape, norm = op.infer(shapes, full)
        if op.out_type == ANY:  # a movement op: the dtype of its inputs
            out_dt = np.dtype(arrays[0].dtype)
        else:
            out_dt = self._dtype if op.out_type == FLOAT else TYPE_DTYPES[op.out_type]
        return tuple(out_shape), norm, out_dt
