"""add_int: int64 + int64 with numpy broadcasting, wrapping modulo 2**64 (two's complement, as
numpy's and torch's int64 add): index arithmetic (offsets of ids, position ids, a shifted
argmax) without a round trip through floats.

The whole op in one file: the scalar function (``gt_add_int``: the sum of the unsigned images,
defined in C where a signed overflow is not), the kernels (the ``Zip`` form over int64, in each
float type's kernel set as every int64-only op), the reference. Not differentiable (int64 carries
no gradient); its parity rows are the typed rows of ``gtensor/tests/cases.py`` (ids drawn over
the whole int64 range, so sums wrap).
"""

from __future__ import annotations

import numpy as np

from .. import shapes
from ..dtypes import CTYPES, INDEX, INT, FloatType
from ..kernels import Kernel, Kind
from ..scalar.dsl import I64, scalar_fn
from .forms import BLOCK, ZIP2, grid_for
from .registry import Op, register

ADD_INT = scalar_fn("gt_add_int", (I64, I64), I64)(lambda m, a, b: m.wrapping_add(a, b))
_CT = CTYPES[INDEX]  # long long


def _kernels(ft: FloatType, cpu: bool = False) -> list[Kernel]:
    """The kernel in each float type's set, as every int64-only op (rng_fold); ``float_type``
    picks the float64 one (no float input or result)."""
    ps = ZIP2.params((_CT, _CT), _CT)
    text = ZIP2.cpu_body(ADD_INT.cname, _CT) if cpu else ZIP2.cuda_body(ADD_INT.cname)
    return [Kernel(ft.kernel("add_int"), ps, text, Kind.SELECT, (ADD_INT,), ZIP2)]


def _infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    return shapes.broadcast("add_int", shapes_[0], shapes_[1]), attrs


def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ADD_INT.numpy(a, b)


def _launch(rt, ks, ins, out) -> None:
    n = out.size
    if n:
        a, b = ins
        geom = rt.geom(ZIP2.geometry(out.shape, [a.shape, b.shape]))
        rt.launch(ks.only, grid_for(n), BLOCK, (a, b, out, n, geom))


register(Op("add_int", ("a", "b"), (), _infer, _reference, _kernels, _launch, None,
            "a + b on int64 (broadcast), wrapping modulo 2**64 as numpy and torch",
            cpu=lambda ft: _kernels(ft, True), types=(INT, INT), out_type=INT))
