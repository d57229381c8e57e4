"""The demo ladder: every rung that exists, in order, one verdict line each."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import ae, cnn, dp, gpt, rung_ae, rung_cnn, rung_gpt, rung_lora, rung_verify, swarm_rung


@dataclass(frozen=True)
class Verdict:
    """One rung's outcome and the numbers behind it: PASS, FAIL, or SKIP.

    SKIP: no bar was missed but ``unchecked`` names bars that could not be checked (their
    oracle is not installed), so the rung is not verified. A missed bar is FAIL regardless.
    """

    rung: str
    passed: bool
    detail: str
    unchecked: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """"PASS" (every bar checked and met), "SKIP" (none missed, some unchecked) or "FAIL"."""
        if not self.passed:
            return "FAIL"
        return "SKIP" if self.unchecked else "PASS"

    def line(self) -> str:
        """``PASS rung 1 ae: ...`` (the ladder's output format)."""
        return f"{self.status} {self.rung}: {self.detail}"


# (name, runner(out_dir, backend, progress) -> Verdict), bottom rung first; later rungs append
RUNGS: list[tuple[str, Callable[[Path, str, bool], Verdict]]] = []


def rung(name: str):
    """Register a rung runner under ``name`` (decorator)."""
    def register(fn: Callable[[Path, str, bool], Verdict]):
        RUNGS.append((name, fn))
        return fn
    return register


def _ae_rung(name: str, cfg: ae.AEConfig, out: Path, progress: bool) -> Verdict:
    """Rungs 1, 2 and 4: the autoencoder under ``cfg``, its bars as the verdict."""
    run = rung_ae.run(cfg, out, progress=progress)
    return Verdict(name, not rung_ae.missed(run.bars), run.verdict_detail(),
                   rung_ae.unchecked(run.bars))


def _device(backend: str) -> str:
    """Where rungs 2 and 4 run: cuda when the ladder runs on cuda, else the simulator."""
    return "cuda" if backend == "cuda" else "sim"


@rung("rung 1 ae")
def _ae(out: Path, backend: str, progress: bool) -> Verdict:
    return _ae_rung("rung 1 ae", ae.AEConfig(backend=backend), out / "ae", progress)


def _device_rung(name: str, engine: str) -> None:
    """Register rung ``name``: the autoencoder under ``engine`` on the device (see _device),
    written to ``OUT/<engine>``."""

    def run(out: Path, backend: str, progress: bool) -> Verdict:
        cfg = ae.AEConfig(backend=_device(backend), engine=engine)
        return _ae_rung(name, cfg, out / engine, progress)

    rung(name)(run)


_device_rung("rung 2 replay", "replay")


@rung("rung 3 lora")
def _lora(out: Path, backend: str, progress: bool) -> Verdict:
    run = rung_lora.run(rung_lora.lt.LoRAConfig(backend=backend), out / "lora", progress=progress)
    return Verdict("rung 3 lora", run.passed, run.verdict_detail())


_device_rung("rung 4 fused", "fused")


@rung("rung 5 swarm")
def _swarm(out: Path, backend: str, progress: bool) -> Verdict:
    ok, detail, unchecked = swarm_rung.ladder_verdict(out / "swarm", progress, backend)
    return Verdict("rung 5 swarm", ok, detail, unchecked)


@rung("rung 6 verify")
def _verify(out: Path, backend: str, progress: bool) -> Verdict:
    run = rung_verify.run(out / "verify", backend)
    return Verdict("rung 6 verify", run.passed, run.verdict_detail())


@rung("rung 6b dispute")
def _dispute(out: Path, backend: str, progress: bool) -> Verdict:
    try:
        import sklearn  # noqa: F401  (rung 8's digits data set)
    except ImportError:
        return Verdict("rung 6b dispute", True, "scikit-learn is not installed (its digits data "
                       "set)", ("dispute: sklearn",))
    from . import rung_dispute

    run = rung_dispute.run(out / "dispute", backend)
    return Verdict("rung 6b dispute", run.passed, run.verdict_detail())


@rung(dp.RUNG)
def _dp(out: Path, backend: str, progress: bool) -> Verdict:
    ok, detail, unchecked = dp.ladder_verdict(out / "dp", progress, backend)
    return Verdict(dp.RUNG, ok, detail, unchecked)


@rung(cnn.RUNG)
def _cnn(out: Path, backend: str, progress: bool) -> Verdict:
    ok, detail, unchecked = rung_cnn.ladder_verdict(out / "cnn", progress, backend)
    return Verdict(cnn.RUNG, ok, detail, unchecked)


@rung(cnn.RESNET_RUNG)
def _resnet(out: Path, backend: str, progress: bool) -> Verdict:
    ok, detail, unchecked = rung_cnn.ladder_verdict(out / "resnet", progress, backend, "resnet")
    return Verdict(cnn.RESNET_RUNG, ok, detail, unchecked)


@rung(gpt.RUNG)
def _gpt(out: Path, backend: str, progress: bool) -> Verdict:
    ok, detail, unchecked = rung_gpt.ladder_verdict(out / "gpt", progress, backend)
    return Verdict(gpt.RUNG, ok, detail, unchecked)


def run_ladder(out: Path, backend: str = "numpy", progress: bool = True,
               echo: Callable[[str], None] = print) -> list[Verdict]:
    """Run every rung in order (exceptions are FAILs), then echo one verdict line per rung:
    the verdicts come after every rung's progress output, together, at the end."""
    verdicts = []
    for name, fn in RUNGS:
        try:
            v = fn(out, backend, progress)
        except Exception as e:  # a crashing rung is a failing rung; the ladder goes on
            v = Verdict(name, False, f"raised {type(e).__name__}: {e}")
        verdicts.append(v)
        if progress:
            print(f"[ladder] {name}: {v.status}", file=sys.stderr, flush=True)
    for v in verdicts:
        echo(v.line())
    return verdicts
