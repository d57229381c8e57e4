"""The ``gdemos`` command: ``gdemos ae [...]`` runs rung 1, ``gdemos ladder`` runs every rung.

Exit codes: 0 every rung PASSED with every bar checked; 1 a rung FAILED (a bar was missed or the
rung raised); 3 nothing failed but some bar was not checked (SKIP: its oracle is not installed),
so the ladder is not fully verified.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import gtensor

from . import ae, ladder, rung_ae, rung_lora, swarm_rung

EXIT_PASS, EXIT_FAIL, EXIT_UNVERIFIED = 0, 1, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gdemos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=gtensor.BACKENDS, default="numpy",
                        help="gtensor backend the tape runs on (default: numpy)")
    common.add_argument("--out", type=Path, default=Path("gdemos-out"),
                        help="directory for the summary JSON and plots (default: gdemos-out)")
    common.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = sub.add_parser("ae", parents=[common], help="rung 1: the d-64-32-64-d autoencoder")
    a.add_argument("--epochs", type=int, default=ae.AEConfig.epochs)
    a.add_argument("--seed", type=int, default=ae.AEConfig.seed)
    a.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    a.add_argument("--no-bars", action="store_true", help="skip the bar checks (sklearn)")
    a.add_argument("--engine", choices=["tape", "replay"], default="tape",
                   help="tape: rung 1, the eager tape; replay: rung 2, the step captured once "
                        "and replayed on --backend sim or cuda, checked bit-equal to the CPU "
                        "tape (default: tape)")
    rung_lora.add_parser(sub, common)
    swarm_rung.add_parser(sub, common)
    sub.add_parser("ladder", parents=[common], help="every rung, in order, one verdict each")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gdemos`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "engine", "tape") == "replay" and args.backend not in ("sim", "cuda"):
        parser.error(f"--engine replay runs on a device backend: --backend sim or cuda, "
                     f"got {args.backend}")
    if args.command == "ae":
        if args.epochs < 1:
            raise SystemExit(f"gdemos ae: --epochs is {args.epochs}; expected >= 1")
        cfg = ae.AEConfig(backend=args.backend, dtype=args.dtype, seed=args.seed,
                          epochs=args.epochs, engine=args.engine)
        run = rung_ae.run(cfg, args.out, progress=not args.no_progress, bars=not args.no_bars)
        r = run.result
        rung = "rung 2 replay" if cfg.engine == "replay" else "rung 1 ae"
        print(f"{rung}: MSE {r.initial_mse:.4g} -> {r.final_mse:.4g} in {r.steps} steps "
              f"({r.seconds:.1f} s, {cfg.backend}/{cfg.dtype})")
        for name, (ok, nums) in run.bars.items():
            print(f"  bar {name}: {rung_ae.bar_word(ok)} ({nums})")
        print(f"  summary: {run.summary_path}")
        print(f"  plot:    {run.plot_path}")
        binding = cfg.epochs == ae.AEConfig.epochs and cfg.dtype == "float64"
        if not binding:
            print("  (the bars bind the full 60-epoch float64 run; this run exits 0 either way)")
            return EXIT_PASS
        if rung_ae.missed(run.bars):
            return EXIT_FAIL
        return EXIT_UNVERIFIED if rung_ae.unchecked(run.bars) else EXIT_PASS
    if args.command == "lora":
        return rung_lora.main(args)
    if args.command == "swarm":
        return swarm_rung.main(args)
    verdicts = ladder.run_ladder(args.out, args.backend, progress=not args.no_progress)
    return ladder_exit(verdicts)


def ladder_exit(verdicts: Sequence[ladder.Verdict]) -> int:
    """Print the ladder's summary line; the exit code: 0 all PASS, 1 any FAIL, 3 some SKIP."""
    passed = sum(v.passed for v in verdicts)
    skipped = [v.rung for v in verdicts if v.status == "SKIP"]
    line = f"ladder: {passed}/{len(verdicts)} rungs passed"
    if skipped:
        line += (f"; not fully verified: {len(skipped)} with unchecked bars "
                 f"({', '.join(skipped)}; {rung_ae.ORACLE_INSTALL})")
    print(line)
    if passed < len(verdicts):
        return EXIT_FAIL
    return EXIT_UNVERIFIED if skipped else EXIT_PASS
