"""Device optimizers: gopt's SGD, Adam and AdamW over a program's parameter buffers.

The optimizer IS gopt's (same code, same formulas, so the same bits); the program is its
parameter store. Its step has two halves (see ``gopt.Optimizer``): the host half (the step
count and per-step scalars such as Adam's ``lr_t``, written into small device buffers) runs
every step; the device half is recorded the first time it runs and replayed afterwards.
The recording (a ``gtape.recording.Recording``) depends on the versions of the configuration
it bakes in (``gopt.Optimizer.recorded_deps``): registering a parameter or a group, changing
the clip, an alpha (a coupled weight_decay), betas, eps or loading a state -- through this
wrapper or through the gopt optimizer it hands out -- re-records it. Per-group learning rates
and AdamW's per-group decay are per-step host scalars in device buffers: writing them
(``param_groups[k]["lr"] = x``, a schedule) re-records nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gopt
import gtape
from gtape.recording import Recording
from gtensor.recording import Launch

if TYPE_CHECKING:
    from .program import Program


class DeviceOptimizer:
    """A gopt optimizer whose state lives on a program's device (made by ``Program.adam``)."""

    def __init__(self, program: Program, opt: gopt.Optimizer) -> None:
        self._prog = program
        self._opt = opt
        self._segment: Recording[list[Launch]] = Recording(
            f"the device step of {type(opt).__name__}", opt.recorded_deps)

    # ---------------------------------------------------------------- configuration (gopt's)
    def add(self, param: Any, alpha: float | None = None) -> Any:
        """Register a parameter (or a list) of the captured tape in the first group with L2
        weight ``alpha`` (None: gopt's default, the group's coupled weight_decay or 0)."""
        return self._opt.add(param, alpha)

    @property
    def param_groups(self) -> list[Any]:
        """gopt's parameter groups (torch's dicts, read and written: ``g["lr"] = x`` takes
        effect at the next step without re-recording)."""
        return self._opt.param_groups

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group (torch's dict; before the first step), as gopt's."""
        self._opt.add_param_group(param_group)

    def set_clip(self, max_norm: float | None, rule: str = "gopt") -> None:
        """Clip the global gradient norm (over every group) to ``max_norm`` before each step
        (None: no clipping); ``rule`` "gopt" or "torch" as gopt's ``set_clip``."""
        self._opt.set_clip(max_norm, rule)

    def set_alpha(self, param: gtape.Var, alpha: float) -> None:
        """Change a registered parameter's L2 weight (from the next step on)."""
        self._opt.set_alpha(param, alpha)

    # ---------------------------------------------------------------- stepping
    def step(self) -> None:
        """One update from the program's current gradients (recorded once, then replayed)."""
        self.advance()
        device = self._prog._device
        with device.ordered():
            segment = self._segment.current()
            if segment is None:
                rec = self._prog.backend
                with rec.recording() as segment:
                    rec.tag = "optimizer"
                    self._opt.device_step()
                rec.tag = None
                self._segment.keep(segment)
            else:
                device.run(segment)

    def advance(self) -> None:
        """The host half of a step: checks, the step count, per-step scalars to the device."""
        self._opt.check_step()
        with self._prog._device.ordered():
            self._opt.advance()

    @property
    def recorded(self) -> bool:
        """Whether the device half of the step is recorded and fresh (its configuration as
        recorded): the next step replays it."""
        return self._segment.fresh()

    @property
    def segment(self) -> list[Launch]:
        """The recorded launches of the device half (refused when stale: ``StaleRecording``
        naming what moved; empty before the first step)."""
        if self._segment.held is None:
            return []
        return self._segment.require()

    @property
    def program(self) -> Program:
        """The program whose parameters this optimizer updates."""
        return self._prog

    @property
    def optimizer(self) -> gopt.Optimizer:
        """The underlying gopt optimizer (its formulas are the definition)."""
        return self._opt

    # ---------------------------------------------------------------- gopt's read-outs
    @property
    def t(self) -> int:
        """Steps taken so far."""
        return self._opt.t

    @property
    def lr(self) -> float:
        """The learning rate (of every group); settable for every group (gopt's checks),
        taking effect at the next step."""
        return self._opt.lr

    @lr.setter
    def lr(self, value: float) -> None:
        # a per-step host scalar: the host half writes what derives from it into device
        # buffers, so the recorded segment (and a CUDA graph of the whole step) stays valid
        self._opt.lr = value

    @property
    def params(self) -> list[gtape.Var]:
        """The registered parameters, in registration order."""
        return self._opt.params

    @property
    def max_norm(self) -> float | None:
        """The clipping threshold, or None."""
        return self._opt.max_norm

    @property
    def last_norm(self) -> float | None:
        """The global gradient norm of the last clipped step (a device read)."""
        with self._prog._device.ordered():
            return self._opt.last_norm

    def state_dict(self, params: bool = True) -> dict[str, Any]:
        """gopt's state dict, read from the device."""
        with self._prog._device.ordered():
            return self._opt.state_dict(params)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state dict (gopt's checks first); the device step is re-recorded."""
        with self._prog._device.ordered():
            self._opt.load_state_dict(state)

    def __repr__(self) -> str:
        return f"<DeviceOptimizer {self._opt!r} on {self._prog!r}>"
