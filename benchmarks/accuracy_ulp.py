"""Measure the ulp error of gtensor's scalar-language exp/log/expm1/tanh/sigmoid against mpmath.

For each function and dtype, ``--n`` seeded inputs spread over the whole domain (the sampler
of ``packages/gtensor/tests/test_transcendental.py``: log-uniform magnitudes, both signs,
uniform ranges, the edges, subnormal inputs and results) are evaluated with the numpy
reference (``fn.numpy``, bit-identical to the device code) and compared with the exact value
computed by mpmath at 160 bits. The ulp definition is the test file's: |y - v| / ulp(v), ulp(v)
the spacing of the target format at |v|, the fixed subnormal spacing below the normal range.

    python benchmarks/accuracy_ulp.py --n 1000000 --procs 2

prints a table and writes it, with the command, to benchmarks/results/ulp.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "packages" / "gtensor" / "tests" / "test_transcendental.py"
sys.path.insert(0, str(ROOT / "packages" / "gtensor" / "src"))

_tt = None


def tt():
    """The test module (sampler, exact functions, ulp definition), loaded once per process."""
    global _tt
    if _tt is None:
        spec = importlib.util.spec_from_file_location("gt_test_transcendental", TESTS)
        _tt = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_tt)
    return _tt


def _chunk(args):
    name, dtname, xs = args
    dtype = np.float64 if dtname == "float64" else np.float32
    t = tt()
    fn = t.FUNCS[name][1] if dtype == np.float64 else t.FUNCS[name][2]
    ys = fn.numpy(xs)
    err = t.ulp_errors(name, dtype, xs, ys)
    i = int(np.argmax(err))
    return float(err.max()), float(err.sum()), int((err > 0.5).sum()), len(err), float(xs[i])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="inputs per function and dtype")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--funcs", default="exp,log,expm1,tanh,sigmoid")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ulp.md"))
    a = ap.parse_args()

    rows = []
    t0 = time.time()
    with mp.Pool(a.procs) as pool:
        for name in a.funcs.split(","):
            for dtype in (np.float64, np.float32):
                dtname = np.dtype(dtype).name
                xs = tt().sample_inputs(name, dtype, a.n, seed=a.seed)
                chunks = [(name, dtname, c) for c in np.array_split(xs, 8 * a.procs)]
                res = pool.map(_chunk, chunks)
                mx = max(r[0] for r in res)
                worst_x = max(res, key=lambda r: r[0])[4]
                mean = sum(r[1] for r in res) / len(xs)
                frac = sum(r[2] for r in res) / len(xs)
                bound = tt().FUNCS[name][3]
                rows.append((name, dtname, len(xs), mx, mean, frac, worst_x, bound))
                print(
                    f"{name:8s} {dtname:8s} n={len(xs):8d} max={mx:.4f} mean={mean:.4f} "
                    f"not-correctly-rounded={frac:.4%} worst x={worst_x!r} "
                    f"[{time.time() - t0:.0f}s]",
                    flush=True,
                )

    cmd = "python benchmarks/accuracy_ulp.py " + " ".join(sys.argv[1:])
    lines = [
        "# ulp error of the scalar-language transcendentals",
        "",
        "Exact values: mpmath at 160 bits. ulp(v) = spacing of the target format at |v| "
        "(fixed subnormal spacing 2^-1074 / 2^-149 below the normal range). "
        "Inputs: seeded sample over the whole domain (log-uniform magnitudes, both signs, "
        "edges, subnormals; see `sample_inputs` in packages/gtensor/tests/test_transcendental.py). "
        "The numpy reference is bit-identical to the device code.",
        "",
        f"Command: `{cmd.strip()}` (seed {a.seed}, {a.procs} processes, {time.time() - t0:.0f} s)",
        "",
        "| function | dtype | inputs | max ulp | mean ulp | not correctly rounded | "
        "worst input | bound |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for name, dtname, n, mx, mean, frac, wx, bound in rows:
        lines.append(
            f"| {name} | {dtname} | {n} | {mx:.4f} | {mean:.4f} | {frac:.3%} | "
            f"`{wx!r}` | {bound:g} |"
        )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
