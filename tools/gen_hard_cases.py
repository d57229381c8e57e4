"""Select round-to-nearest hard cases from CORE-MATH's published worst cases (``*.wc`` files).

    python tools/gen_hard_cases.py --core-math PATH erf log1p ...

CORE-MATH (https://core-math.gitlabpages.inria.fr/, MIT licence) publishes, per function, the
binary64 inputs whose exact value has at least ~40 identical bits after the rounding bit:
near a floating-point number (hard for directed roundings) or near a midpoint (hard for
round-to-nearest). This keeps the latter: each input's exact value is computed with mpmath at
320 bits and kept when it lies within 2^-32 ulp of a midpoint; up to ``--keep`` of them,
spread evenly over the sorted list, are written (both signs where the file has them) to
``packages/gtensor/tests/crmath_hard.py`` together with the near-midpoint distance. ``PATH``
is a clone of CORE-MATH (a bare git directory is read with ``git show HEAD:...``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import mpmath as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/gtensor/tests"))
from cr_oracle import FUNCTIONS  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "packages/gtensor/tests/crmath_hard.py"
FILES = {"erf": "erf/erf.wc", "log1p": "log1p/log1p.wc", "expm1": "expm1/expm1.wc",
         "sin": "sin/sin.wc", "cos": "cos/cos.wc", "exp": "exp/exp.wc", "log": "log/log.wc",
         "tanh": "tanh/tanh.wc"}


def _read(root: str, rel: str, extra: str | None = None) -> str:
    """The .wc file's text: from ``extra/<name>.wc`` when given and present (a copy of part of
    a list, where a clone lacks the file), else the clone's file or its git blob."""
    if extra and (Path(extra) / Path(rel).name).exists():
        return (Path(extra) / Path(rel).name).read_text()
    path = Path(root) / "src/binary64" / rel
    if path.exists():
        return path.read_text()
    return subprocess.run(["git", "-C", root, "show", f"HEAD:src/binary64/{rel}"],
                          check=True, capture_output=True, text=True).stdout


def _inputs(text: str) -> list[float]:
    out = []
    for line in text.splitlines():
        word = line.split("#")[0].strip().split()
        if word:
            try:
                out.append(float.fromhex(word[0]))
            except ValueError:
                continue
    return out


def _midpoint_distance(v: mp.mpf) -> float:
    """|v - nearest binary64 midpoint| in ulps of v (normal range)."""
    man, exp = mp.frexp(abs(v))  # v = man 2^exp, man in [1/2, 1)
    scaled = man * mp.mpf(2) ** 53  # the ulp is 1 here
    frac = scaled - mp.floor(scaled)
    return float(abs(frac - mp.mpf(0.5)))


def select(name: str, root: str, keep: int, extra: str | None = None) -> list[tuple[str, float]]:
    """The kept (x as hex, log2 of the midpoint distance in ulps), sorted by x."""
    f = FUNCTIONS[name]
    xs = sorted(set(_inputs(_read(root, FILES[name], extra))))
    hard = []
    with mp.workprec(320):
        for x in xs:
            v = f(mp.mpf(x))
            if v == 0 or not mp.isfinite(v) or isinstance(v, mp.mpc):
                continue
            d = _midpoint_distance(v)
            if d < 2.0 ** -32:
                hard.append((x, d))
    if len(hard) > keep:
        step = len(hard) / keep
        hard = [hard[int(i * step)] for i in range(keep)]
    print(f"{name}: {len(xs)} worst cases, kept {len(hard)} near-midpoint ones")
    return [(x.hex(), float(mp.log(d, 2)) if d else -999.0) for x, d in hard]


def search(name: str, lo: float, hi: float, n: int, seed: int, keep: int):
    """Generated near-halfway cases (for functions without a published list): ``n`` seeded
    random doubles in [lo, hi], the distance of f(x) to the nearest midpoint estimated from
    our fast double-double (2^-70 accurate, far finer than the 2^-20 ulp kept), the closest
    ``keep`` confirmed with mpmath."""
    import numpy as np
    from gtensor.scalar import crmath

    rng = np.random.default_rng(seed)
    hooks = crmath.BY_NAME[name].module
    best: list[tuple[float, float]] = []
    for _ in range(n // 1_000_000):
        x = rng.uniform(lo, hi, 1_000_000)
        h, low, _, live = hooks.fast_dd(x)
        with np.errstate(all="ignore"):
            _, e = np.frexp(h)
            ulp = np.ldexp(1.0, e - 53)
            frac = (np.abs(h) - np.abs(h) // ulp * ulp + np.copysign(low, h)) / ulp
            dist = np.abs(np.mod(frac, 1.0) - 0.5)
        idx = np.argsort(np.where(live, dist, 1.0))[:keep]
        best += [(float(dist[i]), float(x[i])) for i in idx]
    best = sorted(best)[:keep]
    f = FUNCTIONS[name]
    out = []
    with mp.workprec(320):
        for _, x in sorted(best, key=lambda t: t[1]):
            d = _midpoint_distance(f(mp.mpf(x)))
            out.append((x.hex(), float(mp.log(d, 2)) if d else -999.0))
    print(f"{name}: searched {n} inputs, kept {len(out)} (closest 2^{min(d for _, d in out):.1f}"
          " ulp)")
    return out


def main(argv: list[str] | None = None) -> int:
    """Write crmath_hard.py from the named functions' lists (merging with what it holds)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core-math", help="a CORE-MATH clone")
    ap.add_argument("--keep", type=int, default=160)
    ap.add_argument("--wc-dir", help="a folder of <name>.wc files taking precedence (partial "
                    "copies of lists a clone lacks)")
    ap.add_argument("--search", nargs=3, metavar=("NAME", "LO", "HI"),
                    help="generate near-halfway cases of NAME in [LO, HI] instead")
    ap.add_argument("--n", type=int, default=20_000_000, help="inputs searched (--search)")
    ap.add_argument("names", nargs="*", help=f"some of {sorted(FILES)}")
    args = ap.parse_args(argv)
    bad = sorted(set(args.names) - set(FILES))
    if bad:
        ap.error(f"unknown functions {bad}; known: {sorted(FILES)}")
    table: dict[str, list] = {}
    if OUT.exists():
        scope: dict = {}
        exec(OUT.read_text(), scope)  # our own generated file: plain literals
        table = {k: list(v) for k, v in scope["HARD"].items()}
    for name in args.names:
        table[name] = select(name, args.core_math, args.keep, args.wc_dir)
    if args.search:
        name, lo, hi = args.search[0], float(args.search[1]), float(args.search[2])
        table[name] = search(name, lo, hi, args.n, 38, 40)
    lines = ['"""Round-to-nearest hard cases of binary64 functions, from CORE-MATH\'s worst cases.',
             "",
             "Selected by tools/gen_hard_cases.py (do not edit): inputs x whose exact f(x) lies",
             "within 2^-32 ulp of a midpoint between two doubles (the second item: log2 of that",
             "distance in ulps). Source: CORE-MATH, https://core-math.gitlabpages.inria.fr/",
             "(src/binary64/<f>/<f>.wc, MIT licence; exp and log1p: part of the list);",
             "sigmoid (no published list): the closest of 2e7 seeded random inputs (--search).",
             '"""', "", "HARD = {"]
    for name in sorted(table):
        lines.append(f'    "{name}": [')
        lines += [f'        ("{x}", {d:.1f}),' for x, d in table[name]]
        lines.append("    ],")
    lines.append("}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
