"""Rungs 1 and 2 as a program: train, check the bars, write the summary JSON and the loss PNG.

Rung 2 (engine ``replay``) has one more bar: its loss trace and final weights are bit-equal to
the CPU tape's (the numpy tape trained under the same configuration).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import ae, data, report

ORACLE_INSTALL = "pip install 'packages/gdemos[oracle]'"
TITLES = {"tape": "rung 1: d-64-32-64-d autoencoder",
          "replay": "rung 2: the autoencoder's step replayed on a device",
          "fused": "rung 4: the autoencoder's step fused into a few kernels"}
# A bar is (state, numbers): True met, False missed, None not checked (oracle missing).
Bar = tuple[bool | None, str]


def bar_word(ok: bool | None) -> str:
    """How a bar's state reads: ``ok``, ``MISSED`` or ``SKIP``."""
    return "SKIP" if ok is None else ("ok" if ok else "MISSED")


def missed(bars: dict[str, Bar]) -> tuple[str, ...]:
    """Names of the bars that were checked and missed."""
    return tuple(name for name, (ok, _) in bars.items() if ok is False)


def unchecked(bars: dict[str, Bar]) -> tuple[str, ...]:
    """Names of the bars that were not checked."""
    return tuple(name for name, (ok, _) in bars.items() if ok is None)


@dataclass
class AERun:
    """A finished rung-1 run: the result, the bars and the files written."""

    result: ae.AEResult
    bars: dict[str, Bar]  # name -> (True met / False missed / None unchecked, numbers)
    summary_path: Path
    plot_path: Path

    def verdict_detail(self) -> str:
        """The numbers of every bar on one line."""
        r = self.result
        bars = "; ".join(f"{name} {bar_word(ok)} ({nums})"
                         for name, (ok, nums) in self.bars.items())
        return (f"MSE {r.initial_mse:.4g} -> {r.final_mse:.4g} in {r.steps} steps, "
                f"{r.seconds:.1f} s on {r.config.backend}/{r.config.dtype}; {bars}; "
                f"plot {self.plot_path}")


def check_bars(result: ae.AEResult) -> dict[str, Bar]:
    """The MSE bar always; sklearn's bar when scikit-learn is installed, else SKIP (None)."""
    cfg = result.config
    bars = {"mse<=1e-4": (result.final_mse <= ae.MSE_BAR,
                          f"{result.final_mse:.3e} vs {ae.MSE_BAR:g}")}
    sk = sklearn_mse(cfg)
    if sk is None:
        bars["mse<=sklearn"] = (None, f"not checked: scikit-learn is not installed "
                                f"({ORACLE_INSTALL})")
    else:
        bars["mse<=sklearn"] = (result.final_mse <= sk, f"{result.final_mse:.3e} vs {sk:.3e}")
    return bars


_SKLEARN: dict[tuple, float] = {}


def sklearn_mse(cfg: ae.AEConfig) -> float | None:
    """scikit-learn's final MSE on the same problem (None without scikit-learn; once per
    configuration and process: it takes a few seconds, so it says so on stderr)."""
    key = (cfg.seed, cfg.n, cfg.noise, cfg.epochs, cfg.batch, cfg.lr, cfg.alpha)
    if key not in _SKLEARN:
        try:
            from .oracles import sklearn_ae_mse
        except ImportError:
            return None
        print(f"checking the sklearn bar: training MLPRegressor on the same data for "
              f"{cfg.epochs} epochs (a few seconds)...", file=sys.stderr, flush=True)
        x = data.manifold(cfg.seed, cfg.n, cfg.noise)
        _SKLEARN[key] = sklearn_ae_mse(x, cfg.seed, cfg.epochs, cfg.batch, cfg.lr, cfg.alpha)
    return _SKLEARN[key]


_CPU_RUNS: dict[ae.AEConfig, ae.AEResult] = {}


def train(cfg: ae.AEConfig, make_bar=None, ctl: ae.Control | None = None) -> ae.AEResult:
    """``ae.train``, remembering numpy-tape runs (rung 2's reference, run once per process)."""
    if ctl is not None:  # a logged, checkpointed or resumed run: always run it
        return ae.train(cfg, make_bar, ctl)
    if cfg in _CPU_RUNS:
        return _CPU_RUNS[cfg]
    result = ae.train(cfg, make_bar)
    if cfg.engine == "tape" and cfg.backend == "numpy":
        _CPU_RUNS[cfg] = result
    return result


def cpu_tape_bar(result: ae.AEResult) -> Bar:
    """Rung 2's bar: the loss trace and every final weight bit-equal to the CPU tape's."""
    ref = train(replace(result.config, engine="tape", backend="numpy"))
    same_losses = np.array(ref.losses).tobytes() == np.array(result.losses).tobytes()
    diff = [k for k, (a, b) in enumerate(zip(ref.params, result.params))
            if a.tobytes() != b.tobytes()]
    ok = same_losses and not diff and len(ref.params) == len(result.params)
    nums = (f"{len(result.losses)} losses and {len(result.params)} weight arrays bit-equal"
            if ok else f"losses equal: {same_losses}; weights differing: {diff}")
    return ok, nums


def run(cfg: ae.AEConfig, out: Path, progress: bool = True, bars: bool = True,
        ctl: ae.Control | None = None) -> AERun:
    """Train under ``cfg`` with an optional tqdm bar, check the bars, write the outputs
    (``ctl``: gverify's run log, checkpoints, resume)."""
    make_bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        def make_bar(total: int, epochs: int):
            return tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True,
                        desc=f"epoch 0/{epochs}")
    elif progress:  # not a terminal (a log file, CI): a plain line every 10 epochs
        def make_bar(total: int, epochs: int):
            return report.EpochLog(sys.stderr, epochs)
    result = train(cfg, make_bar) if ctl is None else train(cfg, make_bar, ctl)
    checked = check_bars(result) if bars else {}
    if cfg.engine in ("replay", "fused"):
        checked["weights==cpu tape"] = cpu_tape_bar(result)
    summary = result.summary()
    if ctl is not None:
        summary["verify"] = {"log": None if ctl.log is None else str(ctl.log),
                             "checkpoint_every": ctl.checkpoint_every,
                             "resumed_from": None if ctl.resume is None else str(ctl.resume)}
    summary["bars"] = {k: {"passed": ok, "checked": ok is not None, "numbers": nums}
                       for k, (ok, nums) in checked.items()}
    sk = sklearn_mse(cfg) if bars else None
    title = f"{TITLES[cfg.engine]}, d={data.DIM} ({cfg.backend}, {cfg.dtype})"
    if cfg.engine in ("replay", "fused"):  # the claim is bit-equality: plot that
        ref = train(replace(cfg, engine="tape", backend="numpy"))  # cached by cpu_tape_bar
        plot = report.plot_replay(out / "ae_loss.png", ref.losses, result.losses, title,
                                  cfg.engine)
        summary["bit_equal_steps"] = report.bit_equal_steps(ref.losses, result.losses)
    else:
        plot = report.plot_losses(out / "ae_loss.png", result.losses, result.epoch_mse,
                                  -(-cfg.n // cfg.batch), title, ae.MSE_BAR,
                                  {} if sk is None else {"scikit-learn's final MSE": sk})
    summary["plot"] = str(plot)
    path = report.write_summary(out / "ae_summary.json", summary)
    return AERun(result, checked, path, plot)
