"""Rung outputs: the JSON summary and the loss-curve PNG (matplotlib, Agg backend)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtensor import files


def write_summary(path: Path, summary: dict[str, Any]) -> Path:
    """Write ``summary`` as indented JSON, atomically (the old file survives a failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (json.dumps(summary, indent=2) + "\n").encode()
    return files.write_atomic(path, lambda f: f.write(text))


def plot(path: Path, title: str, xlabel: str, ylabel: str, draw: Callable[[Any], None]) -> Path:
    """Write a PNG of one chart: ``draw(ax)`` puts the curves on the axes, then the labels,
    the grid and the legend are added (matplotlib, Agg backend); the file is replaced
    atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    draw(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return path


def plot_losses(path: Path, losses: list[float], epoch_mse: list[float], steps_per_epoch: int,
                title: str, bar: float | None = None,
                references: dict[str, float] | None = None) -> Path:
    """A log-scale curve of the minibatch loss per step and the full-data MSE per epoch, with
    the bar and any reference levels (``{label: value}``, e.g. an oracle's result) drawn."""

    def draw(ax: Any) -> None:
        ax.semilogy(range(1, len(losses) + 1), losses, lw=0.8, alpha=0.6, label="minibatch loss")
        ax.semilogy([(e + 1) * steps_per_epoch for e in range(len(epoch_mse))], epoch_mse, "o-",
                    ms=2.5, lw=1.2, label="full-data MSE (per epoch)")
        if bar is not None:
            ax.axhline(bar, color="k", ls="--", lw=0.8, label=f"bar {bar:g}")
        for k, (label, value) in enumerate((references or {}).items()):
            ax.axhline(value, color=f"C{k + 2}", ls=":", lw=1.0, label=f"{label} {value:.3g}")

    return plot(path, title, "step", "MSE", draw)


def bit_equal_steps(a: list[float], b: list[float]) -> int:
    """How many steps' losses of two runs are the same float64 bits."""
    import numpy as np

    x, y = np.array(a, np.float64), np.array(b, np.float64)
    n = min(len(x), len(y))
    return int(np.sum(x[:n].view(np.uint64) == y[:n].view(np.uint64)))


def plot_replay(path: Path, tape: list[float], replay: list[float], title: str,
                engine: str = "replay") -> Path:
    """Two panels: the replay's minibatch loss drawn over the CPU tape's, and their difference
    per step (zero where bit-equal); the title counts the bit-equal steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n = min(len(tape), len(replay))
    same = bit_equal_steps(tape, replay)
    steps = np.arange(1, n + 1)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.6), dpi=110, sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    top.semilogy(steps, tape[:n], lw=3.0, alpha=0.35, color="C0", label="CPU tape (numpy)")
    top.semilogy(steps, replay[:n], lw=0.8, ls="--", color="C3", label=engine)
    top.set_ylabel("minibatch MSE")
    top.set_title(f"{title}\n{same}/{n} steps bit-equal to the CPU tape")
    top.grid(True, which="both", alpha=0.3)
    top.legend()
    diff = np.array(replay[:n], np.float64) - np.array(tape[:n], np.float64)
    bottom.plot(steps, diff, lw=0.9, color="C3", label=f"{engine} - tape")
    bottom.axhline(0.0, color="k", lw=0.6)
    bottom.set_xlabel("step")
    bottom.set_ylabel("difference")
    bottom.grid(True, alpha=0.3)
    bottom.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda f: fig.savefig(f, format="png"))
    plt.close(fig)
    return path


EVERY = 10  # off a terminal, progress lines are printed at most every EVERY epochs (or steps)


def due(k: int, total: int, every: int = EVERY) -> bool:
    """Whether progress line ``k`` (1-based) of ``total`` is printed off a terminal: every
    ``every``-th one and the last."""
    return k % every == 0 or k == total


class EpochLog:
    """The progress display off a terminal: a plain line every 10 epochs and at the last one
    (tqdm's calls, no bar)."""

    def __init__(self, stream: Any, epochs: int = 0, every: int = EVERY) -> None:
        self._stream = stream
        self._postfix = ""
        self._epochs, self._every, self._seen = epochs, every, 0

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        """Remember the latest step's note (printed with the next epoch line)."""
        self._postfix = text

    def update(self, n: int = 1) -> None:
        """A step was taken (nothing printed)."""

    def set_description(self, text: str) -> None:
        """An epoch ended: print its line if it is due."""
        self._seen += 1
        if due(self._seen, self._epochs, self._every):
            print(f"{text}  {self._postfix}", file=self._stream, flush=True)

    def close(self) -> None:
        """Nothing to tear down."""


class StepLog(EpochLog):
    """``EpochLog`` for a loop of steps (tqdm's ``update`` calls): a line every 10 steps."""

    def __init__(self, stream: Any, total: int, label: str, every: int = EVERY) -> None:
        super().__init__(stream, total, every)
        self._label = label

    def update(self, n: int = 1) -> None:
        """``n`` steps were taken: print a line if one is due."""
        for _ in range(n):
            self.set_description(f"{self._label} step {self._seen + 1}/{self._epochs}")
