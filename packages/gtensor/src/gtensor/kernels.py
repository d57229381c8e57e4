"""Kernel signatures: the contract between CUDA source text and the runtimes that launch it."""

from __future__ import annotations

from dataclasses import dataclass

# C types a kernel parameter may have. Pointer types carry the element dtype they accept.
POINTER_DTYPES = {
    "const double*": "float64",
    "double*": "float64",
    "const float*": "float32",
    "float*": "float32",
    "const long long*": "int64",
}
SCALAR_TYPES = ("long long", "int", "double", "float")
CTYPES = tuple(POINTER_DTYPES) + SCALAR_TYPES


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its C type (one of ``CTYPES``) and its name."""

    ctype: str
    name: str

    def __post_init__(self) -> None:
        if self.ctype not in CTYPES:
            raise ValueError(f"Param {self.name!r}: ctype {self.ctype!r} is not one of {CTYPES}")

    @property
    def is_pointer(self) -> bool:
        """True for array parameters."""
        return self.ctype.endswith("*")

    @property
    def is_const(self) -> bool:
        """True for read-only array parameters."""
        return self.ctype.startswith("const ")


@dataclass(frozen=True)
class Kernel:
    """A ``__global__`` kernel: name, typed parameters and body text (CUDA dialect).

    ``barrier`` says whether the body calls ``__syncthreads``; the simulator runs such
    kernels on fibers and all others as a plain loop over threads.
    """

    name: str
    params: tuple[Param, ...]
    body: str

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
