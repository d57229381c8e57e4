"""``python -m gtensor.runtime.warm``: compile the cpu backend's kernels for this machine now.

The cpu backend compiles each kernel on its first use (a second or so each); a machine image, a
CI job or a cluster's workers can instead build them all (or one dtype's) ahead, several
compiler processes at a time, into the cache every later process reads
(``$GTENSOR_CACHE_DIR``, else ``~/.cache/gtensor``)::

    python -m gtensor.runtime.warm [--jobs N] [--dtype float64|float32]
"""

from __future__ import annotations

import argparse
import sys
import time

from gtensor.runtime import toolchain
from gtensor.runtime.cpu import CpuModule
from gtensor.runtime.cpu_source import cpu_kernels

SUFFIX = {"float64": "_f64", "float32": "_f32"}


def main(argv: list[str] | None = None) -> int:
    """Build the kernels (all, or one dtype's); print what was built and how long it took."""
    ap = argparse.ArgumentParser(prog="python -m gtensor.runtime.warm",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=toolchain.usable_cpus(),
                    help="compiler processes at a time (default: this process's CPUs)")
    ap.add_argument("--dtype", choices=sorted(SUFFIX), default=None,
                    help="only this dtype's kernels (default: both)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs is {args.jobs}; expected at least 1")
    others = tuple(s for d, s in SUFFIX.items() if d != args.dtype) if args.dtype else ()
    kernels = [k for k in cpu_kernels() if not k.name.endswith(others or ("\0",))]
    t0 = time.perf_counter()
    module = CpuModule(cpu_kernels())
    module.load(kernels, jobs=args.jobs)
    print(f"gtensor: {len(kernels)} cpu kernels ready in {time.perf_counter() - t0:.1f} s "
          f"({args.jobs} at a time)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
