"""Device check: rung-1 AE training on cuda vs the numpy tape, bitwise, plus step times.

Trains the same seeded autoencoder for a few epochs on every backend asked for, compares the
loss trace and the final weights bitwise against numpy, and prints one line per backend.
Usage: python benchmarks/device_ae_parity.py [--epochs 3] [--backends cuda,sim]
"""

from __future__ import annotations

import argparse

import numpy as np
from gdemos import ae
from gtensor.testing import bits_equal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--backends", default="cuda")
    parser.add_argument("--dtype", default="float64")
    args = parser.parse_args()
    ref = ae.train(ae.AEConfig(backend="numpy", dtype=args.dtype, epochs=args.epochs))
    ok = True
    for name in args.backends.split(","):
        got = ae.train(ae.AEConfig(backend=name, dtype=args.dtype, epochs=args.epochs))
        same_loss = bits_equal(np.array(ref.losses), np.array(got.losses))
        same_w = all(bits_equal(a, b) for a, b in zip(ref.params, got.params, strict=True))
        ok &= same_loss and same_w
        print(f"{name}: {got.steps} steps, loss trace bitwise={same_loss}, "
              f"final weights bitwise={same_w}, final MSE {got.final_mse:.6e}, "
              f"{got.seconds / got.steps * 1e3:.2f} ms/step vs numpy "
              f"{ref.seconds / ref.steps * 1e3:.2f} ms/step")
    print(f"ae {'BITWISE EQUAL' if ok else 'MISMATCH'} ({args.dtype}, {args.epochs} epochs)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
