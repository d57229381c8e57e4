"""Kernel forms as objects: a form owns its geometry once.

A form knows how a launch's geometry is encoded (``geometry``), the C text that decodes it in
the CUDA/sim kernel and in the cpu kernel (``cuda_body`` / ``cpu_body``), and the index map an
engine above reads back from a recorded launch (``index_maps``). An op built on a form declares
only its scalar expression and its input types.

``Zip(n)``: ``y[i] = f(x0[o0(i)], ..., x{n-1}[o{n-1}(i)])`` over the broadcast output shape,
with the inputs' element types free (float of the op's dtype, int64, bool) and the result's too.
geom = [rank, shape[rank], strides of x0[rank], ..., strides of x{n-1}[rank]]; the output is
contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import shapes
from ..kernels import Param


@dataclass(frozen=True)
class Zip:
    """The n-input elementwise form with numpy broadcasting (see the module doc)."""

    n: int

    def params(self, in_ctypes: tuple[str, ...], out_ctype: str) -> tuple[Param, ...]:
        """Kernel parameters: x0..x{n-1}, y, n, geom."""
        ps = [Param(f"const {c}*", f"x{i}") for i, c in enumerate(in_ctypes)]
        return (*ps, Param(f"{out_ctype}*", "y"), Param("long long", "n"),
                Param("const long long*", "geom"))

    def geometry(self, out_shape: tuple, in_shapes: list[tuple]) -> tuple[int, ...]:
        """The geom values of one launch (broadcast strides, collapsed axes)."""
        dims, strides = shapes.collapse(
            out_shape, *[shapes.broadcast_strides(s, out_shape) for s in in_shapes])
        return (len(dims), *dims, *(v for st in strides for v in st))

    def _reads(self) -> str:
        return ", ".join(f"x{i}[o{i}]" for i in range(self.n))

    def _decode(self, indent: str) -> str:
        offs = ", ".join(f"o{i} = 0" for i in range(self.n))
        lines = [f"{indent}long long rem = i, {offs};",
                 f"{indent}for (int d = rank - 1; d >= 0; --d) {{",
                 f"{indent}    const long long c = rem % shape[d];",
                 f"{indent}    rem /= shape[d];"]
        lines += [f"{indent}    o{i} += c * geom[1 + {i + 1} * rank + d];" for i in range(self.n)]
        lines.append(f"{indent}}}")
        return "\n".join(lines)

    def cuda_body(self, fn: str) -> str:
        """The CUDA/sim kernel body: a grid-stride loop over outputs applying ``fn``."""
        return "\n".join([
            "    const int rank = (int)geom[0];",
            "    const long long* shape = geom + 1;",
            "    const long long step = (long long)gridDim.x * blockDim.x;",
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; "
            "i += step) {",
            self._decode("        "),
            f"        y[i] = {fn}({self._reads()});",
            "    }"])

    def cpu_body(self, fn: str) -> str:
        """The cpu kernel body: outputs split across threads, each decoded as in CUDA."""
        return "\n".join([
            "    const int rank = (int)geom[0];",
            "    const long long* shape = geom + 1;",
            "    gtcpu::parallel_for(n, 4, [=](long long lo, long long hi) {",
            "        for (long long i = lo; i < hi; ++i) {",
            self._decode("            "),
            f"            y[i] = {fn}({self._reads()});",
            "        }",
            "    });"])

    def index_maps(self, geom: np.ndarray) -> list[np.ndarray]:
        """For a recorded launch: each input's flat offset per output element."""
        g = np.asarray(geom, dtype=np.int64)
        rank = int(g[0])
        shape = tuple(int(v) for v in g[1:1 + rank])
        idx = np.indices(shape).reshape(rank, -1) if rank else np.zeros((0, 1), np.int64)
        return [(g[1 + (i + 1) * rank:1 + (i + 2) * rank, None] * idx).sum(axis=0)
                for i in range(self.n)]
