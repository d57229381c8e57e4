"""Kernel forms as objects: a form owns its geometry once.

A form knows how a launch's geometry is encoded (``geometry``), the C text that decodes it in
the CUDA/sim kernel and in the cpu kernel (``cuda_body`` / ``cpu_body``), the index map an
engine above reads back from a recorded launch (``index_maps``: the fusion planner) and the
statement a generated (fused) kernel runs for one output (``statement``: fusion's codegen).
An op built on a form declares only its scalar function and its input types; its kernels carry
the form (``Kernel.form``), so nothing else re-derives the layout.

``Zip(names)``: ``y[i] = f(x0[o0(i)], ..., x{n-1}[o{n-1}(i)])`` over the broadcast output
shape, the inputs' element types free (float of the op's dtype, int64, bool) and the result's
too. geom = [rank, shape[rank], strides of x0[rank], ..., strides of x{n-1}[rank]] (axes
collapsed where they can be); the output is contiguous. The binary elementwise ops (add, mul,
maximum, ...) are ``Zip(("a", "b"))``; where and the comparisons ``Zip`` of their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import shapes
from ..kernels import Param


@dataclass(frozen=True)
class Zip:
    """The n-input elementwise form with numpy broadcasting (see the module doc)."""

    names: tuple[str, ...]

    @property
    def n(self) -> int:
        """Number of inputs."""
        return len(self.names)

    def params(self, in_ctypes: tuple[str, ...], out_ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: the inputs, y, n, geom."""
        ps = [Param(f"const {c}*", name) for name, c in zip(self.names, in_ctypes)]
        return (*ps, Param(f"{out_ctype}*", "y"), Param("long long", "n"),
                Param("const long long*", "geom"))

    def geometry(self, out_shape: tuple, in_shapes: list[tuple]) -> tuple[int, ...]:
        """The geom values of one launch (broadcast strides, collapsed axes)."""
        dims, strides = shapes.collapse(
            out_shape, *[shapes.broadcast_strides(s, out_shape) for s in in_shapes])
        return (len(dims), *dims, *(v for st in strides for v in st))

    def _offsets(self, indent: str, i: str, geom: str, offs: tuple[str, ...]) -> list[str]:
        """C lines computing each input's offset ``offs[k]`` of output ``i``."""
        init = ", ".join(f"{o} = 0" for o in offs)
        lines = [f"{indent}long long rem = {i}, {init};",
                 f"{indent}for (int d = rank - 1; d >= 0; --d) {{",
                 f"{indent}    const long long c = rem % {geom}[1 + d];",
                 f"{indent}    rem /= {geom}[1 + d];"]
        lines += [f"{indent}    {o} += c * {geom}[1 + {k + 1} * rank + d];"
                  for k, o in enumerate(offs)]
        lines.append(f"{indent}}}")
        return lines

    def _offs(self) -> tuple[str, ...]:
        return tuple(f"o_{name}" for name in self.names)

    def _call(self, fn: str, arrays: tuple[str, ...]) -> str:
        return f"{fn}({', '.join(f'{a}[{o}]' for a, o in zip(arrays, self._offs()))})"

    def cuda_body(self, fn: str) -> str:
        """The CUDA/sim kernel body: a grid-stride loop over outputs applying ``fn``."""
        return "\n".join([
            "    const int rank = (int)geom[0];",
            "    const long long step = (long long)gridDim.x * blockDim.x;",
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
            "i += step) {",
            *self._offsets("        ", "i", "geom", self._offs()),
            f"        y[i] = {self._call(fn, self.names)};",
            "    }"])

    def cpu_body(self, fn: str, ctype: str | None = None) -> str:
        """The cpu kernel body. Two float inputs (``ctype`` given): innermost rows split
        across threads, contiguous and broadcast rows as loops the compiler vectorizes (lanes
        are independent outputs); otherwise each output decoded as in CUDA."""
        if self.n == 2 and ctype is not None:
            a, b = self.names
            return _CPU_ROWS2.replace("$T", ctype).replace("$FN", fn) \
                .replace("$A", a).replace("$B", b)
        return "\n".join([
            "    const int rank = (int)geom[0];",
            "    gtcpu::parallel_for(n, 4, [=](long long lo, long long hi) {",
            "        for (long long i = lo; i < hi; ++i) {",
            *self._offsets("            ", "i", "geom", self._offs()),
            f"            y[i] = {self._call(fn, self.names)};",
            "        }",
            "    });"])

    def statement(self, fn: str, arrays: dict[str, str], out: str, i: str) -> str:
        """One output ``i`` of a recorded launch inside a generated kernel: the same decode and
        the same call, on the generated kernel's array names (``arrays``: param -> name; the
        geometry under "geom")."""
        g = arrays["geom"]
        lines = [f"{{ const int rank = (int){g}[0];",
                 *self._offsets("  ", i, g, self._offs()),
                 f"  {out}[{i}] = {self._call(fn, tuple(arrays[nm] for nm in self.names))}; }}"]
        return "\n".join(lines)

    def index_maps(self, geom: np.ndarray, n: int) -> dict[str, np.ndarray]:
        """For a recorded launch of ``n`` outputs: each input's flat offset per output."""
        g = np.asarray(geom, dtype=np.int64)
        rank = int(g[0])
        shape = g[1:1 + rank]
        rem = np.arange(n, dtype=np.int64)
        offs = {name: np.zeros(n, np.int64) for name in self.names}
        for d in range(rank - 1, -1, -1):
            c = rem % shape[d]
            rem = rem // shape[d]
            for k, name in enumerate(self.names):
                offs[name] += c * g[1 + (k + 1) * rank + d]
        return offs


# two float inputs on the cpu: gtcpu::rows2 walks the innermost rows of the broadcast shape
_CPU_ROWS2 = """\
    const int rank = (int)geom[0];
    gtcpu::rows2(rank, geom + 1, geom + 1 + rank, 0, geom + 1 + 2 * rank, 0, 4,
                 [=](long long r, long long oa, long long ob, long long len, long long ia,
                     long long ib) {
        $T* yr = y + r * len;
        const $T* ar = $A + oa;
        const $T* br = $B + ob;
        if (ia == 1 && ib == 1) {
            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j], br[j]);
        } else if (ia == 1 && ib == 0) {
            const $T bv = br[0];
            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j], bv);
        } else if (ia == 0 && ib == 1) {
            const $T av = ar[0];
            for (long long j = 0; j < len; ++j) yr[j] = $FN(av, br[j]);
        } else {
            for (long long j = 0; j < len; ++j) yr[j] = $FN(ar[j * ia], br[j * ib]);
        }
    });"""

ZIP2 = Zip(("a", "b"))  # the binary elementwise ops' form
