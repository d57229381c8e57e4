"""Inner products: matmul (2-D) and bmm (3-D, batch first).

Definition: ``c[i,j] = a[i,0]*b[0,j]``, then ``c[i,j] = c[i,j] + a[i,k]*b[k,j]`` for k ascending,
each product and each sum rounded separately (no FMA); an empty inner dimension gives +0.0.
"""

from __future__ import annotations

from string import Template

import numpy as np

from ..kernels import Kernel, params
from .elementwise import ADD, BLOCK, CTYPE, MUL, grid_for, suffix
from .registry import Op, register

_MATMUL = Template("""\
    const long long mn = m * n;
    const long long total = batch * mn;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += step) {
        const long long bi = idx / mn, rem = idx % mn, i = rem / n, j = rem % n;
        const $T* ar = a + bi * m * k + i * k;
        const $T* bc = b + bi * k * n + j;
        $T acc = ($T)0;
        if (k > 0) {
            acc = $MUL(ar[0], bc[0]);
            for (long long kk = 1; kk < k; ++kk)
                acc = $ADD(acc, $MUL(ar[kk], bc[kk * n]));
        }
        c[idx] = acc;
    }""")


# CPU body: rows of c split across threads; within a row an i-k-j loop whose j lanes are
# independent outputs (SIMD), each still accumulated k-ascending: c[j] = a0*b[0,j], then
# c[j] = c[j] + a[k]*b[k,j], every product and sum rounded (MUL, ADD; no FMA).
_CPU_MATMUL = Template("""\
    const long long rows = batch * m;
    gtcpu::parallel_for(rows, k * n, [=](long long lo, long long hi) {
        for (long long r = lo; r < hi; ++r) {
            const long long bi = r / m;
            const $T* __restrict__ ar = a + r * k;
            const $T* __restrict__ bb = b + bi * k * n;
            $T* __restrict__ cr = c + r * n;
            if (k == 0) {
                for (long long j = 0; j < n; ++j) cr[j] = ($T)0;
                continue;
            }
            const $T a0 = ar[0];
            for (long long j = 0; j < n; ++j) cr[j] = $MUL(a0, bb[j]);
            for (long long kk = 1; kk < k; ++kk) {
                const $T av = ar[kk];
                const $T* __restrict__ br = bb + kk * n;
                for (long long j = 0; j < n; ++j) cr[j] = $ADD(cr[j], $MUL(av, br[j]));
            }
        }
    });""")


def _cpu_kernels(sfx: str) -> list[Kernel]:
    body = _CPU_MATMUL.substitute(T=CTYPE[sfx], ADD=ADD[sfx].cname, MUL=MUL[sfx].cname)
    return [Kernel(k.name, k.params, body) for k in _kernels(sfx)]


def _kernels(sfx: str) -> list[Kernel]:
    t = CTYPE[sfx]
    sig = params(f"const {t}* a, const {t}* b, {t}* c, long long batch, long long m, "
                 "long long k, long long n")
    body = _MATMUL.substitute(T=t, ADD=ADD[sfx].cname, MUL=MUL[sfx].cname)
    return [Kernel(f"k_matmul_{sfx}", sig, body)]


def serial_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., m, k) @ (..., k, n) with the serial inner-product order; the numpy definition.

    Vectorized over every output element, serial over k: step k is one IEEE multiply of
    column k of ``a`` by row k of ``b`` (MUL's ``a * b``) and one IEEE add into the
    accumulator (ADD's ``acc + p``), written in place to keep the loop cheap.
    """
    k = a.shape[-1]
    out_shape = a.shape[:-1] + b.shape[-1:]
    if k == 0:
        return np.zeros(out_shape, a.dtype)
    cols = np.moveaxis(a, -1, 0)[..., None]  # cols[k]: (..., m, 1)
    rows = np.moveaxis(b, -2, 0)[..., None, :]  # rows[k]: (..., 1, n)
    with np.errstate(all="ignore"):
        acc = np.multiply(cols[0], rows[0])
        prod = np.empty_like(acc)
        for kk in range(1, k):
            np.multiply(cols[kk], rows[kk], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def _infer_matmul(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    a, b = shapes_
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"matmul: expected 2-D operands, got a {a} and b {b} "
                         "(use bmm for batches)")
    if a[1] != b[0]:
        raise ValueError(f"matmul: inner dimensions differ: a {a} @ b {b} "
                         f"(expected a.shape[1] == b.shape[0])")
    return (a[0], b[1]), attrs


def _infer_bmm(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    a, b = shapes_
    if len(a) != 3 or len(b) != 3:
        raise ValueError(f"bmm: expected 3-D operands (batch, rows, cols), got a {a} and b {b}")
    if a[0] != b[0]:
        raise ValueError(f"bmm: batch sizes differ: a {a} and b {b} "
                         "(expected a.shape[0] == b.shape[0])")
    if a[2] != b[1]:
        raise ValueError(f"bmm: inner dimensions differ: a {a} @ b {b} "
                         "(expected a.shape[2] == b.shape[1])")
    return (a[0], a[1], b[2]), attrs


def _launch(rt, ins, out) -> None:
    a, b = ins
    if not out.size:
        return
    batch = a.shape[0] if a.ndim == 3 else 1
    m, k = a.shape[-2:]
    n = b.shape[-1]
    rt.launch(f"k_matmul_{suffix(out)}", grid_for(out.size), BLOCK, (a, b, out, batch, m, k, n))


def _matmul_vjp(be, g, ins, out, needs):
    a, b = ins
    return (be.matmul(g, be.transpose(b)) if needs[0] else None,
            be.matmul(be.transpose(a), g) if needs[1] else None)


def _bmm_vjp(be, g, ins, out, needs):
    a, b = ins
    return (be.bmm(g, be.transpose(b, (0, 2, 1))) if needs[0] else None,
            be.bmm(be.transpose(a, (0, 2, 1)), g) if needs[1] else None)


register(Op("matmul", ("a", "b"), (), _infer_matmul, serial_matmul, _kernels, _launch,
            _matmul_vjp, "(m, k) @ (k, n), serial inner products", cpu=_cpu_kernels))
register(Op("bmm", ("a", "b"), (), _infer_bmm, serial_matmul, _kernels, _launch, _bmm_vjp,
            "(b, m, k) @ (b, k, n), serial inner products per batch", cpu=_cpu_kernels))
