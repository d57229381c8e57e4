"""The tape's leaves: parameters and constants, and the parameter-store protocol's writes
(``set_value``, ``param_buffer``, ``note_updated``, ``check_param``: ``gtape.ParamStore``).
A mixin of ``Tape``: it reads and appends the node table's lists directly."""

from __future__ import annotations

from typing import Any

import gtensor
from gtensor import describe
from gtensor.dtypes import BOOL, INT

from .convert import into_backend, to_backend, typed_dtype
from .leaves import CONST, PARAM
from .var import StaleVarError, Var


class TapeLeaves:
    """Leaves of a Tape and the writes an optimizer makes to its parameters."""
    def param(self, x: Any) -> Var:
        """Register a parameter: ``x`` is copied in (tape dtype); the tape owns the live copy."""
        self._check_open("param")
        value = to_backend(self._be, x, self._dtype, "param")
        i = len(self)
        buf = self._gcache.get(i)
        if buf is None or tuple(buf.shape) != tuple(value.shape):
            buf = self._be.zeros(value.shape, self._dtype)
            self._gcache[i] = buf
        else:
            self._zero(buf)
        return self._append(PARAM, (), {}, value, True, grad=buf)

    def const(self, x: Any, name: str | None = None, dtype: Any = None) -> Var:
        """Register a constant (no gradient flows into it); ``x`` is copied in (tape dtype).

        In a mark/reset loop the copy goes into the buffer the node at this index had in the
        previous episode (same shape), so a minibatch input has one stable home. ``name``
        (optional) names the input, e.g. in a captured program's ``inputs`` (``name_of``).
        ``dtype="int64"`` / ``"bool"`` keeps index / mask data as such (integers, bools only:
        never rounded); the default is the tape's float dtype.
        """
        self._check_open("const")
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"const: name is {describe(name)}; expected a non-empty str or None")
        dt = self._dtype
        if dtype is not None:
            want = gtensor.dtypes.normalize(dtype, "const", typed=True)
            if want in gtensor.dtypes.TYPED_DTYPES:
                kind = INT if want == gtensor.dtypes.INDEX else BOOL
                dt = typed_dtype(x, kind, "const")
            elif want != self._dtype:
                raise TypeError(f"const: dtype {want.name} differs from the tape's "
                                f"{self._dtype.name}; float data takes the tape's dtype")
        i = len(self)
        buf = self._vcache[i] if i < len(self._vcache) else None
        value = into_backend(self._be, x, dt, "const", buf)
        v = self._append(CONST, (), {}, value, False)
        if name is not None:
            self._names[i] = (v.serial, name)
        return v

    def name_of(self, v: Var) -> str | None:
        """The name given to const ``v`` by ``const(x, name=...)``, or None."""
        self._check_var(v, "name_of")
        got = self._names.get(v.index)
        return got[1] if got is not None and got[0] == v.serial else None

    def params(self) -> list[Var]:
        """The parameter Vars, in registration order."""
        self._check_open("params")
        return [self._var(i) for i, op in enumerate(self._op) if op is PARAM]

    def set_value(self, p: Var, x: Any) -> None:
        """Overwrite a parameter's live value in place (views of it stay valid)."""
        self._check_var(p, "set_value")
        if self._op[p.index] is not PARAM:
            raise ValueError(f"set_value: {p!r} is not a param; only parameters can be updated")
        buf, shape = self._values[p.index], self._shape[p.index]
        direct = self._be.is_array(x) and x.dtype == self._dtype and not self._be.overlaps(x, buf)
        src = x if direct else to_backend(self._be, x, self._dtype, "set_value")
        if tuple(src.shape) != shape:
            raise ValueError(f"set_value: param node {p.index} has shape {shape}; got "
                             f"{describe(x)}; expected the same shape")
        self._be.copy(src, out=buf)
        self._note_write(p.index)

    def param_buffer(self, p: Var) -> Any:
        """Parameter ``p``'s live value buffer, writable: for a backend op that updates it in
        place (gopt's fused update kernels), which must then call ``note_updated(p)``.

        Anything else writes a parameter with ``set_value``: a write into this buffer that is
        not noted would let a forward recorded before it pass as fresh.
        """
        self._check_param(p, "param_buffer")
        return self._values[p.index]

    def note_updated(self, p: Var) -> None:
        """Record that a backend op overwrote parameter ``p``'s buffer (``param_buffer``) in
        place: the write clock ticks exactly as ``set_value``'s copy makes it tick, so a
        backward of a forward recorded before the update is refused as stale."""
        self._check_param(p, "note_updated")
        self._note_write(p.index)

    def check_param(self, where: str, p: Any) -> Var:
        """``p`` checked to be a live parameter Var of this tape (an optimizer's check: the
        ``ParamStore`` protocol); errors name ``where``."""
        if not isinstance(p, Var):
            raise TypeError(f"{where}: param is {describe(p)}; expected a parameter Var made by "
                            "tp.param(...)")
        if p.tape is not self:
            raise ValueError(f"{where}: param {p!r} belongs to another tape; expected a "
                             "parameter of the tape this optimizer was made for")
        if self.closed:
            raise RuntimeError(f"{where}: the tape is closed; its parameters were released")
        if not p.alive:
            raise StaleVarError(f"{where}: param of node {p.index} was dropped by reset_to; "
                                "expected a live parameter (take marks after registering params)")
        if p.op != "param":
            raise ValueError(f"{where}: {p!r} is a {p.op!r} node; expected a parameter made by "
                             "tp.param(...) (only parameters are updated)")
        return p

    def _check_param(self, p: Var, where: str) -> None:
        """``p`` checked to be a live parameter Var of this tape."""
        self._check_var(p, where)
        if self._op[p.index] is not PARAM:
            raise ValueError(f"{where}: {p!r} is not a param; only parameters can be updated")
