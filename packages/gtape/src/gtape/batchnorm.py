"""Batch normalisation as torch defines it, as a composite of recorded ops with its order
written down, and torch's ``BatchNorm1d`` / ``BatchNorm2d`` layers.

``batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`` on x
(N, C) or (N, C, L) (``BatchNorm1d``) or (N, C, H, W) (``BatchNorm2d``); the statistics of a
channel run over its n = N*L (N*H*W) positions, each sum serial in row-major order over
(N, H, W) (one ``sum`` / ``mean`` over the non-channel axes):

* training, or no running statistics::

      mu  = mean(x)                 d  = x - mu
      ss  = sum(d * d)              var = ss / n        (the biased variance: normalisation)
      r   = 1 / sqrt(var + eps)     y  = (d * r) * w + b

  and, with running statistics (tape states, ``Tape.state``; torch's update, the unbiased
  variance for the running estimate)::

      running_mean <- mu * m + running_mean * (1 - m)
      running_var  <- (ss / (n - 1)) * m + running_var * (1 - m)

  ``m`` is ``momentum``, or ``1 / num_batches_tracked`` (after its increment) when momentum
  is None (torch's cumulative average). n == 1 in training is refused (torch's error).
* evaluation with running statistics: ``y = ((x - running_mean) * (1 / sqrt(running_var +
  eps))) * w + b``.

w and b (per channel) are skipped when None. In training with both w and b Vars of the tape
(the layers' params) the normalisation and the affine are one op, ``bn_affine`` (the same
operations, the same bits; nothing stored between them; gtensor's batchnorm). The updates go
through ``Tape.update_state``:
read back with ``tp.state_value``, written into the states' buffers when the episode is reset,
refreshed by a captured program's step exactly as by the eager step (``gtape.states``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gtensor import describe

from . import ops
from .modules import Module
from .tape import Tape
from .var import Var


def _is_state(v: Any) -> bool:
    return isinstance(v, Var) and v.op == "state"


def _check_options(where: str, momentum: Any, eps: Any) -> None:
    """momentum a number in [0, 1] or None, eps a finite number >= 0."""
    if momentum is not None and (isinstance(momentum, bool) or not isinstance(
            momentum, (int, float, np.floating)) or not 0 <= momentum <= 1):
        raise ValueError(f"{where}: momentum is {momentum!r}; expected a number in [0, 1] or "
                         "None (a cumulative average)")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or \
            not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{where}: eps is {eps!r}; expected a finite number >= 0")


def _check(where: str, x: Any, c: int | None, stats: dict[str, Any], params: dict[str, Any],
           momentum: Any, eps: Any) -> int:
    """Refuse bad input before anything is recorded; returns C."""
    if not isinstance(x, Var):
        raise TypeError(f"{where}: x is {describe(x)}; expected a Var of a Tape")
    shape = tuple(x.shape)
    if len(shape) not in (2, 3, 4):
        raise ValueError(f"{where}: x has shape {shape}; expected (N, C), (N, C, L) or "
                         "(N, C, H, W)")
    if c is not None and shape[1] != c:
        raise ValueError(f"{where}: x has {shape[1]} channels (shape {shape}); expected "
                         f"{c} (num_features)")
    for name, v in {**stats, **params}.items():
        if v is not None and tuple(np.shape(v)) != (shape[1],):
            raise ValueError(f"{where}: {name} has shape {tuple(np.shape(v))}; expected "
                             f"({shape[1]},) (the channels of x, shape {shape}) or None")
    for name, v in stats.items():
        if v is not None and (not _is_state(v) or v.tape is not x.tape):
            raise TypeError(f"{where}: {name} is {describe(v)}; expected a state of x's tape "
                            "(tp.state(...), updated by the step) or None")
    _check_options(where, momentum, eps)
    return shape[1]


def _is_var_of(v: Any, tp: Tape) -> bool:
    """``v`` a float Var of ``tp`` (an affine the fused op takes as it is)."""
    return isinstance(v, Var) and v.tape is tp and np.dtype(v.dtype) == np.dtype(tp.dtype)


def _per_channel(v: Any, chan: tuple) -> Any:
    return ops.reshape(v, chan) if isinstance(v, Var) else np.reshape(v, chan)


def batch_norm(x: Var, running_mean: Var | None = None, running_var: Var | None = None,
               weight: Any = None, bias: Any = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5,
               num_batches_tracked: Var | None = None) -> Var:
    """torch's ``F.batch_norm``: batch statistics in training (running statistics, tape
    states, updated as torch updates them), the running statistics in evaluation; the order
    in the module docstring. ``num_batches_tracked`` (a state) is incremented by one in
    training; with ``momentum=None`` it sets the cumulative average's factor."""
    where = "batch_norm"
    _check(where, x, None, {"running_mean": running_mean, "running_var": running_var},
           {"weight": weight, "bias": bias}, momentum, eps)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{where}: running_mean and running_var go together; got one of them")
    if momentum is None and training and running_mean is not None and num_batches_tracked is None:
        raise ValueError(f"{where}: momentum is None (a cumulative average) but there is no "
                         "num_batches_tracked to count the batches")
    tp, shape = x.tape, tuple(x.shape)
    axes = (0,) + tuple(range(2, len(shape)))
    n = int(np.prod([shape[a] for a in axes]))
    chan = (1, shape[1]) + (1,) * (len(shape) - 2)
    batch = training or running_mean is None
    if batch and n <= 1:
        raise ValueError(f"{where}: expected more than 1 value per channel when training, got "
                         f"input of shape {shape} (torch's rule)")
    if batch and _is_var_of(weight, tp) and _is_var_of(bias, tp):
        # one op, the batch statistics and the affine included (the composite's bits:
        # gtensor's batchnorm; no normalised x and no product stored between them)
        y = ops.apply("bn_affine", (x, weight, bias), eps=float(eps))
    else:
        if batch:  # one op, the batch statistics included (the composite's bits: gtensor's
            # batchnorm); the running statistics read the mean op's mu and bn_sum_squares' ss
            y = ops.apply("bn_normalize", (x,), eps=float(eps))
        else:
            d = ops.sub(x, ops.reshape(tp.state_var(running_mean), chan))
            var = ops.reshape(tp.state_var(running_var), chan)
            y = ops.mul(d, ops.div(1.0, ops.sqrt(ops.adds(var, float(eps)))))
        if weight is not None:
            y = ops.mul(y, _per_channel(weight, chan))
        if bias is not None:
            y = ops.add(y, _per_channel(bias, chan))
    if training and running_mean is not None:  # mu and ss for the running statistics alone
        mu = ops.mean(x, axis=axes, keepdims=True)
        ss = ops.apply("bn_sum_squares", (x, mu))
        _update(tp, running_mean, running_var, num_batches_tracked, mu, ss, n, momentum)
    elif training and num_batches_tracked is not None:
        tp.update_state(num_batches_tracked, ops.adds(tp.state_var(num_batches_tracked), 1.0))
    return y


def _update(tp: Tape, rm: Var, rv: Var, nbt: Var | None, mu: Var, ss: Var, n: int,
            momentum: float | None) -> None:
    """torch's running-statistics update (module docstring), through ``update_state``."""
    c = rm.shape[0]
    if nbt is not None:
        count = ops.adds(tp.state_var(nbt), 1.0)
        tp.update_state(nbt, count)
    unbiased = ops.reshape(ops.div(ss, float(n - 1)), (c,))
    mean = ops.reshape(mu, (c,))
    if momentum is None:  # the cumulative average: factor 1 / num_batches_tracked
        f = ops.div(1.0, count)
        keep = ops.adds(ops.neg(f), 1.0)
        new_m = ops.add(ops.mul(mean, f), ops.mul(tp.state_var(rm), keep))
        new_v = ops.add(ops.mul(unbiased, f), ops.mul(tp.state_var(rv), keep))
    else:
        m, keep = float(momentum), 1.0 - float(momentum)
        new_m = ops.add(ops.muls(mean, m), ops.muls(tp.state_var(rm), keep))
        new_v = ops.add(ops.muls(unbiased, m), ops.muls(tp.state_var(rv), keep))
    tp.update_state(rm, new_m)
    tp.update_state(rv, new_v)


class _BatchNorm(Module):
    """torch's ``_BatchNorm``: ``weight`` ones and ``bias`` zeros (C,) (none without
    ``affine``), and with ``track_running_stats`` the tape states ``running_mean`` zeros,
    ``running_var`` ones and ``num_batches_tracked`` 0 (an int64 in ``state_dict``)."""

    DIMS: tuple[int, ...] = ()

    def __init__(self, tp: Tape, num_features: int, eps: float = 1e-5,
                 momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:
        name = type(self).__name__
        if isinstance(num_features, bool) or not isinstance(num_features, (int, np.integer)) \
                or num_features < 1:
            raise ValueError(f"{name}: num_features is {num_features!r}; expected an int >= 1")
        if not isinstance(tp, Tape):
            raise TypeError(f"{name}: tp is {describe(tp)}; expected a gtape.Tape")
        c = int(num_features)
        _check_options(name, momentum, eps)
        self.num_features, self.eps, self.momentum = c, float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        self.weight: Var | None = tp.param(np.ones(c)) if affine else None
        self.bias: Var | None = tp.param(np.zeros(c)) if affine else None
        self._int_states = {"num_batches_tracked"}
        if track_running_stats:
            self.register_buffer("running_mean", tp.state(np.zeros(c)))
            self.register_buffer("running_var", tp.state(np.ones(c)))
            self.register_buffer("num_batches_tracked", tp.state(np.zeros(())))
        else:
            for b in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(b, None)

    def _state(self, name: str) -> Var | None:
        return self.__dict__["_buffers"].get(name)

    def forward(self, x: Any) -> Var:
        """batch_norm with batch statistics in training mode (and without running
        statistics), the running ones in eval mode; the states updated in training."""
        if isinstance(x, Var) and len(x.shape) not in self.DIMS:
            raise ValueError(f"{type(self).__name__}: x has shape {tuple(x.shape)}; expected "
                             f"{' or '.join(f'{d}-D' for d in self.DIMS)} input")
        _check(type(self).__name__, x, self.num_features, {}, {}, self.momentum, self.eps)
        return batch_norm(x, self._state("running_mean"), self._state("running_var"),
                          self.weight, self.bias, self.training, self.momentum, self.eps,
                          self._state("num_batches_tracked"))

    def extra_repr(self) -> str:
        """num_features, eps, momentum, affine, track_running_stats."""
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """torch's ``nn.BatchNorm1d`` on (N, C) or (N, C, L) input."""

    DIMS = (2, 3)


class BatchNorm2d(_BatchNorm):
    """torch's ``nn.BatchNorm2d`` on (N, C, H, W) input."""

    DIMS = (4,)
