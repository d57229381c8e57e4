"""The elementwise functions' cost on the cpu backend, side by side (bench_cpu_kernels.py
--functions): ours (correctly rounded, issue 38) against today's before it (the fdlibm-based
scalar functions of ``gtensor.scalar.transcendental``, compiled the same way as a cpu map
kernel), glibc's libm (a plain C loop calling it, compiled here) and numpy's ufuncs.

One thread (``GTENSOR_CPU_THREADS=1``); ns per element = the calling thread's CPU seconds of
one call / n (the median call of each round, the median over rounds); the engines alternate in
rounds so that the shared host's load hits them alike.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

N = 1 << 18
# function -> (input range, numpy's spelling or None)
FUNCTIONS = {
    "exp": ((-20.0, 20.0), np.exp),
    "log": ((0.01, 100.0), np.log),
    "tanh": ((-5.0, 5.0), np.tanh),
    "sigmoid": ((-10.0, 10.0), lambda x: 1.0 / (1.0 + np.exp(-x))),
    "erf": ((-4.0, 4.0), None),
    "log1p": ((-0.9, 10.0), np.log1p),
    "expm1": ((-5.0, 5.0), np.expm1),
    "sin": ((-10.0, 10.0), np.sin),
    "cos": ((-10.0, 10.0), np.cos),
}
TODAY = ("exp", "log", "tanh", "sigmoid")  # functions that existed before issue 38
GLIBC = {"exp": "exp", "log": "log", "tanh": "tanh", "erf": "erf", "log1p": "log1p",
         "expm1": "expm1", "sin": "sin", "cos": "cos"}

_LIBM_C = r"""
#include <math.h>
#define LOOP(name, T, f) \
    void name(const T* x, T* y, long n) { for (long i = 0; i < n; ++i) y[i] = f(x[i]); }
static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }
static float sigf(float v) { return 1.0f / (1.0f + expf(-v)); }
"""


def _libm() -> ctypes.CDLL:
    """glibc's functions in plain C loops (g++ -O2, calls into libm)."""
    src = _LIBM_C + "".join(f"LOOP(g_{k}_f64, double, {v})\nLOOP(g_{k}_f32, float, {v}f)\n"
                            for k, v in GLIBC.items())
    src += "LOOP(g_sigmoid_f64, double, sig)\nLOOP(g_sigmoid_f32, float, sigf)\n"
    tmp = Path(tempfile.mkdtemp())
    (tmp / "libm_loops.c").write_text(src)
    so = tmp / "libm_loops.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-fno-builtin", str(tmp / "libm_loops.c"),
                    "-o", str(so), "-lm"], check=True)
    return ctypes.CDLL(str(so))


def _today_module():
    """The fdlibm-based functions as cpu map kernels (their own C names)."""
    from gtensor.dtypes import BY_SUFFIX
    from gtensor.kernels import Kernel
    from gtensor.ops.forms import ELEMENT_COST, MAP, split_cost
    from gtensor.runtime.cpu import CpuModule
    from gtensor.scalar import transcendental as tr
    from gtensor.scalar.dsl import device_sources

    fns = {"exp": (tr.EXP_F64, tr.EXP_F32), "log": (tr.LOG_F64, tr.LOG_F32),
           "tanh": (tr.TANH_F64, tr.TANH_F32), "sigmoid": (tr.SIGMOID_F64, tr.SIGMOID_F32)}
    kernels, names = [], {}
    for name, pair in fns.items():
        for fn in pair:
            ft = BY_SUFFIX[fn.out_dt]
            kname = f"today_{fn.cname}"
            kernels.append(Kernel(kname, MAP.params(ft.ctype), MAP.cpu_body(
                fn.cname, ft.ctype, split_cost((fn,), ELEMENT_COST)), form=MAP))
            names[(name, ft.np.name)] = kname
    src = device_sources([f for pair in fns.values() for f in pair])
    return CpuModule(kernels, src + "\n" + "\n".join(k.source() for k in kernels)), names


def _cpu_ns(fn, reps: int) -> float:
    """Median thread-CPU ns per element of ``reps`` calls."""
    fn()
    ts = []
    for _ in range(reps):
        c0 = time.thread_time()
        fn()
        ts.append(time.thread_time() - c0)
    return statistics.median(ts) * 1e9 / N


def table(rounds: int, reps: int) -> list[str]:
    """The markdown rows: per function and dtype, ns per element of each engine and ratios."""
    import gtensor
    from gtensor.ops.forms import BLOCK, grid_for

    os.environ["GTENSOR_CPU_THREADS"] = "1"
    be = gtensor.backend("cpu")
    libm = _libm()
    today, tnames = _today_module()
    try:
        import scipy.special as sp

        numpy_erf = sp.erf
    except ImportError:  # scipy is optional
        numpy_erf = None
    lines = ["| function | dtype | ours (ns) | today's (ns) | ours / today's | glibc (ns) | "
             "ours / glibc | numpy (ns) | ours / numpy |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for dtype in ("float64", "float32"):
        ctype = ctypes.c_double if dtype == "float64" else ctypes.c_float
        for name, ((lo, hi), npf) in FUNCTIONS.items():
            x = np.random.default_rng(0).uniform(lo, hi, N).astype(dtype)
            y = np.empty_like(x)
            cx, cy = be.asarray(x), be.asarray(y)
            op = getattr(be, name)
            g = getattr(libm, f"g_{name}_{'f64' if dtype == 'float64' else 'f32'}")
            g.argtypes = (ctypes.POINTER(ctype), ctypes.POINTER(ctype), ctypes.c_long)
            px, py = x.ctypes.data_as(ctypes.POINTER(ctype)), y.ctypes.data_as(
                ctypes.POINTER(ctype))
            engines = {"ours": lambda op=op, cx=cx, cy=cy: op(cx, out=cy),
                       "glibc": lambda g=g, px=px, py=py: g(px, py, N)}
            if npf is None and name == "erf":
                npf = numpy_erf
            if npf is not None:
                engines["numpy"] = lambda f=npf, x=x: f(x)
            if name in TODAY:
                k = today.kernel(tnames[(name, dtype)])
                engines["today"] = lambda k=k, x=x, y=y: today.launch(k, grid_for(N), BLOCK,
                                                                      (x, y, N))
            per: dict[str, list[float]] = {k: [] for k in engines}
            for _ in range(rounds):
                for k, fn in engines.items():
                    per[k].append(_cpu_ns(fn, reps))
            med = {k: statistics.median(v) for k, v in per.items()}
            o = med["ours"]

            cells = {k: (f"{med[k]:.2f} | {o / med[k]:.2f}x") if k in med else "- | -"
                     for k in ("today", "glibc", "numpy")}
            row = (f"| {name} | {dtype} | {o:.2f} | {cells['today']} | {cells['glibc']} | "
                   f"{cells['numpy']} |")
            print(row, flush=True)
            lines.append(row)
    return lines
