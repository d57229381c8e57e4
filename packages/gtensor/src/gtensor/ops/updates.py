"""In-place optimizer updates: one kernel per parameter that reads g, p and the state and writes
the new state and the new parameter over the old, element by element.

Each element computes exactly what the out-of-place update ops compute (``gtensor.ops.optim``:
the same scalar functions, called in the same order on the same values) and only then stores::

    adam_update:  m_new = adam_m(m, g, p); v_new = adam_v(v, g, p)
                  p_new = adam_p(p, m_new, v_new)
    adamw_update: m_new, v_new as adam; p_new = p*D - (m_new*S) / (sqrt(v_new)/R + eps)
    sgd_update:   p_new = p - gk * L                    (gk = g, clipped, + L2)
    then          m[i] = m_new; v[i] = v_new; p[i] = p_new

so the bits are the out-of-place ops' bits, with 7 passes over parameter-sized memory for Adam
(read g, p, m, v; write m, v, p) instead of 18 (three outputs, then three copies).

These are not graph ops (no registry entry, no tape function): gopt calls them on parameter
and state buffers. A call checks everything first and returns the prepared update; calling
it then writes, and cannot fail (the ``step`` of gopt prepares every parameter's update before
running the first). On a kernel backend (sim, cpu, cuda, a Recorder) the update is one kernel
launch of kind ``update`` whose every non-const pointer is read and written; on numpy the new
values are computed out of place by the same scalar functions and then copied over.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..dtypes import FLOATS, FloatType
from ..kernels import Kernel, KernelSet, Kind, params
from ..messages import describe
from ..scalar.dsl import scalar_fn
from .forms import BLOCK, Access, Form, grid_for
from .optim import ADAM_M, ADAM_P, ADAM_V, SGD_P, _variant
from .registry import register_update

# AdamW's new parameter: (p, m, v, S, R, D, eps) -> p*D - (m*S) / (sqrt(v)/R + eps), in the
# order of the out-of-place chain (mul, mul, sqrt, div, adds, div, sub)
ADAMW_P = {ft: scalar_fn(ft.fn("adamw_p"), (ft.suffix,) * 7, ft.suffix)(
    lambda m, p, mo, v, s, r, d, eps: p * d - (mo * s) / (m.sqrt(v) / r + eps))
    for ft in FLOATS}

_GRID_LOOP = ("    const long long step = (long long)gridDim.x * blockDim.x;\n"
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
              "i += step) {\n")


@dataclass(frozen=True, eq=False)
class Update(Form):
    """One in-place update: its arrays (written ones, read ones, 0-d device scalars), its host
    scalars and, per dtype and clip/L2 variant, the scalar functions its element body calls.

    It is also its kernels' form (``Kernel.form``): ``index_maps`` and ``statement`` tell
    fusion what a recorded launch touches (every written buffer) and how to compute one of its
    iterations inside a generated kernel.
    """

    name: str
    writes: tuple[str, ...]  # read and written in place, element i by iteration i
    reads: tuple[str, ...]  # read at element i
    zero_d: tuple[str, ...]  # 0-d device scalars, read at 0
    scalars: tuple[str, ...]  # host scalars of the float type
    calls: Callable[[FloatType, bool, bool], tuple]  # the scalar functions of a variant
    # (function names, ctype, at) -> the element's statements (see _moments)
    body: Callable[[tuple[str, ...], str, Callable[[str], str]], str]
    reference: Callable[..., dict[str, np.ndarray]]  # (fns, arrays, scalars) -> new values
    in_place = True  # every written buffer is read first
    writes_many = True  # each written at element i

    def params(self, ctype: str) -> str:
        """The kernel's parameter list (C text)."""
        parts = [f"{ctype}* {a}" for a in self.writes]
        parts += [f"const {ctype}* {a}" for a in (*self.reads, *self.zero_d)]
        parts += ["long long n", *(f"{ctype} {s}" for s in self.scalars)]
        return ", ".join(parts)

    def _head(self, ctype: str) -> str:
        return "".join(f"    const {ctype} {a}0 = {a}[0];\n" for a in self.zero_d)

    def kernel(self, ft: FloatType, clip: bool, l2: bool, cpu: bool) -> Kernel:
        """The kernel of one variant (the CUDA dialect, or the cpu backend's loop)."""
        fns = self.calls(ft, clip, l2)
        zero_d = set(self.zero_d)

        def at(name: str) -> str:
            if name in zero_d:
                return f"{name}0"
            return name if name in self.scalars else f"{name}[i]"

        stmts = self.body(tuple(f.cname for f in fns), ft.ctype, at)
        if cpu:
            text = (f"{self._head(ft.ctype)}    gtcpu::parallel_for(n, 8, "
                    "[=](long long lo, long long hi) {\n"
                    f"        for (long long i = lo; i < hi; ++i) {{\n{stmts}        }}\n    }});")
        else:
            text = f"{self._head(ft.ctype)}{_GRID_LOOP}{stmts}    }}"
        return Kernel(ft.kernel(_variant(self.name, clip, l2)), params(self.params(ft.ctype)),
                      text, Kind.UPDATE, fns, self)

    # ---- the form's questions (``gtensor.ops.forms``), for fusion reading a recorded launch
    def index_maps(self, args: dict) -> Access:
        """Iteration i writes element i of every written array (``oo``: of each of them) and
        reads element i of each array input (written ones too); the 0-d inputs whole."""
        n = int(args["n"])
        return Access(n, np.arange(n), {a: np.arange(n) for a in (*self.writes, *self.reads)})

    def statement(self, calls: tuple[str, ...], arrays: dict[str, str], i: str,
                  scalars: dict[str, str], ctype: str, transposed: Collection[str] = ()
                  ) -> str:
        """One iteration in a generated kernel: the element body, in a block of its own."""
        zero_d = set(self.zero_d)

        def at(name: str) -> str:
            if name in zero_d:
                return f"{arrays[name]}[0]"
            return scalars[name] if name in self.scalars else f"{arrays[name]}[{i}]"

        return "{\n" + self.body(calls, ctype, at) + "}"

    def kernel_set(self, ft: FloatType, cpu: bool = False) -> KernelSet:
        """The four clip/L2 variants for ``ft`` (cpu kernels with ``cpu``), built once."""
        key = (ft, cpu)
        ks = _SETS.get((self.name, key))
        if ks is None:
            ks = _SETS[(self.name, key)] = KernelSet(self.name, ft, [
                self.kernel(ft, clip, l2, cpu) for clip in (False, True) for l2 in (False, True)])
        return ks

    def prepare(self, be: Any, arrays: dict[str, Any], scalars: dict[str, float], alpha: float,
                clip: bool) -> Callable[[], None]:
        """Check a call on backend ``be`` and return the update, ready to run (see module)."""
        where = self.name
        if not isinstance(clip, (bool, np.bool_)):
            raise TypeError(f"{where}: clip is {describe(clip)}; expected a bool")
        host = {**scalars, "alpha": alpha}
        for k, x in host.items():
            if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
                raise TypeError(f"{where}: {k} is {describe(x)}; expected a real number")
        names = (*self.writes, *self.reads, *self.zero_d)
        missing = [n for n in names if n not in arrays]
        if missing:
            raise TypeError(f"{where}: missing array(s) {missing}; expected {list(names)}")
        dtype = shape = None
        for n in names:
            x = arrays[n]
            if not be.is_array(x):
                raise TypeError(f"{where}: {n} is {describe(x)}; expected an array of the "
                                f"{be.name} backend")
            if x.dtype not in dtypes.SUPPORTED_DTYPES or (dtype is not None and x.dtype != dtype):
                raise TypeError(f"{where}: {n} has dtype {x.dtype}; expected "
                                f"{dtype or 'float32 or float64'} for every array")
            dtype = x.dtype
            if n in self.zero_d:
                if tuple(x.shape) != ():
                    raise ValueError(f"{where}: {n} has shape {tuple(x.shape)}; expected a 0-d "
                                     "array")
                continue
            if shape is None:
                shape = tuple(x.shape)
            elif tuple(x.shape) != shape:
                raise ValueError(f"{where}: {n} has shape {tuple(x.shape)}, {names[0]} has "
                                 f"{shape}; expected equal shapes")
            if not x.flags.c_contiguous:
                raise ValueError(f"{where}: {n} must be C-contiguous")
        for k, n in enumerate(self.writes):
            if not getattr(arrays[n].flags, "writeable", True):
                raise ValueError(f"{where}: {n} is read-only; it is updated in place")
            for other in names[k + 1:]:
                if be.overlaps(arrays[n], arrays[other]):
                    raise ValueError(f"{where}: {n} shares memory with {other}; expected "
                                     "separate buffers")
        ft = dtypes.BY_DTYPE[np.dtype(dtype)]
        l2 = alpha != 0.0
        with np.errstate(over="ignore"):  # a scalar rounding to +-inf in float32: defined
            values = [ft.scalar(host[s]) for s in self.scalars]
        if not be.runs_kernels:  # numpy: the scalar functions out of place, then copies
            return _reference_run(self, ft, clip, l2, arrays, dict(zip(self.scalars, values)))
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0:
            return _nothing
        kernel = self.kernel_set(ft, be.uses_cpu_kernels)[_variant(self.name, clip, l2)]
        args = (*(arrays[a] for a in names), n, *values)
        grid = grid_for(n)
        be.module.checked(kernel, grid, BLOCK, args)  # every argument checked now

        def run() -> None:
            be.launch(kernel, grid, BLOCK, args)

        return run


_SETS: dict[tuple, KernelSet] = {}


def _nothing() -> None:
    """An update of empty arrays."""


def _reference_run(upd: Update, ft: FloatType, clip: bool, l2: bool, arrays: dict[str, Any],
                   scalars: dict[str, Any]) -> Callable[[], None]:
    """The numpy path: new values computed now, out of place; the returned call copies them."""
    dtypes.check_no_ftz(upd.name)
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the definition
        new = upd.reference(upd.calls(ft, clip, l2), arrays, scalars)
    dsts = [(arrays[k], np.asarray(new[k], dtype=ft.np)) for k in upd.writes]

    def run() -> None:
        for dst, src in dsts:
            np.copyto(dst, src)

    return run


# --------------------------------------------------------------------------- the updates
def _adam_calls(ft: FloatType, clip: bool, l2: bool) -> tuple:
    return ADAM_M[(ft, clip, l2)], ADAM_V[(ft, clip, l2)], ADAM_P[ft]


def _adamw_calls(ft: FloatType, clip: bool, l2: bool) -> tuple:
    return ADAM_M[(ft, clip, l2)], ADAM_V[(ft, clip, l2)], ADAMW_P[ft]


# element bodies: ``at(name)`` is the C expression of an array's element i, a 0-d array's
# value or a host scalar's value (the kernels' locals, or a fused kernel's arrays and literals)
def _moments(f: Sequence[str], t: str, at: Callable[[str], str]) -> str:
    g, p, sc, al = (at(x) for x in ("g", "p", "scale", "alpha"))
    return "".join(
        f"        const {t} {x}_new = {fn}({at(x)}, {g}, {p}, {sc}, {at(k)}, {at(c)}, {al});\n"
        for x, fn, k, c in (("m", f[0], "b1", "c1"), ("v", f[1], "b2", "c2")))


def _store(at: Callable[[str], str]) -> str:
    return f"        {at('m')} = m_new;\n        {at('v')} = v_new;\n        {at('p')} = p_new;\n"


def _adam_body(f: Sequence[str], t: str, at: Callable[[str], str]) -> str:
    return (_moments(f, t, at)
            + f"        const {t} p_new = {f[2]}({at('p')}, m_new, v_new, {at('lr_t')}, "
            f"{at('eps')});\n"
            + _store(at))


def _adamw_body(f: Sequence[str], t: str, at: Callable[[str], str]) -> str:
    s, r, d = (at(x) for x in ("step_size", "bc2", "decay"))
    return (_moments(f, t, at)
            + f"        const {t} p_new = {f[2]}({at('p')}, m_new, v_new, {s}, {r}, {d}, "
            f"{at('eps')});\n"
            + _store(at))


def _adam_reference(fns: tuple, a: dict, s: dict) -> dict:
    mo = fns[0].eval(a["m"], a["g"], a["p"], a["scale"], s["b1"], s["c1"], s["alpha"])
    vo = fns[1].eval(a["v"], a["g"], a["p"], a["scale"], s["b2"], s["c2"], s["alpha"])
    return {"m": mo, "v": vo, "p": fns[2].eval(a["p"], mo, vo, a["lr_t"], s["eps"])}


def _adamw_reference(fns: tuple, a: dict, s: dict) -> dict:
    mo = fns[0].eval(a["m"], a["g"], a["p"], a["scale"], s["b1"], s["c1"], s["alpha"])
    vo = fns[1].eval(a["v"], a["g"], a["p"], a["scale"], s["b2"], s["c2"], s["alpha"])
    po = fns[2].eval(a["p"], mo, vo, a["step_size"], a["bc2"], a["decay"], s["eps"])
    return {"m": mo, "v": vo, "p": po}


def _sgd_body(f: Sequence[str], t: str, at: Callable[[str], str]) -> str:
    # sgd_p's (x, g, p, scale, lr, unused, alpha): p - gk * L, L read from the 0-d buffer
    p, lr = at("p"), at("lr")
    return (f"        {p} = {f[0]}({p}, {at('g')}, {p}, {at('scale')}, {lr}, {lr}, "
            f"{at('alpha')});\n")


def _sgd_reference(fns: tuple, a: dict, s: dict) -> dict:
    return {"p": fns[0].eval(a["p"], a["g"], a["p"], a["scale"], a["lr"], a["lr"], s["alpha"])}


ADAM_UPDATE = Update("adam_update", ("m", "v", "p"), ("g",), ("scale", "lr_t"),
                     ("b1", "c1", "b2", "c2", "alpha", "eps"), _adam_calls, _adam_body,
                     _adam_reference)
ADAMW_UPDATE = Update("adamw_update", ("m", "v", "p"), ("g",),
                      ("scale", "step_size", "bc2", "decay"),
                      ("b1", "c1", "b2", "c2", "alpha", "eps"), _adamw_calls, _adamw_body,
                      _adamw_reference)
SGD_UPDATE = Update("sgd_update", ("p",), ("g",), ("scale", "lr"), ("alpha",),
                    lambda ft, clip, l2: (SGD_P[(ft, clip, l2)],), _sgd_body, _sgd_reference)
for _u in (ADAM_UPDATE, ADAMW_UPDATE, SGD_UPDATE):
    register_update(_u)


def _betas(b1: float, b2: float, eps: float) -> dict[str, float]:
    return {"b1": b1, "c1": 1.0 - b1, "b2": b2, "c2": 1.0 - b2, "eps": eps}


def adam_update(be: Any, m: Any, v: Any, p: Any, g: Any, scale: Any, lr_t: Any, *,
                beta1: float, beta2: float, eps: float, alpha: float = 0.0,
                clip: bool = False) -> Callable[[], None]:
    """Adam's step of one parameter in place (m, v, p), checked now, written when called.

    ``scale`` is the 0-d clip scale (read only with ``clip``), ``lr_t`` the 0-d step size;
    the bits are those of ``adam_m``, ``adam_v`` then ``adam_p`` with the same arguments.
    """
    return ADAM_UPDATE.prepare(be, {"m": m, "v": v, "p": p, "g": g, "scale": scale,
                                    "lr_t": lr_t}, _betas(beta1, beta2, eps), alpha, clip)


def adamw_update(be: Any, m: Any, v: Any, p: Any, g: Any, scale: Any, step: Any, bc2: Any,
                 decay: Any, *, beta1: float, beta2: float, eps: float, alpha: float = 0.0,
                 clip: bool = False) -> Callable[[], None]:
    """AdamW's step of one parameter in place (m, v, p), checked now, written when called.

    ``step``, ``bc2``, ``decay``: the 0-d buffers S, R, D of ``gopt.adamw``; the new parameter
    is ``p*D - (m_new*S) / (sqrt(v_new)/R + eps)``, in that order.
    """
    return ADAMW_UPDATE.prepare(be, {"m": m, "v": v, "p": p, "g": g, "scale": scale,
                                     "step_size": step, "bc2": bc2, "decay": decay},
                                _betas(beta1, beta2, eps), alpha, clip)


def sgd_update(be: Any, p: Any, g: Any, scale: Any, lr: Any, *, alpha: float = 0.0,
               clip: bool = False) -> Callable[[], None]:
    """SGD's step of one parameter in place: ``p - gk * L`` (``lr`` the 0-d buffer L), checked
    now, written when called."""
    return SGD_UPDATE.prepare(be, {"p": p, "g": g, "scale": scale, "lr": lr}, {}, alpha, clip)
