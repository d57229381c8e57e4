"""Kernel signatures: the contract between CUDA source text and the runtimes that launch it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .dtypes import CTYPES as _ELEMENT_CTYPES
from .dtypes import FloatType

# C types a kernel parameter may have. Pointer types carry the element dtype they accept.
POINTER_DTYPES = {f"{const}{c}*": dt.name for dt, c in _ELEMENT_CTYPES.items()
                  for const in ("const ", "")}
SCALAR_TYPES = ("long long", "int", "double", "float")
CTYPES = tuple(POINTER_DTYPES) + SCALAR_TYPES


GEOMETRY, DATA = "geometry", "data"  # a parameter's role
GEOMETRY_NAME = "geom"  # the name every kernel gives its launch-geometry array


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its C type (one of ``CTYPES``), its name and its role.

    The role says what an array parameter holds: ``GEOMETRY`` (the launch's shapes and
    strides, fixed when a launch is recorded: fusion reads its values, gemit bakes them in) or
    ``DATA`` (an array the op reads or writes: float values, int64 indices, bool masks -- real
    reads for the fusion planner and real inputs for gemit, refreshed by a replay's set_input).
    By default the array named ``geom`` is geometry and everything else is data.
    """

    ctype: str
    name: str
    role: str = ""

    def __post_init__(self) -> None:
        if self.ctype not in CTYPES:
            raise ValueError(f"Param {self.name!r}: ctype {self.ctype!r} is not one of {CTYPES}")
        if not self.role:
            role = GEOMETRY if (self.name == GEOMETRY_NAME and self.ctype == "const long long*") \
                else DATA
            object.__setattr__(self, "role", role)
        if self.role not in (GEOMETRY, DATA):
            raise ValueError(f"Param {self.name!r}: role {self.role!r} is not geometry or data")

    @property
    def is_geometry(self) -> bool:
        """True for the launch-geometry array (shapes, strides)."""
        return self.role == GEOMETRY

    @property
    def dtype(self) -> str | None:
        """The numpy dtype name an array parameter takes (None for a scalar)."""
        return POINTER_DTYPES.get(self.ctype)

    @property
    def is_pointer(self) -> bool:
        """True for array parameters."""
        return self.ctype.endswith("*")

    @property
    def is_const(self) -> bool:
        """True for read-only array parameters."""
        return self.ctype.startswith("const ")


# What a kernel computes (``Kernel.kind``): a label (and what ``fuse(alone=...)`` names); the
# layout of each geometry is owned by the kernel's form (``Kernel.form``, ops/forms.py: Map
# for map and scalar, Zip for zip and select, Copy, Fill, Reduce, Rows, Pointwise for
# elementwise, Product for matmul, Opaque for gather / scatter / index / conv / pool / random),
# and fusion asks only the form (whether it fuses, its index maps and statements):
#   map     y[i] = f(x[i])                        for i < n;            calls = (f,)
#   scalar  y[i] = f(x[i], s)                     for i < n;            calls = (f,)
#   zip     y[i] = f(a[oa(i)], b[ob(i)])          geom: rank, shape, a strides, b strides
#   copy    y[oo(i)] = x[oi(i)]                   geom: rank, shape, in strides, in offset,
#                                                       out strides, out offset
#   fill    y[i] = v                              for i < n
#   matmul  c[b,i,j] = the serial chain over k ascending of calls[0], the contract's row
#           helper: gt_dot (mul, then add) or gt_dot_fma (fma from +0.0)
#   reduce  y[o] = serial sum (add) over the positions of o, then div by count if mean;
#           calls = (add, div)
#   rows    a block-per-row kernel with its own body (softmax); calls = what it uses
#   elementwise  y[i] = calls[0](each array parameter in order: at i, or at 0 for a 0-d one;
#           then each scalar parameter but n) (the fused optimizer updates)
#   select  y[i] = calls[0](x0[o0(i)], ..., x{n-1}[o{n-1}(i)]) on the Zip form
#           (ops.forms.Zip: typed inputs and results: where, the comparisons, add_int)
#   gather  y[o] = x[an index read from an int64 ids array] (take, take_along_axis)
#   scatter y[d] = serial sum (add) of g over the positions whose id names d, in position
#           order (take_grad, take_along_axis_grad)
#   index   int64 / bool data in or out without arithmetic (argmax, index_weight)
#   random  y[i] from Philox word(s) of an int64 key at element i (and x[i]): rng_*, dropout;
#           calls = (the Philox helper, the transform)
#   conv    conv2d and its two gradients: per output a serial chain over its taps (ops.conv;
#           k_<op>_<sfx> plain, k_<op>_fma_<sfx> the fma contract)
#   pool    max / avg pooling and their gradients: windows in a defined order (ops.pool)
#   attention  qkv_attention and its gradient: per (b, h) block the composite attention's
#           steps in its order (ops.attention; k_<op>_<sfx> plain, k_<op>_fma_<sfx> fma)
#   update  an in-place optimizer update (gtensor.ops.updates): every non-const pointer is read and
#           written at element i; several buffers written (fusion keeps it alone)
#   other   anything else
class Kind(Enum):
    """What a kernel computes: one member per layout above (compared as objects, never as
    strings; ``Kind("map")`` gives the member of a name)."""

    MAP = "map"
    SCALAR = "scalar"
    ZIP = "zip"
    COPY = "copy"
    FILL = "fill"
    MATMUL = "matmul"
    REDUCE = "reduce"
    ROWS = "rows"
    ELEMENTWISE = "elementwise"
    UPDATE = "update"
    SELECT = "select"
    GATHER = "gather"
    SCATTER = "scatter"
    INDEX = "index"
    RANDOM = "random"
    CONV = "conv"
    POOL = "pool"
    ATTENTION = "attention"
    OTHER = "other"


KINDS = tuple(Kind)


@dataclass(frozen=True, eq=False)
class DeviceFn:
    """A ``__device__`` helper written in the CUDA dialect: a row body (a serial dot product, a
    serial sum) that the per-node kernels and generated (fused) kernels both call, so both
    compute with the very same code. ``calls``: the scalar functions / helpers it calls."""

    name: str
    text: str  # the full __device__ definition
    calls: tuple = ()


@dataclass(frozen=True)
class Kernel:
    """A ``__global__`` kernel: name, typed parameters and body text (CUDA dialect).

    ``kind`` (a ``Kind``) says what it computes, ``form`` (where set) is the form object
    that encodes and decodes its geometry (fusion reads index maps and statements from it),
    and ``calls`` the scalar functions
    (``gtensor.scalar.dsl.ScalarFn``) and row helpers (``DeviceFn``) it computes with; the
    CUDA module collects its ``__device__`` functions from the kernels' ``calls``.
    ``barrier`` says whether the body calls ``__syncthreads``; the simulator runs such
    kernels on fibers and all others as a plain loop over threads.
    """

    name: str
    params: tuple[Param, ...]
    body: str
    kind: Kind = Kind.OTHER
    calls: tuple = ()
    form: Any = None  # the kernel form object owning its geometry (``gtensor.ops.forms``)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            raise TypeError(f"Kernel {self.name!r}: kind {self.kind!r} is not a "
                            f"gtensor.kernels.Kind; expected one of {[k.name for k in Kind]}")

    @property
    def barrier(self) -> bool:
        """Whether the body synchronizes threads of a block."""
        return "__syncthreads" in self.body

    def signature(self) -> str:
        """The C parameter list, e.g. ``const double* x, double* y, long long n``."""
        return ", ".join(f"{p.ctype} {p.name}" for p in self.params)

    def source(self) -> str:
        """The full ``extern "C" __global__`` definition."""
        return f'extern "C" __global__ void {self.name}({self.signature()})\n{{\n{self.body}\n}}\n'


def params(spec: str) -> tuple[Param, ...]:
    """Parse ``"const double* x, double* y, long long n"`` into Params."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        ctype, _, name = part.rpartition(" ")
        out.append(Param(ctype.strip(), name.strip()))
    return tuple(out)


class KernelSet(Mapping):
    """An op's kernels for one float dtype, the only kernels its ``launch`` can name.

    Keyed by the kernel's base name (``k_<base>_<sfx>`` is keyed ``<base>``): an op's launch
    writes ``rt.launch(ks["copy"], ...)`` or, with one kernel, ``ks.only``; a key that is not
    among the op's declared kernels is a KeyError naming the op and what it has.
    """

    def __init__(self, owner: str, ft: FloatType, kernels: Sequence[Kernel]) -> None:
        self.owner, self.ft = owner, ft
        self.kernels = tuple(kernels)
        self._by: dict[str, Kernel] = {}
        end = f"_{ft.suffix}"
        for k in self.kernels:
            if not (k.name.startswith("k_") and k.name.endswith(end)):
                raise ValueError(f"op {owner}: kernel {k.name!r} is not named k_<base>{end}")
            self._by[k.name[2:-len(end)]] = k

    def __getitem__(self, base: str) -> Kernel:
        try:
            return self._by[base]
        except KeyError:
            raise KeyError(f"op {self.owner}: no kernel {base!r} for {self.ft.name}; it "
                           f"declares {sorted(self._by)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._by)

    def __len__(self) -> int:
        return len(self._by)

    @property
    def only(self) -> Kernel:
        """The op's one kernel (ValueError when it declares several)."""
        if len(self.kernels) != 1:
            raise ValueError(f"op {self.owner}: {len(self.kernels)} kernels for "
                             f"{self.ft.name} ({sorted(self._by)}); name one")
        return self.kernels[0]

    def __repr__(self) -> str:
        return f"<KernelSet of {self.owner} {self.ft.name}: {sorted(self._by)}>"
