"""Random interleavings of configuration changes and steps (hypothesis, stateful): set_clip,
``lr =``, set_alpha, adding parameters, set_value, load_state_dict, set_input and steps, applied
alike to the eager tape of the backend under test (on cpu and sim its update is recorded and
replayed) and to a captured program (sim or cpu); after every step each engine's state equals,
bit for bit, a FRESH numpy optimizer configured that way from the start and loaded with the
state so far (issue 24: nothing recorded goes stale)."""

from __future__ import annotations

import gopt
import gtape as g
import numpy as np
from ggpu_replay import capture
from gtensor import testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

N = 3  # parameters, each of shape (2,)
INIT = [np.array([0.5, -1.5]), np.array([2.0, 0.25]), np.array([-0.75, 1.0])]
X0 = np.array([1.0, -0.5])
LRS = st.sampled_from([0.0, 0.01, 0.1, 0.3])
CLIPS = st.sampled_from([None, 0.25, 2.0])
ALPHAS = st.sampled_from([0.0, 1e-3, 0.5])
VALUES = st.lists(st.sampled_from([-2.0, -0.5, 0.0, 0.75, 3.0]), min_size=2, max_size=2)


def _loss(ps, x):
    return g.sum((ps[0] * ps[1] + ps[2]) * x * (ps[0] + x))


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class Reconfigured(RuleBasedStateMachine):
    """One configuration history applied to every engine and to a fresh reference per step."""

    KIND = "sgd"

    def make(self, store, lr):
        return gopt.SGD(store, lr) if self.KIND == "sgd" else gopt.Adam(store, lr)

    @initialize()
    def start(self):
        bname = testing.backend_name()
        device = bname if bname in ("cpu", "sim") else "sim"
        self.lr, self.clip, self.alphas, self.x = 0.1, None, [0.0], X0.copy()
        self.values = [a.copy() for a in INIT]  # the reference's parameter values
        self.state = None  # the reference's optimizer state (host), None before a step
        self.saved = []
        # the eager tape (its update recorded and replayed on kernel backends)
        self.tp = g.Tape(bname)
        self.tps = [self.tp.param(a) for a in INIT]
        self.topt = self.make(self.tp, self.lr)
        self.topt.add(self.tps[0])
        self.mark = self.tp.mark()
        # the captured program on a device
        ctp = g.Tape("numpy")
        self.cps = [ctp.param(a) for a in INIT]
        self.cx = ctp.const(X0)
        self.prog = capture(ctp, _loss(self.cps, self.cx), backend=device)
        self.dev = self.make_dev(self.lr)
        self.dev.add(self.cps[0])
        self.through_gopt = False  # alternate the doors: the wrapper and dev.optimizer

    def make_dev(self, lr):
        return self.prog.sgd(lr) if self.KIND == "sgd" else self.prog.adam(lr)

    def doors(self):
        """The configuration doors of this change: the tape's optimizer, and the device
        optimizer's wrapper or the gopt optimizer it hands out (alternately)."""
        self.through_gopt = not self.through_gopt
        return [self.topt, self.dev.optimizer if self.through_gopt else self.dev]

    @property
    def t(self) -> int:
        return 0 if self.state is None else int(self.state["t"])

    # ---------------------------------------------------------------- configuration
    @rule(lr=LRS)
    def set_lr(self, lr):
        self.lr = lr
        for o in self.doors():
            o.lr = lr

    @rule(clip=CLIPS)
    def set_clip(self, clip):
        self.clip = clip
        for o in self.doors():
            o.set_clip(clip)

    @rule(data=st.data(), alpha=ALPHAS)
    def set_alpha(self, data, alpha):
        i = data.draw(st.integers(0, len(self.alphas) - 1))
        self.alphas[i] = alpha
        self.topt.set_alpha(self.tps[i], alpha)
        self.doors()[1].set_alpha(self.cps[i], alpha)

    @precondition(lambda self: self.t == 0 and len(self.alphas) < N)
    @rule(alpha=ALPHAS)
    def add_param(self, alpha):
        i = len(self.alphas)
        self.alphas.append(alpha)
        self.topt.add(self.tps[i], alpha)
        self.doors()[1].add(self.cps[i], alpha)

    @rule(data=st.data(), value=VALUES)
    def set_value(self, data, value):
        i = data.draw(st.integers(0, N - 1))
        v = np.array(value)
        self.values[i] = v.copy()
        self.tp.set_value(self.tps[i], v)
        self.dev.optimizer.tape.set_value(self.cps[i], v)

    @rule(value=VALUES)
    def set_input(self, value):
        self.x = np.array(value)
        self.prog.set_input(self.cx, self.x)

    @rule()
    def save(self):
        if self.state is not None:
            self.saved.append((dict(self.state), [v.copy() for v in self.values]))

    @precondition(lambda self: self.saved)
    @rule(data=st.data())
    def load(self, data):
        state, values = data.draw(st.sampled_from(self.saved))
        if len(state["alpha"]) != len(self.alphas):
            return  # saved with another parameter count: refused, tested elsewhere
        full = {**state, **{f"param.{i}": values[i] for i in range(len(self.alphas))}}
        self.state = dict(state)
        self.values[:len(self.alphas)] = [v.copy() for v in values[:len(self.alphas)]]
        self.lr = float(state["hyper.lr"])
        m = float(state["max_norm"])
        self.clip = None if np.isnan(m) else m
        self.alphas = [float(a) for a in state["alpha"]]
        for o in self.doors():
            o.load_state_dict(full)

    # ---------------------------------------------------------------- stepping
    @rule()
    def step(self):
        # the reference: a fresh numpy tape and optimizer, configured so from the start
        rtp = g.Tape("numpy")
        rps = [rtp.param(v) for v in self.values]
        ref = self.make(rtp, self.lr)
        for p, a in zip(rps, self.alphas):
            ref.add(p, a)
        ref.set_clip(self.clip)
        if self.state is not None:
            mine = ref.state_dict(params=False)
            ref.load_state_dict({**self.state, **{k: mine[k] for k in
                                                  ("hyper.lr", "max_norm", "alpha")}})
        rtp.backward(_loss(rps, rtp.const(self.x)))
        ref.step()
        self.state = ref.state_dict(params=False)
        self.values = [np.asarray(p.numpy()).copy() for p in rps]
        # the engines
        self.tp.backward(_loss(self.tps, self.tp.const(self.x)))
        self.topt.step()
        self.tp.reset_to(self.mark)
        self.prog.step(self.dev)

    @invariant()
    def engines_equal_the_fresh_reference(self):
        if self.state is None:
            return
        config = {"hyper.lr": np.array(self.lr, np.float64),
                  "max_norm": np.array(np.nan if self.clip is None else self.clip),
                  "alpha": np.array(self.alphas, np.float64)}
        for name, opt in (("tape", self.topt), ("program", self.dev)):
            got = opt.state_dict(params=False)
            for k, want in {**self.state, **config}.items():
                assert _same(got[k], want), f"{name}: {k} {got[k]!r} vs {want!r}"
        for i, want in enumerate(self.values):
            assert _same(self.tp.backend.to_numpy(self.tp.value(self.tps[i])), want), f"tape p{i}"
            assert _same(self.prog.value(self.cps[i]), want), f"program p{i}"


class ReconfiguredAdam(Reconfigured):
    KIND = "adam"


TestReconfiguredSGD = Reconfigured.TestCase
TestReconfiguredAdam = ReconfiguredAdam.TestCase
for _case in (TestReconfiguredSGD, TestReconfiguredAdam):  # the profile's example count
    _case.settings = settings(max_examples=settings.default.max_examples,
                              stateful_step_count=12, deadline=None)
