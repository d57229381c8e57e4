"""Inner products: matmul (2-D, or with leading axes folded into rows) and bmm (3-D, batch
first).

``c[i,j]`` is the serial chain over k of row i of a and column j of b under the ``inner`` attr's
contract (``"plain"``: products and sums rounded separately; ``"fma"``: one fused multiply-add
per term), as ``gtensor.ops.inner`` defines it for every inner product.

The ``ta`` / ``tb`` attrs (bool, default False) make the op compute ``op(a) @ op(b)``, op(x) being
x with its last two axes swapped when its flag is set: exactly transpose-then-matmul (a
transpose is an exact copy, so the same products in the same order), but the kernels read the
operand in place. The backward uses them instead of transpose copies.

matmul folds an operand of rank >= 3 into rows: x of shape (..., c) is read as the 2-D
(prod(...), c) it is in memory (row-major), so no reshape copy is needed around the product:

* a (..., m, k) [ta False], b (k, n) or (n, k) [tb]: c (..., m, n), exactly
  ``matmul(a.reshape(-1, k), b).reshape(..., m, n)`` (torch's ``(..., m, k) @ (k, n)``);
* a (..., k) read transposed [ta True] and b (..., n) [tb False] with the same folded rows P:
  c (k, n) = fold(a)^T @ fold(b), each output a chain over the P folded rows in row-major order
  (the gradient of the weight of the first form: one inner product over every leading
  position).

Those two forms are closed under the backward (each one's gradients are products of the two
forms), so a tape's linear layer on (B, T, C) activations needs no reshape at all.
"""

from __future__ import annotations

from string import Template

import numpy as np

from ..dtypes import FLOATS, FloatType
from ..kernels import Kernel, Kind, params
from .forms import BLOCK, Product, grid_for
from .inner import DOT, DOT_FMA, FMA_KERNELS, INNER, check_inner, cpu_body, serial_matmul
from .registry import Op, register

_MATMUL = Template("""\
    const long long mn = m * n;
    const long long total = batch * mn;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += step) {
        const long long bi = idx / mn, rem = idx % mn, i = rem / n, j = rem % n;
        // row i of op(a), column j of op(b): a flagged operand is read transposed in place
        c[idx] = $DOT(a + bi * m * k + (ta ? i : i * k), ta ? m : 1,
                      b + bi * k * n + (tb ? j * k : j), tb ? 1 : n, k);
    }""")


PRODUCTS = {inner: Product(inner) for inner in INNER}  # the kernels' forms, per contract


def kernel_base(inner: str) -> str:
    """The base name of the matmul kernel of contract ``inner`` (its KernelSet key)."""
    return "matmul" if inner == "plain" else f"matmul_{inner}"


def _kernels(ft: FloatType) -> list[Kernel]:
    t = ft.ctype
    sig = params(f"const {t}* a, const {t}* b, {t}* c, long long batch, long long m, "
                 "long long k, long long n, long long ta, long long tb")
    return [Kernel(ft.kernel(kernel_base(inner)), sig, _MATMUL.substitute(DOT=dot[ft].name),
                   Kind.MATMUL, (dot[ft],), PRODUCTS[inner])
            for inner, dot in zip(INNER, (DOT, DOT_FMA))]


FMA_KERNELS.update(ft.kernel(kernel_base("fma")) for ft in FLOATS)


def _cpu_kernels(ft: FloatType) -> list[Kernel]:
    out = []
    for inner, k in zip(INNER, _kernels(ft)):
        body = (f"    typedef {ft.ctype} T;\n    const gtcpu::NoPack pack{{}};\n"
                + cpu_body(inner, "gtcpu::parallel_for"))
        out.append(Kernel(k.name, k.params, body, form=k.form))
    return out


def _flags(op: str, attrs: dict) -> dict:
    """The attrs with ``ta`` / ``tb`` checked and made plain bools (False when absent)."""
    check_inner(op, attrs)
    out = dict(attrs)
    out["ta"], out["tb"] = bool(attrs.get("ta", False)), bool(attrs.get("tb", False))
    return out


def _swap(shape: tuple, flag: bool) -> tuple:
    """``shape`` with its last two axes swapped when ``flag`` (the shape op(x) has)."""
    return (*shape[:-2], shape[-1], shape[-2]) if flag and len(shape) >= 2 else tuple(shape)


def _named(name: str, shape: tuple, flag: bool, folds: bool = False) -> str:
    """How an error names an operand: ``a (3, 4)``, or ``a^T (4, 3) (a (3, 4), ta=True)``;
    a folded one (matmul, rank >= 3) as ``fold(a) (6, 4) (a (2, 3, 4))``."""
    if folds and len(shape) > 2:
        two = _fold(tuple(shape))
        return (f"fold({name}){'^T' if flag else ''} {_swap(two, flag)} ({name} {shape}"
                f"{f', t{name}=True' if flag else ''})")
    if not flag:
        return f"{name} {shape}"
    return f"{name}^T {_swap(shape, True)} ({name} {shape}, t{name}=True)"


def _fold(shape: tuple) -> tuple[int, int]:
    """An operand's 2-D form: its leading axes folded into rows."""
    return (int(np.prod(shape[:-1], dtype=np.int64)), shape[-1])


def _infer_matmul(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    attrs = _flags("matmul", attrs)
    ta, tb = attrs["ta"], attrs["tb"]
    a0, b0 = shapes_
    if len(a0) < 2 or len(b0) < 2 or (len(b0) > 2 and (tb or not ta)):
        raise ValueError(f"matmul: expected 2-D operands, or a of rank >= 3 (its leading axes "
                         "fold into rows) with b 2-D, or under ta=True and tb=False a and b of "
                         f"rank >= 2 (both folded); got a {a0} and b {b0} (ta={ta}, tb={tb}) "
                         "(use bmm for batches)")
    a, b = _swap(_fold(a0), ta), _swap(_fold(b0), tb)
    if a[1] != b[0]:
        raise ValueError(f"matmul: inner dimensions differ: {_named('a', a0, ta, True)} @ "
                         f"{_named('b', b0, tb, True)} (expected op(a).shape[1] == "
                         "op(b).shape[0], op(x) = x (folded to 2-D) transposed when its flag is "
                         "set)" if ta or tb or len(a0) > 2 else
                         f"matmul: inner dimensions differ: a {a} @ b {b} "
                         f"(expected a.shape[1] == b.shape[0])")
    if len(a0) > 2 and not ta:
        return (*a0[:-1], b[1]), attrs
    return (a[0], b[1]), attrs


def _infer_bmm(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    attrs = _flags("bmm", attrs)
    ta, tb = attrs["ta"], attrs["tb"]
    a0, b0 = shapes_
    if len(a0) != 3 or len(b0) != 3:
        raise ValueError(f"bmm: expected 3-D operands (batch, rows, cols), got a {a0} and b {b0}")
    if a0[0] != b0[0]:
        raise ValueError(f"bmm: batch sizes differ: a {a0} and b {b0} "
                         "(expected a.shape[0] == b.shape[0])")
    a, b = _swap(a0, ta), _swap(b0, tb)
    if a[2] != b[1]:
        raise ValueError(f"bmm: inner dimensions differ: {_named('a', a0, ta)} @ "
                         f"{_named('b', b0, tb)} (expected op(a).shape[2] == op(b).shape[1], "
                         "op(x) = x with its last two axes swapped when its flag is set)"
                         if ta or tb else
                         f"bmm: inner dimensions differ: a {a} @ b {b} "
                         "(expected a.shape[2] == b.shape[1])")
    return (a[0], a[1], b[2]), attrs


def reference(a: np.ndarray, b: np.ndarray, inner: str = "plain", ta: bool = False,
              tb: bool = False) -> np.ndarray:
    """The numpy definition of bmm: ``serial_matmul`` on op(a), op(b) (views)."""
    return serial_matmul(np.swapaxes(a, -1, -2) if ta else a,
                         np.swapaxes(b, -1, -2) if tb else b, inner)


def _matmul_reference(a: np.ndarray, b: np.ndarray, inner: str = "plain", ta: bool = False,
                      tb: bool = False) -> np.ndarray:
    """The numpy definition of matmul: ``reference`` on the operands' 2-D (folded) forms,
    the result given a's leading axes back (ta False)."""
    c = reference(a.reshape(_fold(a.shape)), b.reshape(_fold(b.shape)), inner, ta, tb)
    return c.reshape(*a.shape[:-1], c.shape[-1]) if a.ndim > 2 and not ta else c


def _launch(rt, ks, ins, out, inner="plain", ta=False, tb=False) -> None:
    a, b = ins
    if not out.size:
        return
    batch = a.shape[0]
    m, n = out.shape[-2:]
    k = a.shape[-2] if ta else a.shape[-1]
    rt.launch(ks[kernel_base(inner)], grid_for(out.size), BLOCK,
              (a, b, out, batch, m, k, n, int(ta), int(tb)))


def _matmul_launch(rt, ks, ins, out, inner="plain", ta=False, tb=False) -> None:
    a, b = ins
    if not out.size:
        return
    rows, cols = _fold(a.shape)
    m, k = (cols, rows) if ta else (rows, cols)
    rt.launch(ks[kernel_base(inner)], grid_for(out.size), BLOCK,
              (a, b, out, 1, m, k, out.shape[-1], int(ta), int(tb)))


# Each backward inner product under the forward's contract, with flags in place of transpose
# copies. For c = op(a) @ op(b) with upstream g:
#   d op(a) = g @ op(b)^T, d op(b) = op(a)^T @ g, and da = d op(a) (transposed back if ta):
#   da = matmul(g, b, tb=not tb)         (ta False)    da = matmul(b, g, ta=tb, tb=True)  (ta)
#   db = matmul(a, g, ta=not ta)         (tb False)    db = matmul(g, a, ta=True, tb=ta)  (tb)
# Each output is the same chain of the same products as transpose-then-matmul's (a product's
# operands commute exactly), so the bits are those of the explicit-transpose composition.
def _grads(mm, g, a, b, needs, inner, ta, tb):
    ga = gb = None
    if needs[0]:
        ga = (mm(b, g, inner=inner, ta=tb, tb=True) if ta
              else mm(g, b, inner=inner, tb=not tb))
    if needs[1]:
        gb = (mm(g, a, inner=inner, ta=True, tb=ta) if tb
              else mm(a, g, inner=inner, ta=not ta))
    return ga, gb


def _matmul_vjp(be, g, ins, out, needs, inner="plain", ta=False, tb=False):
    return _grads(be.matmul, g, *ins, needs, inner, ta, tb)


def _bmm_vjp(be, g, ins, out, needs, inner="plain", ta=False, tb=False):
    return _grads(be.bmm, g, *ins, needs, inner, ta, tb)


_DEFAULTS = {"inner": "plain", "ta": False, "tb": False}
register(Op("matmul", ("a", "b"), ("inner", "ta", "tb"), _infer_matmul, _matmul_reference,
            _kernels, _matmul_launch, _matmul_vjp, "op(a) (m, k) @ op(b) (k, n), serial inner "
            "products (op: transposed when ta / tb; an operand of rank >= 3 folds its leading "
            "axes into rows: a (..., m, k) @ b (k, n) -> (..., m, n), and with ta a (..., k) "
            "and b (..., n) -> (k, n))", dict(_DEFAULTS), cpu=_cpu_kernels))
register(Op("bmm", ("a", "b"), ("inner", "ta", "tb"), _infer_bmm, reference, _kernels, _launch,
            _bmm_vjp, "op(a) (b, m, k) @ op(b) (b, k, n), serial inner products per batch "
            "(op: last two axes swapped when ta / tb)", dict(_DEFAULTS), cpu=_cpu_kernels))
