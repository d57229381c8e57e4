"""A torch GPT brought as it is (issue 35): ``g.nn.from_torch`` of a nanoGPT-style model, then
20 AdamW steps with torch's parameter groups (decay for matrices, none for biases, norms and
embeddings) and torch's clipping rule:

* against torch float64 fed the same bits (dropout off): loss and every parameter within
  1e-12 relative at every step;
* with dropout on, the same 20 steps bitwise on the backend under test and on the numpy tape;
* the step captured (ggpu-replay, on the backend under test) bitwise the eager tape.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gopt
import gtape as g
import numpy as np
import pytest
from gtensor import testing
from gtensor.testing import bits_equal

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "gtape" / "tests"))
from torch_gpt import GPT, GPTConfig  # noqa: E402

STEPS, LR, WD, CLIP = 20, 3e-2, 0.1, 0.5


def _batches(n: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.integers(0, 11, (3, 7)), rng.integers(0, 11, (3, 7))) for _ in range(n)]


def _torch_model(dropout: float) -> GPT:
    torch.manual_seed(1)
    # NOTE: no Linear biases: the key projection's bias has a gradient that is exactly zero in
    # exact arithmetic (softmax ignores a per-row constant) and rounding noise (~1e-17) in any
    # implementation; Adam's first step divides that noise by eps, so both sides move it by
    # ~lr * 1e-9 in directions of their own noise: no comparison with torch can be 1e-12 there
    return GPT(GPTConfig(dropout=dropout, bias=False)).double()


def _groups(named: list) -> list[dict]:
    """nanoGPT's rule: matrices decay, biases / norms / (1-D) nothing."""
    decay = [p for n, p in named if p.ndim >= 2]
    rest = [p for n, p in named if p.ndim < 2]
    return [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}]


def _torch_run() -> tuple[list[float], list[list[np.ndarray]]]:
    tm = _torch_model(0.0)
    opt = torch.optim.AdamW(_groups(list(tm.named_parameters())), lr=LR, betas=(0.9, 0.95))
    losses, params = [], []
    for idx, tgt in _batches():
        _, loss = tm(torch.from_numpy(idx), torch.from_numpy(tgt))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tm.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
        params.append([p.detach().numpy().copy() for p in tm.parameters()])
    return losses, params


def _eager(backend: str, dropout: float, dtype: str = "float64"
           ) -> tuple[list[float], list[list[np.ndarray]]]:
    with g.Tape(backend, dtype) as tp:
        gm = g.nn.from_torch(_torch_model(dropout), tp)
        opt = gopt.AdamW(_groups(list(gm.named_parameters())), lr=LR, betas=(0.9, 0.95))
        opt.set_clip(CLIP, rule="torch")
        losses, params = [], []
        for idx, tgt in _batches():
            with tp.episode():
                _, loss = gm(idx, tgt)
                tp.backward(loss)
                opt.step()
                losses.append(loss.item())
            params.append([p.numpy() for p in gm.parameters()])
        return losses, params


def test_twenty_adamw_steps_with_groups_and_torch_clipping_match_torch():
    want_losses, want = _torch_run()
    got_losses, got = _eager("numpy", 0.0)
    for step, (a, b) in enumerate(zip(got_losses, want_losses)):
        assert abs(a - b) <= 1e-12 * abs(b), f"step {step}: loss {a} vs torch {b}"
        for k, (x, y) in enumerate(zip(got[step], want[step])):
            err = np.max(np.abs(x - y)) / np.max(np.abs(y))
            assert err <= 1e-12, f"step {step}, param {k}: {err:.2e} from torch"
    # the clip was active on some of these steps (else the test would not see the rule)
    tm = _torch_model(0.0)
    norms = []
    for idx, tgt in _batches()[:3]:
        tm.zero_grad()
        tm(torch.from_numpy(idx), torch.from_numpy(tgt))[1].backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(tm.parameters(), 1e9)))
    assert max(norms) > CLIP, f"gradient norms {norms} never exceed the clip {CLIP}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_same_steps_with_dropout_are_bitwise_on_the_backend(dtype):
    name = testing.backend_name()
    testing.require_backend(name)
    want_losses, want = _eager("numpy", 0.1, dtype)
    got_losses, got = _eager(name, 0.1, dtype)  # on numpy: a second run (determinism)
    assert bits_equal(np.array(got_losses), np.array(want_losses))
    for step in (0, STEPS - 1):
        for x, y in zip(got[step], want[step]):
            assert bits_equal(x, y), f"step {step}"
    assert want_losses[-1] < want_losses[0]


def test_the_captured_step_is_bitwise_the_eager_run():
    from ggpu_replay import capture

    name = testing.backend_name()
    device = name if name in ("sim", "cpu", "cuda") else "cpu"
    testing.require_backend(device)
    want_losses, want = _eager("numpy", 0.0)
    batches = _batches()
    with g.Tape(name) as tp:
        gm = g.nn.from_torch(_torch_model(0.0), tp)
        named = list(gm.named_parameters())
        _, loss = gm(*batches[0])
        prog = capture(tp, loss, backend=device)
        ids = next(n for n in prog.inputs if n.startswith("ids"))  # wte's: recorded first
        dopt = prog.adamw(_groups(named), lr=LR, betas=(0.9, 0.95))
        dopt.set_clip(CLIP, rule="torch")
        losses = []
        for idx, tgt in batches:
            prog.set_input(ids, idx)
            prog.set_input("labels", tgt.reshape(-1, 1))
            prog.step(dopt)
            losses.append(prog.loss())
        prog.sync_params(tp)
        final = [p.numpy() for p in gm.parameters()]
    assert bits_equal(np.array(losses), np.array(want_losses))
    for x, y in zip(final, want[-1]):
        assert bits_equal(x, y)
