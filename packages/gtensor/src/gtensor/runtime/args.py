"""Launch-argument checks and the launch door shared by the sim, cpu and cuda runtimes.

A wrong scalar width or array dtype passes silently on the CPU and corrupts memory on the GPU,
so both runtimes validate every argument against the kernel signature before launching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gtensor.kernels import POINTER_DTYPES, Kernel, Param
from gtensor.messages import describe

# Exact numpy scalar type each scalar C type is marshalled as.
SCALAR_NUMPY = {
    "long long": np.int64,
    "int": np.int32,
    "double": np.float64,
    "float": np.float32,
}
_INT_BITS = {"long long": 64, "int": 32}

# CUDA launch limits (compute capability >= 3.0).
MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)

Dims = tuple[int, int, int]


def _where(kernel: Kernel, param: Param) -> str:
    """Message prefix naming the kernel and the parameter."""
    return f"kernel {kernel.name!r}: parameter {param.name!r} ({param.ctype})"


def check_pointer(
    kernel: Kernel, param: Param, value: object, is_array: Callable[[object], bool], kind: str
) -> object:
    """Check an array argument: array type, exact dtype, C-contiguous, writeable if non-const."""
    where = _where(kernel, param)
    if not is_array(value):
        raise TypeError(f"{where} expects a {kind}, got {describe(value)}")
    want = np.dtype(POINTER_DTYPES[param.ctype])
    if value.dtype != want:
        raise TypeError(f"{where} expects dtype {want}, got {describe(value)}")
    if not value.flags.c_contiguous:
        raise ValueError(f"{where} expects a C-contiguous array, got {describe(value)}")
    if not param.is_const and not getattr(value.flags, "writeable", True):
        raise ValueError(f"{where} is written by the kernel; got a read-only {describe(value)}")
    return value


def check_scalar(kernel: Kernel, param: Param, value: object) -> np.generic:
    """Check a scalar argument and return it as the parameter's exact numpy scalar type."""
    where = _where(kernel, param)
    ctype = param.ctype
    if ctype in _INT_BITS:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{where} expects an int, got {describe(value)}")
        bits = _INT_BITS[ctype]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if not lo <= int(value) <= hi:
            raise OverflowError(f"{where} must lie in [{lo}, {hi}], got {describe(value)}")
        return SCALAR_NUMPY[ctype](int(value))
    if ctype == "double":
        if not isinstance(value, float):  # np.float64 subclasses float; np.float32 does not
            raise TypeError(f"{where} expects a Python float or np.float64, got {describe(value)}")
        return np.float64(value)
    if ctype == "float":
        if not isinstance(value, np.float32):
            raise TypeError(
                f"{where} expects np.float32 (pass np.float32(x); a Python float would be "
                f"rounded silently), got {describe(value)}"
            )
        return value
    raise TypeError(f"{where}: unsupported scalar type")


def check_args(
    kernel: Kernel, args: Sequence[object], is_array: Callable[[object], bool], kind: str
) -> list[object]:
    """Validate all launch arguments; arrays are returned as-is, scalars as numpy scalars."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(
            f"kernel {kernel.name!r}: args must be a sequence, got {type(args).__name__}; "
            f"signature: {kernel.name}({kernel.signature()})"
        )
    if len(args) != len(kernel.params):
        raise TypeError(
            f"kernel {kernel.name!r} takes {len(kernel.params)} arguments, got {len(args)}; "
            f"signature: {kernel.name}({kernel.signature()})"
        )
    out: list[object] = []
    for param, value in zip(kernel.params, args):
        if param.is_pointer:
            out.append(check_pointer(kernel, param, value, is_array, kind))
        else:
            out.append(check_scalar(kernel, param, value))
    return out


def normalize_dims(kernel: Kernel, what: str, value: object, limits: Dims) -> Dims:
    """Turn an int or a tuple of up to 3 ints into (x, y, z), checked against CUDA limits."""
    items = (value,) if isinstance(value, (int, np.integer)) else value
    if not isinstance(items, tuple) or not 1 <= len(items) <= 3:
        raise TypeError(
            f"kernel {kernel.name!r}: {what} must be an int or a tuple of 1 to 3 ints, "
            f"got {value!r}"
        )
    dims = []
    for axis, item in zip("xyz", items):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"kernel {kernel.name!r}: {what}.{axis} must be an int, got {item!r}")
        dims.append(int(item))
    dims += [1] * (3 - len(dims))
    for axis, n, limit in zip("xyz", dims, limits):
        if n < 0 or n > limit:
            raise ValueError(
                f"kernel {kernel.name!r}: {what}.{axis} = {n} is outside [0, {limit}]"
            )
    return dims[0], dims[1], dims[2]


def check_launch_dims(kernel: Kernel, grid: object, block: object) -> tuple[Dims, Dims]:
    """Normalize grid and block; block dims must be positive with at most 1024 threads."""
    g = normalize_dims(kernel, "grid", grid, MAX_GRID)
    b = normalize_dims(kernel, "block", block, MAX_BLOCK)
    if min(b) < 1:
        raise ValueError(f"kernel {kernel.name!r}: block dimensions must be positive, got {b}")
    if b[0] * b[1] * b[2] > MAX_BLOCK_THREADS:
        raise ValueError(
            f"kernel {kernel.name!r}: block {b} has {b[0] * b[1] * b[2]} threads, "
            f"more than {MAX_BLOCK_THREADS}"
        )
    return g, b


class KernelTable:
    """Kernel lookup, launch checking and the launch door (``launch`` / ``prepare`` /
    ``bind``) shared by the sim, cpu and cuda modules; each defines ``_bind``."""

    array_kind = "array"

    def __init__(self, kernels: Sequence[Kernel]) -> None:
        self._kernels = {k.name: k for k in kernels}
        if len(self._kernels) != len(kernels):
            raise ValueError(f"{type(self).__name__}: duplicate kernel names")

    def kernel(self, name: str) -> Kernel:
        """The Kernel description for ``name``."""
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(f"no kernel {name!r} in module; have {sorted(self._kernels)}") from None

    def resolve(self, kernel: Kernel) -> Kernel:
        """The module's own ``kernel`` (the one it compiled): the very object, or one equal to
        it; TypeError for a name, KeyError for a kernel the module does not hold."""
        if not isinstance(kernel, Kernel):
            raise TypeError(f"{type(self).__name__}: launch takes a Kernel object (an op's "
                            f"KernelSet entry), got {kernel!r}")
        have = self._kernels.get(kernel.name)
        if have is kernel:
            return have
        if have is None:
            raise KeyError(f"no kernel {kernel.name!r} in module; have {sorted(self._kernels)}")
        if have != kernel:
            raise KeyError(f"kernel {kernel.name!r}: the module holds a different kernel of "
                           "that name (other parameters or text)")
        return have

    def _is_array(self, value: object) -> bool:
        """Whether ``value`` is an array this module's kernels can take."""
        raise NotImplementedError

    def checked(self, kernel: Kernel, grid, block,
                args: Sequence) -> tuple[Kernel, list, Dims, Dims]:
        """The kernel, its marshalled arguments and the launch dims, all checked."""
        kernel = self.resolve(kernel)
        values = check_args(kernel, args, self._is_array, self.array_kind)
        g, b = check_launch_dims(kernel, grid, block)
        return kernel, values, g, b

    def launch(self, kernel: Kernel, grid: int | tuple[int, ...], block: int | tuple[int, ...],
               args: Sequence) -> None:
        """Run ``kernel`` over ``grid`` x ``block`` threads: on sim and cpu it returns when
        the kernel finished, on cuda it is enqueued on cupy's current stream."""
        self.prepare(kernel, grid, block, args)()

    def prepare(self, kernel: Kernel, grid: int | tuple[int, ...], block: int | tuple[int, ...],
                args: Sequence) -> Callable[[], None]:
        """Check and marshal one launch once; the returned callable runs it (again and again).

        The callable keeps the argument arrays alive and reads them where they are, so a
        replayed launch sees whatever was written into them since.
        """
        return self.bind(*self.checked(kernel, grid, block, args))

    def bind(self, kernel: Kernel, values: list, g: Dims, b: Dims) -> Callable[[], None]:
        """The runnable launch of already checked arguments (see ``checked``); a launch over an
        empty grid runs nothing."""
        if min(g) == 0:
            return _nothing
        return self._bind(kernel, values, g, b)

    def _bind(self, kernel: Kernel, values: list, g: Dims, b: Dims) -> Callable[[], None]:
        """``bind`` over a non-empty grid: the runtime's own launch."""
        raise NotImplementedError


def _nothing() -> None:
    """A launch over an empty grid."""
