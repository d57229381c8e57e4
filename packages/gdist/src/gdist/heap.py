"""Keep a worker's freed arrays for reuse: glibc malloc's thresholds, set once per process.

Dask's nanny starts every worker process with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``, to return memory to the system eagerly). With that
variable set, glibc also stops adapting its mmap threshold, so every array over 128 KB -- each
gradient of a microbatch, each sum of the tree -- is a fresh ``mmap`` whose pages fault in
one by one and go back to the system when freed: measured on the 2-core AMD EPYC host, a
numpy add of 80,000 float64 took 280-320 us in such a worker against 22 us in the driver, and
21 us in the same worker after ``keep_freed_memory()``. A replica allocates the same arrays
every step, so the worker keeps them: blocks up to ``MMAP_MAX`` come from the heap and freed
memory is kept up to ``TRIM_AT``. No value changes; a worker's resident memory stays at its
high-water mark up to that much.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_MAX = 32 << 20  # glibc's largest accepted mmap threshold on 64-bit (32 MiB)
TRIM_AT = 256 << 20  # freed memory kept before the heap is trimmed


def keep_freed_memory() -> bool:
    """Set this process's glibc malloc to serve arrays up to MMAP_MAX from the heap and to
    keep freed memory up to TRIM_AT; True when set (False off Linux / glibc: nothing done)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_AT))
