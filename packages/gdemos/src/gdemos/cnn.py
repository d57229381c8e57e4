"""Rung 8's training definition: a LeNet-style CNN (or rung 8b's small ResNet) on sklearn's 8x8
digits, Adam, int labels.

Data: ``load_digits`` (1,797 images scaled to [0, 1], shape (N, 1, 8, 8)), split 80/20 by
``train_test_split(stratify=labels, random_state=seed)``: 1,437 training and 360 test images.
Model (``gtape.nn``, torch's names and initialisations drawn from ``gtape.rng``)::

    Conv2d(1, c1, 3, padding=1) - ReLU - MaxPool2d(2)        8x8 -> 4x4
    Conv2d(c1, c2, 3, padding=1) - ReLU - MaxPool2d(2)       4x4 -> 2x2
    Flatten - Linear(4 c2, hidden) - ReLU - Dropout(p) - Linear(hidden, 10)

Rung 8b's ResNet (``model="resnet"``; BatchNorm's running statistics are tape states, in the
digests)::

    Conv2d(1, c1, 3, padding=1, bias=False) - BatchNorm2d - ReLU      8x8
    BasicBlock(c1, c1)                                                8x8
    BasicBlock(c1, c2, stride 2), a 1x1 strided projection + BN       4x4
    AdaptiveAvgPool2d(1) - Flatten - Linear(c2, 10)

A BasicBlock is torch's: conv3x3 - BN - ReLU - conv3x3 - BN, plus the shortcut, then ReLU.

Every random bit comes from ``gtape.rng.key(seed)``, split three ways: the initial weights
(one key per layer), the minibatch order (epoch e: the training rows sorted by the words of
``order.fold(e)``, full batches only) and dropout (step t, counted from 0: ``drop.fold(t)``).
Engines: ``tape`` (every step recorded and differentiated on a tape of ``backend``) and
``replay`` (one step captured by ggpu-replay and replayed, the batch, its labels and the
dropout key refreshed with ``set_input``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import gtape as g
import numpy as np
from gopt import Adam, schedules
from gverify.canonical import entries_digest

RUNG = "rung 8 cnn"
ACCURACY_BAR = 0.97  # test accuracy of the default run (seed 0, every epoch, float64)
ENGINES = ("tape", "replay")
MODELS = ("lenet", "resnet")
RESNET_RUNG = "rung 8b resnet"
BARS = {"lenet": ACCURACY_BAR, "resnet": 0.98}  # each model's bar (its default run)
EPOCHS = {"lenet": 20, "resnet": 5}  # each model's default run


@dataclass(frozen=True)
class CNNConfig:
    """Everything that defines a run (the JSON summary repeats it)."""

    backend: str = "numpy"
    dtype: str = "float64"
    engine: str = "tape"  # "tape" or "replay" (the step captured once: cpu, sim or cuda)
    seed: int = 0
    epochs: int = 20
    batch: int = 32
    lr: float = 5e-3  # Adam's, annealed to 0 over the run by torch's CosineAnnealingLR
    channels: tuple[int, int] = (16, 32)
    hidden: int = 128
    dropout: float = 0.25
    stop: int | None = None  # the last step to run (None: every epoch): the short checks
    model: str = "lenet"  # "lenet" (rung 8) or "resnet" (rung 8b: channels, no dropout)


@dataclass
class CNNResult:
    """What a run produced: the per-epoch curves, the digests, the test predictions."""

    config: CNNConfig
    steps: int
    seconds: float
    sha256_initial: str
    sha256_final: str
    test_accuracy: float
    losses: list[float] = field(default_factory=list)  # minibatch loss of every step
    epoch_loss: list[float] = field(default_factory=list)  # mean minibatch loss per epoch
    epoch_accuracy: list[float] = field(default_factory=list)  # test accuracy after each epoch
    predictions: np.ndarray | None = None  # the final model's test-set predictions
    params: dict[str, np.ndarray] = field(default_factory=dict)
    digests: dict[int, str] = field(default_factory=dict)  # step -> digest (``digest_at``)

    def summary(self) -> dict[str, Any]:
        """The JSON-ready part (no arrays)."""
        return {"config": asdict(self.config), "steps": self.steps,
                "seconds": round(self.seconds, 3), "test_accuracy": self.test_accuracy,
                "sha256_initial": self.sha256_initial, "sha256_final": self.sha256_final,
                "epoch_loss": self.epoch_loss, "epoch_accuracy": self.epoch_accuracy}


@functools.lru_cache(maxsize=4)
def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): load_digits / 16 as (N, 1, 8, 8) float64, int64
    labels, the stratified 80/20 split of ``seed`` (cached: treat as read-only)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).reshape(-1, 1, 8, 8)
    xtr, xte, ytr, yte = train_test_split(x, d.target.astype(np.int64), test_size=0.2,
                                          stratify=d.target, random_state=seed)
    return xtr, ytr, xte, yte


def keys(seed: int) -> tuple[g.rng.Key, g.rng.Key, g.rng.Key]:
    """(init, order, dropout): the three keys of a run, ``g.rng.key(seed).split(3)``."""
    init, order, drop = g.rng.key(seed).split(3)
    return init, order, drop


def batch_order(order: g.rng.Key, epoch: int, n: int, batch: int) -> list[np.ndarray]:
    """Epoch ``epoch``'s minibatches: the rows 0..n-1 sorted by the uint64 words of
    ``order.fold(epoch)`` (a stable sort), cut into ``n // batch`` full batches."""
    perm = np.argsort(g.rng.bits(order.fold(epoch), n), kind="stable")
    return [perm[k * batch:(k + 1) * batch] for k in range(n // batch)]


class BasicBlock(g.nn.Module):
    """torch's ResNet BasicBlock: conv3x3 (stride) - BN - ReLU - conv3x3 - BN, plus the
    shortcut (the identity, or a strided 1x1 conv + BN when the shape changes), then ReLU."""

    def __init__(self, tp: g.Tape, cin: int, cout: int, stride: int, key: g.rng.Key) -> None:
        k = key.split(3)
        self.conv1 = g.nn.Conv2d(tp, cin, cout, 3, stride, 1, bias=False, key=k[0])
        self.bn1 = g.nn.BatchNorm2d(tp, cout)
        self.conv2 = g.nn.Conv2d(tp, cout, cout, 3, 1, 1, bias=False, key=k[1])
        self.bn2 = g.nn.BatchNorm2d(tp, cout)
        self.shortcut = g.nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = g.nn.Sequential(
                g.nn.Conv2d(tp, cin, cout, 1, stride, bias=False, key=k[2]),
                g.nn.BatchNorm2d(tp, cout))

    def forward(self, x: Any) -> g.Var:
        """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""
        out = g.relu(self.bn1(self.conv1(x)))
        return g.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def build_resnet(tp: g.Tape, cfg: CNNConfig, init: g.rng.Key) -> g.nn.Sequential:
    """Rung 8b's ResNet on ``tp`` (module docstring; initial values from ``init``)."""
    c1, c2 = cfg.channels
    k = init.split(4)
    return g.nn.Sequential(
        g.nn.Conv2d(tp, 1, c1, 3, padding=1, bias=False, key=k[0]), g.nn.BatchNorm2d(tp, c1),
        g.nn.ReLU(), BasicBlock(tp, c1, c1, 1, k[1]), BasicBlock(tp, c1, c2, 2, k[2]),
        g.nn.AdaptiveAvgPool2d(1), g.nn.Flatten(), g.nn.Linear(tp, c2, 10, key=k[3]))


def torch_resnet(cfg: CNNConfig) -> Any:
    """``build_resnet``'s model as a torch.nn tree (the same module names and ``state_dict``
    keys; torch's default initialisation): the oracle of the tests and the benchmark's peer.
    Needs torch (an oracle / benchmark extra, imported here)."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    c1, c2 = cfg.channels
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1),
                         nn.ReLU(), BasicBlock(c1, c1, 1), BasicBlock(c1, c2, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c2, 10))


def build(tp: g.Tape, cfg: CNNConfig, init: g.rng.Key, drop: g.rng.Key) -> g.nn.Sequential:
    """The model of ``cfg.model`` on ``tp``: the LeNet-style CNN (torch's layers, initial
    values from ``init``) or the ResNet (``build_resnet``)."""
    if cfg.model not in MODELS:
        raise ValueError(f"cnn.build: model {cfg.model!r}; expected one of {MODELS}")
    if cfg.model == "resnet":
        return build_resnet(tp, cfg, init)
    c1, c2 = cfg.channels
    k = init.split(4)
    return g.nn.Sequential(
        g.nn.Conv2d(tp, 1, c1, 3, padding=1, key=k[0]), g.nn.ReLU(), g.nn.MaxPool2d(2),
        g.nn.Conv2d(tp, c1, c2, 3, padding=1, key=k[1]), g.nn.ReLU(), g.nn.MaxPool2d(2),
        g.nn.Flatten(), g.nn.Linear(tp, 4 * c2, cfg.hidden, key=k[2]), g.nn.ReLU(),
        g.nn.Dropout(cfg.dropout, key=drop), g.nn.Linear(tp, cfg.hidden, 10, key=k[3]))


def total_steps(cfg: CNNConfig) -> int:
    """Adam steps of the full run (epochs x full batches): the cosine schedule's length."""
    return cfg.epochs * (len(digits(cfg.seed)[1]) // cfg.batch)


def digest(model: g.nn.Module) -> str:
    """sha256 of the parameters (gverify's canonical bytes of each name and array)."""
    return entries_digest(model.state_dict().items())


def predict(tp: g.Tape, model: g.nn.Module, x: np.ndarray) -> np.ndarray:
    """int64 predictions of ``model`` in eval mode (dropout off) for images ``x``; the tape
    is left as it was."""
    mark = tp.mark()
    model.eval()
    try:
        pred = g.argmax(model(tp.const(x)), axis=-1).numpy()
    finally:
        model.train()
        tp.reset_to(mark)
    return np.asarray(pred)


class TapeSteps:
    """The tape engine: record the step, backward, Adam, reset."""

    def __init__(self, tp: g.Tape, model: g.nn.Sequential, cfg: CNNConfig) -> None:
        self.tp, self.model = tp, model
        self.opt = Adam(tp, lr=cfg.lr)
        self.opt.add(model.parameters())
        self.sched = schedules.cosine(self.opt, total_steps=total_steps(cfg))
        self.mark = tp.mark()

    def step(self, xb: np.ndarray, yb: np.ndarray) -> float:
        """One Adam step on a minibatch; its loss (before the update)."""
        tp = self.tp
        loss = g.cross_entropy(self.model(tp.const(xb)), yb)
        tp.backward(loss)
        self.opt.step()
        self.sched.step()
        value = loss.item()
        tp.reset_to(self.mark)
        return value

    def sync(self) -> None:
        """The tape holds the trained weights already."""


class ReplaySteps:
    """The replay engine: one step captured (ggpu-replay) on ``cfg.backend``; each step
    refreshes the batch, its labels and (``advance_keys``) the dropout layer's key, then runs
    forward, backward and Adam as one program."""

    def __init__(self, tp: g.Tape, model: g.nn.Sequential, cfg: CNNConfig) -> None:
        from ggpu_replay import capture

        self.tp, self.model = tp, model
        self.drop = next((m for m in model if isinstance(m, g.nn.Dropout)), None)
        mark = tp.mark()
        self.x = tp.const(np.zeros((cfg.batch, 1, 8, 8)), name="images")
        calls = self.drop.calls if self.drop is not None else 0
        loss = g.cross_entropy(model(self.x), np.zeros(cfg.batch, np.int64))
        if self.drop is not None:  # recording the step is not a step: step t keys drop.fold(t)
            self.drop.calls = calls
        self.prog = capture(tp, loss, backend=cfg.backend, model=model)
        # NOTE: the reset writes the recording forward's running-statistics update (a torch
        # forward in training mode would too); the program starts from the states before it,
        # and sync() copies its own back
        tp.reset_to(mark)
        self.opt = self.prog.adam(lr=cfg.lr)
        for p in model.parameters():
            self.opt.add(p)
        self.sched = schedules.cosine(self.opt, total_steps=total_steps(cfg))

    def step(self, xb: np.ndarray, yb: np.ndarray) -> float:
        """One replayed step; its loss."""
        prog = self.prog
        prog.set_input(self.x, xb)
        prog.set_input("labels", yb)
        if self.drop is not None:
            prog.advance_keys()  # the dropout layer's next key (drop.fold(t)), as the tape's
        prog.step(self.opt)
        self.sched.step()
        return prog.loss()

    def sync(self) -> None:
        """The program's weights back into the tape (for evaluation and digests)."""
        self.prog.sync_params(self.tp)


def train(cfg: CNNConfig, progress: Callable[[int, int], Any] | None = None,
          digest_at: int | None = None) -> CNNResult:
    """One run of ``cfg``; ``progress(total_steps, epochs)`` may return a tqdm-like bar;
    ``digest_at``: also the parameters' digest after that many steps (``digests``)."""
    if cfg.engine not in ENGINES:
        raise ValueError(f"cnn.train: engine {cfg.engine!r}; expected one of {ENGINES}")
    xtr, ytr, xte, yte = digits(cfg.seed)
    k_init, k_order, k_drop = keys(cfg.seed)
    tp = g.Tape(cfg.backend, cfg.dtype)
    model = build(tp, cfg, k_init, k_drop)
    initial = digest(model)
    steps = (TapeSteps if cfg.engine == "tape" else ReplaySteps)(tp, model, cfg)
    per_epoch = len(ytr) // cfg.batch
    last = total_steps(cfg) if cfg.stop is None else min(cfg.stop, total_steps(cfg))
    bar = progress(last, cfg.epochs) if progress else None
    losses: list[float] = []
    digests: dict[int, str] = {}
    epoch_loss: list[float] = []
    epoch_acc: list[float] = []
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        if len(losses) >= last:
            break
        for idx in batch_order(k_order, epoch, len(ytr), cfg.batch):
            if len(losses) >= last:
                break
            losses.append(steps.step(xtr[idx], ytr[idx]))
            if len(losses) == digest_at:
                steps.sync()
                digests[digest_at] = digest(model)
            if bar is not None:
                bar.set_postfix_str(f"loss {losses[-1]:.3e}", refresh=False)
                bar.update(1)
        steps.sync()
        done = losses[epoch * per_epoch:]
        epoch_loss.append(float(np.mean(done)))
        epoch_acc.append(float(np.mean(predict(tp, model, xte) == yte)))
        if bar is not None:
            bar.set_description(f"epoch {epoch + 1}/{cfg.epochs} test accuracy "
                                f"{epoch_acc[-1]:.4f}")
    steps.sync()
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    pred = predict(tp, model, xte)
    result = CNNResult(cfg, len(losses), seconds, initial, digest(model),
                       float(np.mean(pred == yte)), losses, epoch_loss, epoch_acc, pred,
                       model.state_dict(), digests)
    tp.close()
    return result
