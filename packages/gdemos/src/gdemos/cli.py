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

from . import (
    ae,
    dp,
    ladder,
    rung_ae,
    rung_cnn,
    rung_dispute,
    rung_gpt,
    rung_lora,
    rung_verify,
    swarm_rung,
)

EXIT_PASS, EXIT_FAIL, EXIT_UNVERIFIED = 0, 1, 3
MAX_EPOCHS = 10_000
DESCRIPTION = """\
The grad demo ladder: programs trained through the gtape autograd tape, each checked by an
independent oracle. 'gdemos ladder' runs every rung with one verdict line each; the other
commands run one rung. 'gdemos COMMAND --help' lists a command's options.

exit codes: 0 every rung passed with every bar checked; 1 a rung failed (a bar missed, or it
raised); 2 a usage error; 3 nothing failed but some bar was not checked (its oracle is not
installed), so the run is not fully verified."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gdemos", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=("auto", *gtensor.BACKENDS), default="auto",
                        help="gtensor backend the tape runs on; auto: cpu (the compiled exact "
                             "kernels) where a C++ compiler is found, else numpy (the reference "
                             "definition); every backend gives the same bits (default: auto)")
    common.add_argument("--out", type=Path, default=Path("gdemos-out"),
                        help="directory for the summary JSON and plots (default: gdemos-out)")
    common.add_argument("--no-progress", action="store_true",
                        help="no progress display (off a terminal it is a line every 10 "
                             "epochs or steps)")
    common.add_argument("--verbose", action="store_true",
                        help="let Dask's own logging through (default: errors only)")
    a = sub.add_parser("ae", parents=[common], help="rung 1: the d-64-32-64-d autoencoder")
    a.add_argument("--epochs", type=int, default=ae.AEConfig.epochs,
                   help=f"passes over the {ae.AEConfig.n} points, "
                        f"{ae.AEConfig.n // ae.AEConfig.batch} minibatch steps each (1 to "
                        f"{MAX_EPOCHS}; default: {ae.AEConfig.epochs}; the bars bind the full run)")
    a.add_argument("--seed", type=int, default=ae.AEConfig.seed,
                   help="seed of the data, the initial weights and the minibatch order "
                        f"(default: {ae.AEConfig.seed})")
    a.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="the tape's dtype (default: float64)")
    a.add_argument("--inner", choices=["plain", "fma"], default="plain",
                   help="the inner-product contract of every matmul (default: plain; fma: "
                        "one fused multiply-add per term, docs/semantics.md)")
    a.add_argument("--no-bars", action="store_true",
                   help="skip the bar checks (the MSE bar and scikit-learn's)")
    a.add_argument("--engine", choices=["tape", "replay", "fused"], default="tape",
                   help="tape: rung 1, the eager tape; replay: rung 2, the step captured once "
                        "and replayed on --backend sim or cuda; fused: rung 4, that step fused "
                        "into a few generated kernels; both checked bit-equal to the CPU tape "
                        "(default: tape)")
    a.add_argument("--log", type=Path, default=None,
                   help="write a gverify run log (step, loss bits, digest of the parameters "
                        "and Adam state) to FILE; with --checkpoint-every: default "
                        "OUT/ae_log.jsonl")
    a.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="write a checkpoint every K steps under OUT/checkpoints (parameters, "
                        "Adam state, the minibatch order's RNG state, the step; named in the "
                        "log)")
    a.add_argument("--resume", type=Path, default=None, metavar="DIR",
                   help="continue from checkpoint DIR (its configuration: seed, epochs, lr...; "
                        "--backend and --engine from this command): bit-identical to the "
                        "uninterrupted run")
    rung_lora.add_parser(sub, common)
    swarm_rung.add_parser(sub, common)
    rung_verify.add_parser(sub, common)
    rung_dispute.add_parser(sub, common)
    dp.add_parser(sub, common)
    rung_cnn.add_parser(sub, common)
    rung_gpt.add_parser(sub, common)
    sub.add_parser("ladder", parents=[common], help="every rung, in order, one verdict each")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gdemos`` console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    from . import swarm_dask

    swarm_dask.set_verbose(getattr(args, "verbose", False))
    if getattr(args, "backend", None) == "auto":
        args.backend = gtensor.host_backend()
    _check_common(parser, args)
    engine = getattr(args, "engine", "tape")
    allowed = {"replay": ("sim", "cuda", "cpu"), "fused": ("sim", "cuda")}.get(engine)
    if allowed and args.backend not in allowed:
        parser.error(f"--engine {engine} runs on --backend {' or '.join(allowed)}, "
                     f"got {args.backend}")
    if args.command == "ae":
        cfg = ae.AEConfig(backend=args.backend, dtype=args.dtype, seed=args.seed,
                          epochs=args.epochs, engine=args.engine, inner=args.inner)
        ctl, cfg = _control(parser, args, cfg)
        run = rung_ae.run(cfg, args.out, progress=not args.no_progress, bars=not args.no_bars,
                          ctl=ctl)
        r = run.result
        rung = {"tape": "rung 1 ae", "replay": "rung 2 replay", "fused": "rung 4 fused"}[
            cfg.engine]
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
    if args.command == "verify":
        return rung_verify.main(args)
    if args.command == "dispute":
        return rung_dispute.main(args)
    if args.command == "dp":
        return dp.main(args)
    if args.command == "cnn":
        return rung_cnn.main(args)
    if args.command == "gpt":
        return rung_gpt.main(args)
    verdicts = ladder.run_ladder(args.out, args.backend, progress=not args.no_progress)
    return ladder_exit(verdicts)


def _control(parser: argparse.ArgumentParser, args: argparse.Namespace,
             cfg: ae.AEConfig) -> tuple[ae.Control | None, ae.AEConfig]:
    """The verification options of ``gdemos ae`` (exit 2 on a bad one); on --resume the
    configuration is the checkpoint's, with this command's backend and engine."""
    k = args.checkpoint_every
    if k < 0:
        parser.error(f"--checkpoint-every is {k}; expected an int >= 1 (or 0: none)")
    if args.log is None and not k and args.resume is None:
        return None, cfg
    if args.resume is not None:
        from dataclasses import replace

        from gverify import CheckpointError, read_checkpoint

        try:
            saved = read_checkpoint(args.resume).meta.get("config")
        except (CheckpointError, OSError) as e:
            parser.error(f"--resume {args.resume}: {e}")
        if not isinstance(saved, dict):
            parser.error(f"--resume {args.resume}: not a checkpoint of gdemos ae (no config)")
        cfg = replace(ae.AEConfig(**saved), backend=cfg.backend, engine=cfg.engine)
    log = args.log
    if log is None and k:
        log = args.out / "ae_log.jsonl"
    return ae.Control(log=log, checkpoint_every=k, checkpoint_dir=args.out / "checkpoints",
                      resume=args.resume), cfg


def _check_common(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors found before any training (exit 2 with one line): a bad epoch count or
    seed, an output directory that cannot be written, a backend this machine cannot run."""
    epochs = getattr(args, "epochs", None)
    if args.command == "ae" and not 1 <= epochs <= MAX_EPOCHS:
        parser.error(f"--epochs is {epochs}; expected 1 to {MAX_EPOCHS}")
    seed = getattr(args, "seed", None)
    if args.command == "ae" and seed < 0:
        parser.error(f"--seed is {seed}; expected an int >= 0")
    out = getattr(args, "out", None)
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            probe = out / ".gdemos-write-check"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            parser.error(f"--out {out}: cannot write there ({e.strerror or e})")
    backend = getattr(args, "backend", None)
    if backend is not None:
        try:
            be = gtensor.backend(backend)
            if hasattr(be, "module"):
                be.module  # noqa: B018 - compiles (or finds cached) kernels: needs the compiler
        except (RuntimeError, OSError) as e:
            parser.error(f"--backend {backend} cannot run here: {str(e).splitlines()[0]}")


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
