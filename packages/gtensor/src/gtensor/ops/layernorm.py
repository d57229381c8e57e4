"""ln_normalize: layer normalisation's rows over the last axis as one op, and its backward.

The whole op in one file: the numpy references (written with the other ops' references), the
CUDA and cpu kernels, the launch and the backward rule. It is gtape's ``layer_norm`` composite
(``gtape.norms.layer_norm_with``) after the mean, bit for bit: for a row x (the last axis,
C elements) and its mean mu (the ``mean`` op's, kept as a size-1 axis)::

    d_j = x_j - mu
    var = (d_0 * d_0 + d_1 * d_1 + ... + d_{C-1} * d_{C-1}) / C    (mean: a serial sum, first
                                                                     element first, / C once)
    sd  = sqrt(var + eps)          (eps rounded once to the dtype; sqrt correctly rounded)
    r   = 1 / sd
    y_j = d_j * r

every operation one IEEE operation in the dtype. ``ln_normalize_grad(g, x, mu)`` is the
composite's gradient of d for an upstream g of y, in the order the tape's backward computes it
(recomputing d, var, sd and r from x and mu)::

    gr  = g_0 * d_0 + g_1 * d_1 + ...          (mul's rule for r, then sum_to: a serial sum)
    ga  = gr / sd;  gsd = -(ga * r)            (div's rule for 1 / sd)
    gve = gsd / (sd + sd)                      (sqrt's rule; adds passes it to var)
    gsq = gve * (1 / C)                        (mean's rule: 1 / C rounded once to the dtype)
    gd_j = ((g_j * r) + (gsq * d_j)) + (gsq * d_j)
                                               (d's contributions in the tape's arrival order:
                                                y's product, then d * d's two inputs)

The backward rule of ``ln_normalize`` returns gd for x and -gd for mu (``sub``'s rule; the tape
reduces it to mu's shape with ``sum_to``), so x's contributions arrive as the composite's do:
this op's, then the mean's. Under a differentiating backend (``create_graph``) the rule records
the same computation op by op instead (``composite_grad``: the same bits, differentiable
again); ``ln_normalize_grad`` itself has no rule.
"""

from __future__ import annotations

from string import Template

import numpy as np

from .. import dtypes
from ..dtypes import FloatType, round_scalar
from ..kernels import Kernel, Kind, params
from .checks import ANY, Checks
from .elementwise import ADD, DIV, MUL, NEG, SQRT, SUB, of
from .forms import ROW_ELEMENT_COST, Rows, split_cost
from .reduce import serial_sum
from .registry import Op, register

_FORM = Rows(("x", "mu"), ("y",))
_GRAD_FORM = Rows(("g", "x", "mu"), ("out",))

# the row's statistics (thread 0 on a device; the row's thread on the cpu): d's serial sum of
# squares, var, sd, r -- the forward's and the backward's alike
_STATS = """\
$I$T m = mu[row];
$I$T d0 = $SUB(xr[0], m);
$I$T s = $MUL(d0, d0);
$Ifor (long long j = 1; j < R; ++j) {
$I    const $T d = $SUB(xr[j * B], m);
$I    s = $ADD(s, $MUL(d, d));
$I}
$Iconst $T sd = $SQRT($ADD($DIV(s, n), eps));
$Iconst $T rr = $DIV(($T)1, sd);
"""
# the backward's scalars after the statistics: gr's serial sum, then the chain to gsq
_GRAD_STATS = """\
$I$T gr = $MUL(gr_[0], d0);
$Ifor (long long j = 1; j < R; ++j) gr = $ADD(gr, $MUL(gr_[j * B], $SUB(xr[j * B], m)));
$Iconst $T gsd = $NEG($MUL($DIV(gr, sd), rr));
$Iconst $T gsq = $MUL($DIV(gsd, $ADD(sd, sd)), inv_n);
"""
_GRAD_ROW = ("$OUT = $ADD($ADD($MUL($G, rr), $MUL(gsq, $D)), $MUL(gsq, $D));")

_CUDA_FORWARD = Template("""\
        const $T* xr = x + base;
        $T* yr = y + base;
        if (t == 0) {
""" + _STATS.replace("$I", " " * 12) + """\
            total = rr;
        }
        __syncthreads();
        const $T rr = total, m = mu[row];
        for (long long j = t; j < R; j += nt) yr[j * B] = $MUL($SUB(xr[j * B], m), rr);""")

_CUDA_GRAD = Template("""\
        const $T* gr_ = g + base;
        const $T* xr = x + base;
        $T* outr = out + base;
        if (t == 0) {
""" + _STATS.replace("$I", " " * 12) + _GRAD_STATS.replace("$I", " " * 12) + """\
            total = rr;
            second = gsq;
        }
        __syncthreads();
        const $T rr = total, gsq = second, m = mu[row];
        for (long long j = t; j < R; j += nt) {
            const $T d = $SUB(xr[j * B], m);
            """ + _GRAD_ROW.replace("$OUT", "outr[j * B]").replace("$G", "gr_[j * B]")
    .replace("$D", "d") + """
        }""")

_CPU_FORWARD = Template("""\
            const $T* xr = x + base;
            $T* yr = y + base;
""" + _STATS.replace("$I", " " * 12) + """\
            for (long long j = 0; j < R; ++j) yr[j * B] = $MUL($SUB(xr[j * B], m), rr);""")

_CPU_GRAD = Template("""\
            const $T* gr_ = g + base;
            const $T* xr = x + base;
            $T* outr = out + base;
""" + _STATS.replace("$I", " " * 12) + _GRAD_STATS.replace("$I", " " * 12) + """\
            for (long long j = 0; j < R; ++j) {
                const $T d = $SUB(xr[j * B], m);
                """ + _GRAD_ROW.replace("$OUT", "outr[j * B]").replace("$G", "gr_[j * B]")
    .replace("$D", "d") + """
            }""")

# The same G rows at a time (contiguous rows, Rows.cpu_interleaved_body: row k of the G at
# xr + k * R, its mean mu[row + k]): the serial chains (the sum of squares; the backward's gr)
# of the G rows run side by side, one accumulator per row, each over its own row in the
# defined order (a row alone waits on every add of its chain); each row's scalars and its
# outputs then as in _STATS, _GRAD_STATS and the row body.
_LANES_STATS = """\
                $T m[G], s[G];
                for (int k = 0; k < G; ++k) {
                    m[k] = mu[row + k];
                    const $T d0 = $SUB(xr[k * R], m[k]);
                    s[k] = $MUL(d0, d0);
                }
                for (long long j = 1; j < R; ++j)
                    for (int k = 0; k < G; ++k) {
                        const $T d = $SUB(xr[k * R + j], m[k]);
                        s[k] = $ADD(s[k], $MUL(d, d));
                    }
"""
_CPU_FORWARD_LANES = Template("""\
                const $T* xr = x + base;
                $T* yr = y + base;
""" + _LANES_STATS + """\
                for (int k = 0; k < G; ++k) {
                    const $T rr = $DIV(($T)1, $SQRT($ADD($DIV(s[k], n), eps))), mk = m[k];
                    for (long long j = 0; j < R; ++j)
                        yr[k * R + j] = $MUL($SUB(xr[k * R + j], mk), rr);
                }""")
_CPU_GRAD_LANES = Template("""\
                const $T* gr_ = g + base;
                const $T* xr = x + base;
                $T* outr = out + base;
""" + _LANES_STATS + """\
                $T gr[G];
                for (int k = 0; k < G; ++k) gr[k] = $MUL(gr_[k * R], $SUB(xr[k * R], m[k]));
                for (long long j = 1; j < R; ++j)
                    for (int k = 0; k < G; ++k)
                        gr[k] = $ADD(gr[k], $MUL(gr_[k * R + j], $SUB(xr[k * R + j], m[k])));
                for (int k = 0; k < G; ++k) {
                    const $T sd = $SQRT($ADD($DIV(s[k], n), eps));
                    const $T rr = $DIV(($T)1, sd), mk = m[k];
                    const $T gsd = $NEG($MUL($DIV(gr[k], sd), rr));
                    const $T gsq = $MUL($DIV(gsd, $ADD(sd, sd)), inv_n);
                    for (long long j = 0; j < R; ++j) {
                        const $T d = $SUB(xr[k * R + j], mk);
                        """ + _GRAD_ROW.replace("$OUT", "outr[k * R + j]")
    .replace("$G", "gr_[k * R + j]").replace("$D", "d") + """
                    }
                }""")

_SIGS = {"ln_normalize": "const $T* x, const $T* mu, $T* y, long long A, long long R, "
                         "long long B, $T eps, $T n, $T inv_n",
         "ln_normalize_grad": "const $T* g, const $T* x, const $T* mu, $T* out, long long A, "
                              "long long R, long long B, $T eps, $T n, $T inv_n"}
_CALLS = {"ln_normalize": (SUB, MUL, ADD, DIV, SQRT),
          "ln_normalize_grad": (SUB, MUL, ADD, DIV, SQRT, NEG)}


def _fns(ft: FloatType) -> dict[str, str]:
    return {"T": ft.ctype, "SUB": SUB[ft].cname, "MUL": MUL[ft].cname, "ADD": ADD[ft].cname,
            "DIV": DIV[ft].cname, "SQRT": SQRT[ft].cname, "NEG": NEG[ft].cname}


def _kernels(name: str, cpu: bool):
    form = _FORM if name == "ln_normalize" else _GRAD_FORM

    def kernels(ft: FloatType) -> list[Kernel]:
        f = _fns(ft)
        sig = params(Template(_SIGS[name]).substitute(T=ft.ctype))
        calls = tuple(c[ft] for c in _CALLS[name])
        if cpu:
            fwd = name == "ln_normalize"
            text = (_CPU_FORWARD if fwd else _CPU_GRAD).substitute(f)
            lanes = (_CPU_FORWARD_LANES if fwd else _CPU_GRAD_LANES).substitute(f)
            body = form.cpu_interleaved_body(text, lanes,
                                             cost=split_cost(calls, ROW_ELEMENT_COST))
            return [Kernel(ft.kernel(name), sig, body, form=form)]
        text = (_CUDA_FORWARD if name == "ln_normalize" else _CUDA_GRAD).substitute(f)
        shared = "" if name == "ln_normalize" else f"    __shared__ {ft.ctype} second;\n"
        return [Kernel(ft.kernel(name), sig, form.cuda_body(text, ft.ctype, shared), Kind.ROWS,
                       calls, form)]

    return kernels


# --------------------------------------------------------------------------- shapes
def check_eps(op: str, eps) -> float:
    """eps as a float, or ValueError naming the op: a finite real number >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or \
            not np.isfinite(eps) or eps < 0:
        raise ValueError(f"{op}: eps is {eps!r}; expected a finite real number >= 0")
    return float(eps)


def _infer(op: str, nin: int):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        x, mu = shapes_[nin - 2], shapes_[nin - 1]
        if len(x) < 1:
            raise ValueError(f"{op}: x has shape {x}; expected at least one axis (rows along "
                             "the last)")
        if tuple(mu) != (*x[:-1], 1):
            raise ValueError(f"{op}: mu has shape {mu}; expected {(*x[:-1], 1)} (x {x}'s row "
                             "means, the last axis kept as 1)")
        if nin == 3 and tuple(shapes_[0]) != tuple(x):
            raise ValueError(f"{op}: g has shape {shapes_[0]}; expected x's shape {x}")
        return tuple(x), {"eps": check_eps(op, attrs.get("eps", 1e-5))}

    return infer


# --------------------------------------------------------------------------- references
def _stats(x: np.ndarray, mu: np.ndarray, eps: float) -> tuple:
    """(d, sd, r) of every row, by the other ops' references in the module doc's order."""
    ft, dt = of(x), x.dtype
    d = SUB[ft].numpy(x, mu)
    c = x.shape[-1]
    s = np.expand_dims(serial_sum(MUL[ft].numpy(d, d), (x.ndim - 1,)), -1)
    var = DIV[ft].numpy(s, ft.scalar(c))
    sd = SQRT[ft].numpy(ADD[ft].numpy(var, round_scalar(eps, dt)))
    return d, sd, DIV[ft].numpy(dt.type(1.0), sd)


def _reference(x: np.ndarray, mu: np.ndarray, *, eps: float) -> np.ndarray:
    if not x.size:
        return x.copy()
    d, _, r = _stats(x, mu, eps)
    return MUL[of(x)].numpy(d, r)


def _grad_reference(g: np.ndarray, x: np.ndarray, mu: np.ndarray, *, eps: float) -> np.ndarray:
    if not x.size:
        return x.copy()
    ft, dt = of(x), x.dtype
    d, sd, r = _stats(x, mu, eps)
    gr = np.expand_dims(serial_sum(MUL[ft].numpy(g, d), (x.ndim - 1,)), -1)
    gsd = NEG[ft].numpy(MUL[ft].numpy(DIV[ft].numpy(gr, sd), r))
    gsq = MUL[ft].numpy(DIV[ft].numpy(gsd, ADD[ft].numpy(sd, sd)),
                        round_scalar(1.0 / x.shape[-1], dt))
    q = MUL[ft].numpy(gsq, d)
    return ADD[ft].numpy(ADD[ft].numpy(MUL[ft].numpy(g, r), q), q)


# --------------------------------------------------------------------------- launches, rules
def _scalars(dt: np.dtype, c: int, eps: float) -> tuple:
    """eps, C and 1 / C as the kernels take them (each rounded once to the dtype)."""
    ft = dtypes.float_type(dt)
    return (round_scalar(eps, dt), ft.scalar(c), round_scalar(1.0 / c, dt) if c else dt.type(0))


def _launch_rows(rt, kernel: Kernel, arrays: tuple, x, eps: float) -> None:
    """A block per row of ``x`` (its last axis), the scalars after the row geometry."""
    launch = kernel.form.launch(tuple(x.shape), x.ndim - 1)
    if launch is not None:
        grid, block, geom = launch
        rt.launch(kernel, grid, block, (*arrays, *geom,
                                        *_scalars(np.dtype(x.dtype), x.shape[-1], eps)))


def _launch(rt, ks, ins, out, *, eps):
    x, mu = ins
    _launch_rows(rt, ks.only, (x, mu, out), x, eps)


def _grad_launch(rt, ks, ins, out, *, eps):
    g, x, mu = ins
    _launch_rows(rt, ks.only, (g, x, mu, out), x, eps)


def composite_grad(be, g, x, mu, eps: float):
    """The module doc's backward as recorded ops (differentiable again), the same bits as
    ``ln_normalize_grad``."""
    c = x.shape[-1]
    d = be.sub(x, mu)
    var = be.mean(be.mul(d, d), -1, True)
    sd = be.sqrt(be.adds(var, eps))
    r = be.div(be.constant(np.asarray(1.0, x.dtype)), sd)
    gr = be.sum_to(be.mul(g, d), tuple(r.shape))
    gsd = be.neg(be.mul(be.div(gr, sd), r))
    gsq = be.broadcast_to(be.muls(be.div(gsd, be.add(sd, sd)), 1.0 / c), tuple(x.shape))
    return be.add(be.add(be.mul(g, r), be.mul(gsq, d)), be.mul(gsq, d))


def _vjp(be, g, ins, out, needs, *, eps):
    x, mu = ins
    gd = composite_grad(be, g, x, mu, eps) if be.differentiates else \
        be.ln_normalize_grad(g, x, mu, eps=eps)
    return (gd if needs[0] else None, be.neg(gd) if needs[1] else None)


def _pin(ins: list, y, G) -> list:
    """The backward of the module doc evaluated row by row on numpy scalars (one IEEE
    rounding per operation), independently of the rule: [d x, d mu] at eps = PIN_EPS."""
    x, mu = ins
    T = np.float64 if x.dtype == np.float64 else np.float32
    gx = np.empty(x.shape, x.dtype)
    gmu = np.empty(mu.shape, mu.dtype)
    c = x.shape[-1]
    eps, n, inv_n = T(PIN_EPS), T(c), T(1.0 / c)
    with np.errstate(all="ignore"):
        for row in np.ndindex(x.shape[:-1]):
            xr, gr_, m = x[row], G[row], T(mu[row][0])
            d = [T(v) - m for v in xr]
            s = d[0] * d[0]
            for v in d[1:]:
                s = s + v * v
            sd = T(np.sqrt(s / n + eps))
            r = T(1.0) / sd
            gr = T(gr_[0]) * d[0]
            for j in range(1, c):
                gr = gr + T(gr_[j]) * d[j]
            gsq = (-((gr / sd) * r) / (sd + sd)) * inv_n
            out = [(T(gr_[j]) * r + gsq * d[j]) + gsq * d[j] for j in range(c)]
            gx[row] = out
            t = -out[0]
            for v in out[1:]:
                t = t + -v
            gmu[row][0] = t
    return [gx, gmu]


PIN_EPS = 1e-5
# (15 and 22 rows: the cpu kernels' rows 8 at a time, then one at a time)
_ROW_SHAPES = ((7,), (3, 5), (2, 3, 4), (1, 1), (4, 1), (2, 13), (0, 3), (3, 0), (15, 6),
               (2, 11, 3))
register(Op("ln_normalize", ("x", "mu"), ("eps",), _infer("ln_normalize", 2), _reference,
            _kernels("ln_normalize", False), _launch, _vjp,
            "(x - mu) * (1 / sqrt(mean((x - mu)^2) + eps)) along the last axis (layer_norm's "
            "rows after the mean; serial sums, each operation rounded once)",
            {"eps": 1e-5}, cpu=_kernels("ln_normalize", True),
            checks=Checks(tuple((((*s,), (*s[:-1], 1)), {"eps": e}) for s in _ROW_SHAPES
                                for e in (1e-5, 0.0)),
                          (((3, 5), (3, 1)), {"eps": PIN_EPS}), (ANY, ANY), _pin,
                          lambda t, x, mu, eps: (x - mu) / t.sqrt(
                              ((x - mu) * (x - mu)).mean(-1, keepdim=True) + eps))))
register(Op("ln_normalize_grad", ("g", "x", "mu"), ("eps",), _infer("ln_normalize_grad", 3),
            _grad_reference, _kernels("ln_normalize_grad", False), _grad_launch, None,
            "ln_normalize's backward: the layer_norm composite's gradient of x - mu for an "
            "upstream g (module doc's order)", {"eps": 1e-5},
            cpu=_kernels("ln_normalize_grad", True)))
