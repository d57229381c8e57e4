"""The inner-product contract: one output of a product is a serial chain over k, under one of
two contracts chosen by an op's ``inner`` attr (a tape sets it from ``Tape.inner``):

* ``"plain"`` (the default): ``acc = a[0]*b[0]``, then ``acc = acc + a[k]*b[k]`` for k ascending,
  each product and each sum rounded separately (no FMA);
* ``"fma"``: ``acc = +0.0``, then ``acc = fma(a[k], b[k], acc)`` for k ascending: one IEEE fused
  multiply-add (a single rounding) per term (``gtensor.fma`` in numpy).

An empty inner dimension gives +0.0 under both. matmul / bmm (``ops.linalg``) and the conv ops
(``ops.conv``) all compute with what this module defines: the ``__device__`` chains (``DOT``,
``DOT_FMA``), the numpy definition (``serial_matmul``), the cpu product's text
(``cpu_product``, the matmul kernel's own tiles, packing and blocking) and the ``inner`` check.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

import numpy as np

from ..dtypes import F32, F64, FLOATS
from ..fma import fma_chain
from ..kernels import DeviceFn, Kernel
from .elementwise import ADD, MUL

# One output of an inner product: the definition's serial chain over k, reading a and b with
# strides (the per-node matmul kernel: a row of a, a column of b; a fused kernel may read a
# transposed operand in place). Both call this one function.
_DOT = Template("""\
__device__ __forceinline__ $T $NAME(const $T* a, long long as, const $T* b, long long bs,
                                     long long k)
{
    $T acc = ($T)0;
    if (k > 0) {
        acc = $MUL(a[0], b[0]);
        for (long long kk = 1; kk < k; ++kk)
            acc = $ADD(acc, $MUL(a[kk * as], b[kk * bs]));
    }
    return acc;
}
""")
DOT = {ft: DeviceFn(ft.fn("dot"), _DOT.substitute(T=ft.ctype, NAME=ft.fn("dot"),
                                                      MUL=MUL[ft].cname, ADD=ADD[ft].cname),
                     (MUL[ft], ADD[ft]))
       for ft in FLOATS}

# The fma contract's chain: acc = +0.0, then one fused multiply-add per k (CUDA's __fma_rn /
# __fmaf_rn; the host runtimes map them to std::fma, a single rounding on every target).
_DOT_FMA = Template("""\
__device__ __forceinline__ $T $NAME(const $T* a, long long as, const $T* b, long long bs,
                                     long long k)
{
    $T acc = ($T)0;
    for (long long kk = 0; kk < k; ++kk)
        acc = $FMA(a[kk * as], b[kk * bs], acc);
    return acc;
}
""")
FMA_INTRINSIC = {F64: "__fma_rn", F32: "__fmaf_rn"}
DOT_FMA = {ft: DeviceFn(ft.fn("dot_fma"),
                        _DOT_FMA.substitute(T=ft.ctype, NAME=ft.fn("dot_fma"),
                                            FMA=FMA_INTRINSIC[ft]))
           for ft in FLOATS}
INNER = ("plain", "fma")  # the inner-product contracts (the ``inner`` attr's values)
# the fma contract's kernels by name (matmul's and the conv ops' register theirs): the only
# kernels whose text may name a fused multiply-add
FMA_KERNELS: set[str] = set()


# CPU body: rows of c split across threads. Outputs are computed in register tiles (8, 6, 4, 2
# or 1 rows x up to 2 SIMD vectors of L lanes of columns, gtcpu::Vec; a vector is the build's
# native width, gtcpu::VEC_BYTES: 64 bytes with AVX-512, 32 with AVX2 -- 64-byte vectors on an
# AVX2 build went through the stack at 0.46 G multiply-adds/s, 32-byte ones run 5.0 on the
# same AMD EPYC, float64, one thread); every output keeps its own
# k-ascending chain: acc = a[i,0]*b[0,j], then acc = acc + a[i,k]*b[k,j], each lane's product and
# sum rounded (the vector form of MUL and ADD; no FMA) -- or, under the fma contract, acc =
# fma(a[i,k], b[k,j], acc) from acc = +0.0 (gtcpu::vfma: one fused multiply-add per lane, vfmadd
# on x86). Tiles only decide which independent outputs are computed side by side, never the
# order within one. (Wider tiles -- 8 x 3, 12 x 2, 6 x 4 vectors, 16 x 1 for narrow columns --
# measured no faster on an AVX-512 Xeon: the 8 x 2 loop runs near the FMA rate from L1; on AMD
# Zen 3 / 4 the plain contract's tiles are 14 rows x 1 vector, see ``tall`` below.)
# Each k x 2L column panel of op(b) is first copied (exactly) into a contiguous, 64-byte aligned
# buffer, so the tiles stream it at unit stride whatever n is (with tb: gathered from b's rows);
# a last panel narrower than 2L is zero-padded to 2L. When b is large (> 256 KB) a thread's
# panels are all copied in one pass over b's rows before its first row block (b read in
# order; copied a panel at a time, each k-step would start a row n values on, a new page
# every few k-steps: measured 2-12% slower on large shapes). (With few rows -- m <= 16, or
# m <= 32 and b in L2 -- a panel of whole vectors is read in place instead: the copy would
# cost what it saves.) The leftover columns (n % L) are computed in one more vector over the
# padded panel (a half vector, L/2 lanes, when they fit one: measured faster than a mostly
# idle full one):
# every lane's chain is its own, so the padded lanes' values (never loaded from c, never
# stored) change no stored bit, and only the w real lanes are read from / written to c.
# With ta, op(a)'s row r at k-step kk is a[kk, r]: a tile's 8 rows are 8 contiguous values
# per k-step, m apart. They are read in place (each k-step one cache line) when a is small
# (<= 128 KB: it stays in cache) or there is one panel (a is read once) and m is at most 2 KB
# of values (the k-steps' lines stay a stride the prefetchers follow, pages a few k-steps
# long); otherwise each row block of op(a) (columns of a) is first copied (exactly) into
# groups of 8 rows whose k-steps are contiguous: read in place from a large a, every k-step of
# a tile would touch a new page (and each panel would read a again).
# The product's text after its ``typedef``: the body of the matmul kernel, and of the
# ``product`` lambda other cpu kernels call (``cpu_product``: the conv ops' per-image
# products); ``$SPLIT`` is how it splits across threads (``gtcpu::parallel_for``, or
# ``split``: serial when the caller already runs on one of the threads). The C++ text is the
# file runtime/cpu_product_template.h (a string.Template: $FIRST, $NEXT, $SPLIT, $TALL).
_CPU_PRODUCT = Template(
    (Path(__file__).parents[1] / "runtime" / "cpu_product_template.h").read_text())


# the register tiles' chain steps per contract: the first term (k = 0) and every next one
_CPU_STEPS = {"plain": ("ar[r * rs] * bv", "acc[r][v] + av * bv[v]"),
              "fma": ("gtcpu::vfma(ar[r * rs], bv, V{})", "gtcpu::vfma(av, bv[v], acc[r][v])")}


def cpu_body(inner: str, split: str) -> str:
    """The cpu product's text under contract ``inner``, split across threads by ``split``."""
    first, nxt = _CPU_STEPS[inner]
    return _CPU_PRODUCT.substitute(FIRST=first, NEXT=nxt, SPLIT=split,
                                   TALL="true" if inner == "plain" else "false")


def cpu_product(inner: str) -> str:
    """C++ text defining ``product(a, b, c, batch, m, k, n, ta, tb, serial, pack)`` inside a
    cpu kernel (of element type ``T``): the cpu matmul kernel's own body (its tiles, packing,
    blocking and thread split: each output's chain over k ascending under contract
    ``inner``), so a kernel built on products of slices (the conv ops' im2col products) runs
    at the matmul's speed with the matmul's bits. ``serial`` keeps it on the calling thread
    (a caller already splitting work across threads); ``pack`` is ``gtcpu::NoPack{}`` (b's
    panels copied from b) or a callable ``pack(pw, j0, w)`` that writes op(b)'s panel of
    columns j0 .. j0 + w itself (the conv forward's im2col, a panel at a time). ``ta`` is
    0 / 1, or ``gtcpu::Int<0>{}`` / ``gtcpu::Int<1>{}`` where the caller knows it: only the
    tiles that reading of a takes are compiled (the attention forward's library: 8.2 -> 4.5 s)."""
    body = cpu_body(inner, "split")
    inner_text = "".join(("    " + line if line.strip() else line) + "\n"
                         for line in body.splitlines())
    return ("    auto product = [=](const T* a, const T* b, T* c, long long batch, long long m,\n"
            "                       long long k, long long n, auto ta, long long tb,\n"
            "                       bool serial, auto pack) {\n"
            "        auto split = [serial](long long count, long long cost, auto f) {\n"
            "            if (serial)\n"
            "                f(0LL, count);\n"
            "            else\n"
            "                gtcpu::parallel_for(count, cost, f);\n"
            "        };\n"
            + inner_text + "    };\n")


def cpu_scratch(slots: int) -> str:
    """C++ text defining ``scratch(slot, n)`` inside a cpu kernel (of element type ``T``): a
    thread's reusable buffer number ``slot`` (< ``slots``) of at least ``n`` elements starting
    on a 64-byte boundary (the conv and attention kernels' panels and tiles; kept between
    calls; whole-vector stores into it never straddle a cache line)."""
    return ("    auto scratch = [](int slot, long long n) -> T* {\n"
            f"        static thread_local std::vector<T> bufs[{slots}];\n"
            "        constexpr long long pad = 64 / sizeof(T);  // room to align to 64 bytes\n"
            "        std::vector<T>& b = bufs[slot];\n"
            "        if ((long long)b.size() < n + pad) b.resize((size_t)(n + pad));\n"
            "        return (T*)(((uintptr_t)b.data() + 63) & ~(uintptr_t)63);\n"
            "    };\n")


def serial_matmul(a: np.ndarray, b: np.ndarray, inner: str = "plain") -> np.ndarray:
    """(..., m, k) @ (..., k, n) with the serial inner-product order; the numpy definition.

    Vectorized over every output element, serial over k: under ``inner="plain"`` step k is
    one IEEE multiply of column k of ``a`` by row k of ``b`` (MUL's ``a * b``) and one IEEE
    add into the accumulator (ADD's ``acc + p``), written in place to keep the loop cheap;
    under ``inner="fma"`` it is one exact fused multiply-add into an accumulator that
    starts at +0.0 (``gtensor.fma.fma``).
    """
    k = a.shape[-1]
    out_shape = a.shape[:-1] + b.shape[-1:]
    if k == 0:
        return np.zeros(out_shape, a.dtype)
    cols = np.moveaxis(a, -1, 0)[..., None]  # cols[k]: (..., m, 1)
    rows = np.moveaxis(b, -2, 0)[..., None, :]  # rows[k]: (..., 1, n)
    if inner == "fma":
        return fma_chain(cols, rows, np.broadcast_shapes(out_shape, cols[0].shape))
    with np.errstate(all="ignore"):
        acc = np.multiply(cols[0], rows[0])
        prod = np.empty_like(acc)
        for kk in range(1, k):
            np.multiply(cols[kk], rows[kk], out=prod)
            np.add(acc, prod, out=acc)
    return acc


def check_inner(op: str, attrs: dict) -> None:
    """ValueError / TypeError naming ``op`` unless ``attrs`` hold a known ``inner`` contract
    and bool ``ta`` / ``tb`` flags."""
    inner = attrs.get("inner", "plain")
    if not isinstance(inner, str) or inner not in INNER:
        raise ValueError(f"{op}: inner is {inner!r}; expected one of {INNER} (the "
                         "inner-product contract)")
    for flag, arg in (("ta", "a"), ("tb", "b")):
        v = attrs.get(flag, False)
        if type(v) is not bool and not isinstance(v, np.bool_):
            raise TypeError(f"{op}: {flag} is {v!r}; expected a bool (True: read {arg} "
                            "transposed, its last two axes swapped)")


def fma_contract_text(kernels: tuple[Kernel, ...]) -> list[str]:
    """The texts of the fma contract among ``kernels`` (the sources of the kernels named in
    ``FMA_KERNELS``: matmul's and the conv ops'; its ``gt_dot_fma`` helpers): the only text of
    a module that may name a fused multiply-add."""
    return ([k.source() for k in kernels if k.name in FMA_KERNELS]
            + [fn.text for fn in DOT_FMA.values()])
