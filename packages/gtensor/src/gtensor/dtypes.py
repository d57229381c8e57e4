"""The element types of op inputs: floats (the tape's dtype), int64 indices, bool masks.

A float dtype is one of the two supported widths; each is one ``FloatType`` object holding its
numpy dtype, its kernel-name suffix, its C type and its C literals, so no table elsewhere
spells them again; op kernel builders take one (``Op.kernels(F64)``).
Index inputs are always int64 and mask inputs bool (one byte): ``INDEX`` and ``MASK``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The C type of every element type an op input or kernel parameter can have (kernel
# signatures, the scalar language and the generated C of fusion and gemit all read it here).
CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float",
          np.dtype(np.int64): "long long", np.dtype(np.bool_): "bool"}


@dataclass(frozen=True, eq=False)
class FloatType:
    """One supported float width: its numpy dtype, its kernel-name suffix ("f64", also the
    scalar language's name of the dtype) and its C type ("double"); compares by identity
    (there are exactly two: ``F64`` and ``F32``).

    >>> F32.ctype, F32.suffix, F32.kernel("exp"), F32.literal(0.5)
    ('float', 'f32', 'k_exp_f32', '(0x1.0000000000000p-1f)')
    """

    np: np.dtype
    suffix: str

    @property
    def name(self) -> str:
        """The numpy name ("float64")."""
        return self.np.name

    @property
    def ctype(self) -> str:
        """The C type ("double", "float")."""
        return CTYPES[self.np]

    @property
    def type(self) -> type:
        """The numpy scalar type (``np.float64``)."""
        return self.np.type

    def scalar(self, value: object) -> np.floating:
        """``value`` as a numpy scalar of this dtype (numpy's one rounding of a Python float)."""
        return self.np.type(value)

    def kernel(self, base: str) -> str:
        """The name of the ``__global__`` kernel ``base`` for this dtype: ``k_<base>_<sfx>``."""
        return f"k_{base}_{self.suffix}"

    def fn(self, base: str) -> str:
        """The name of the ``__device__`` function ``base`` for this dtype: ``gt_<base>_<sfx>``."""
        return f"gt_{base}_{self.suffix}"

    def literal(self, value: float) -> str:
        """An exact C literal of ``value`` rounded to this dtype: hex floats, NaN and the
        infinities by their bit patterns."""
        value = float(self.np.type(value))
        if value != value:
            return ("__longlong_as_double(0x7ff8000000000000LL)" if self.np.itemsize == 8
                    else "__int_as_float(0x7fc00000)")
        if value in (float("inf"), float("-inf")):
            sign = "" if value > 0 else "-"
            inf = ("__longlong_as_double(0x7ff0000000000000LL)" if self.np.itemsize == 8
                   else "__int_as_float(0x7f800000)")
            return f"({sign}{inf})"
        text = float.hex(value)
        return f"({text})" if self.np.itemsize == 8 else f"({text}f)"

    def __repr__(self) -> str:
        return f"<FloatType {self.name}>"


F64 = FloatType(np.dtype(np.float64), "f64")
F32 = FloatType(np.dtype(np.float32), "f32")
FLOATS = (F64, F32)
BY_SUFFIX = {t.suffix: t for t in FLOATS}
BY_DTYPE = {t.np: t for t in FLOATS}
BY_CTYPE = {t.ctype: t for t in FLOATS}

SUPPORTED = ("float64", "float32")
# dtype objects hash fast; ``dtype.name`` is slow on numpy 2, and this is on every op call
SUPPORTED_DTYPES = frozenset(np.dtype(n) for n in SUPPORTED)
INDEX = np.dtype(np.int64)  # the dtype of index inputs (take's ids, labels, argmax's result)
MASK = np.dtype(np.bool_)  # the dtype of mask inputs (where's cond, comparison results)
# What an op input (``Op.types``) or result (``Op.out_type``) is: the op's float dtype, an
# int64 index array or a bool mask; or ANY: an array of any of those dtypes (the movement ops:
# they move elements without arithmetic), the result of the dtype of the ANY inputs (one); or
# NUMBER: a float or an int64 array (the comparisons: ids compared like floats), one dtype
# for all NUMBER inputs of a call.
FLOAT, INT, BOOL, ANY, NUMBER = "float", "int64", "bool", "any", "number"
TYPE_DTYPES = {INT: INDEX, BOOL: MASK}
TYPED_DTYPES = frozenset((INDEX, MASK))
ARRAY_DTYPES = SUPPORTED_DTYPES | TYPED_DTYPES


def float_type(dt: object) -> FloatType:
    """The ``FloatType`` of a float32/float64 dtype (or of an array's dtype)."""
    return BY_DTYPE[np.dtype(getattr(dt, "dtype", dt))]


def of(x: np.ndarray) -> FloatType:
    """The ``FloatType`` of a float array (the hot-path lookup: ``x.dtype`` only)."""
    return BY_DTYPE[x.dtype]


def normalize(dtype: object, where: str = "asarray", typed: bool = False) -> np.dtype:
    """``float32``/``float64`` in any spelling numpy accepts (with ``typed``, also int64 and
    bool); TypeError for anything else."""
    accepted = "float32, float64, int64 or bool" if typed else "float32 or float64"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{where}: dtype {dtype!r} is not a dtype; expected {accepted}") from None
    if dt in SUPPORTED_DTYPES or (typed and dt in TYPED_DTYPES):
        return dt
    raise TypeError(f"{where}: dtype {dt.name} is not supported; expected {accepted}")


def infer(x: object, dtype: object) -> np.dtype:
    """The dtype ``asarray`` gives ``x``.

    Rule: an explicit dtype wins (float32, float64, or int64 / bool for index and mask arrays);
    float32/float64 inputs keep their dtype; every other real input (bool, integers, float16,
    Python numbers, lists) becomes float64 (exact for integers of magnitude below 2**53).
    Complex, object and string inputs are rejected.
    """
    if dtype is not None:
        return normalize(dtype, typed=True)
    dt = getattr(x, "dtype", None)
    if dt is None:
        dt = np.asarray(x).dtype
    dt = np.dtype(dt)
    if dt.name in SUPPORTED:
        return dt
    if dt.kind in "biuf":
        return np.dtype(np.float64)
    raise TypeError(f"asarray: cannot convert data of dtype {dt} to a float array "
                    "(expected real numbers: bool, int or float)")


def round_scalar(s: object, dt: np.dtype) -> np.floating:
    """The number ``s`` (int or float of any size) rounded ONCE, to nearest even, to ``dt``.

    Python ints are converted exactly (never through float64 first, which would round twice on
    a float32 tape: 2**60 + 2**36 + 1 must give the float32 nearest to it, not to 2**60 + 2**36).
    """
    T = np.dtype(dt).type
    if isinstance(s, (bool, np.bool_)):
        return T(int(s))
    with np.errstate(over="ignore"):
        if isinstance(s, (int, np.integer)):
            return T(_round_int(int(s), np.finfo(T).nmant + 1)) if s else T(0.0)
        return T(s)


def _round_int(n: int, bits: int) -> float:
    """``n`` rounded to ``bits`` significant bits (ties to even), as an exact Python float (or
    +-inf past float64's range; the cast to the target dtype then overflows the same way)."""
    sign, m = (-1, -n) if n < 0 else (1, n)
    extra = m.bit_length() - bits
    if extra > 0:
        q, r = divmod(m, 1 << extra)
        half = 1 << (extra - 1)
        if r > half or (r == half and q & 1):
            q += 1
        m = q << extra
    try:
        return sign * float(m)  # exact: m has at most `bits` significant bits
    except OverflowError:
        return sign * float("inf")


# The floating-point environment: IEEE with subnormals (no flush-to-zero). The sim and cpu
# kernels install it for every launch; numpy computes in whatever mode the thread is in, so
# the numpy paths check it first (one multiplication: the smallest subnormal times one is zero
# exactly when inputs or results are flushed).
TINY, ONE = np.float64(5e-324), np.float64(1.0)
FTZ_MESSAGE = ("this thread flushes subnormal numbers to zero (the FTZ/DAZ bits of the "
               "floating-point control register are on, typically because a library built "
               "with -ffast-math was loaded), so numpy's results would not be the reference "
               "bits; refusing. Run without that library, or clear FTZ/DAZ (MXCSR bits 15 and 6) "
               "in this thread")


def check_no_ftz(where: str) -> None:
    """FloatingPointError naming ``where`` when this thread flushes subnormals to zero."""
    if TINY * ONE == 0.0:
        raise FloatingPointError(f"{where}: {FTZ_MESSAGE}")
