"""Run logs: one JSON line per recorded step (step, loss bits, digest, checkpoint path), and
``compare_logs``: the first step at which two logs differ.

The first line is a header naming the run's shape (dtype, parameters and their shapes, the
optimizer's kind): logs of different runs are refused, never compared. Every later line is
``{"step", "loss", "loss_bits", "digest"}`` (+ ``"checkpoint"`` every K steps, if asked): the
digest of the state after the step's update, and the bits of the loss its forward computed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gtape
import numpy as np
from gtensor import describe

from . import canonical, checkpoint, store

FORMAT = "gverify-runlog-v1"


class LogError(ValueError):
    """A run log that cannot be read or compared (the message names the file and line)."""


@dataclass(frozen=True)
class StepDivergence:
    """The first step at which two logs differ, with both digests and both loss bits."""

    step: int
    digest_a: str
    digest_b: str
    loss_bits_a: str | None
    loss_bits_b: str | None

    @property
    def what(self) -> str:
        """"loss and digest", "digest" or "loss": which of the step's records differ."""
        d = self.digest_a != self.digest_b
        lo = self.loss_bits_a != self.loss_bits_b
        return "loss and digest" if d and lo else ("digest" if d else "loss")


def _int(where: str, name: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise TypeError(f"{where}: {name} is {describe(v)}; expected an int >= {low}")
    return int(v)


def loss_bits(loss: Any, tp: Any, where: str = "loss_bits") -> tuple[float, str]:
    """The loss as a float and its bits in the run's dtype (hex), from a Var or a number."""
    st = store.Store(tp, where)
    if isinstance(loss, gtape.Var):
        host = np.asarray(loss.tape.backend.to_numpy(loss.tape.value(loss)))
    else:
        host = np.asarray(loss)
    if host.size != 1 or host.dtype.kind not in "iuf":
        raise TypeError(f"{where}: loss is {describe(loss)}; expected a one-element Var or a "
                        "real number")
    x = host.reshape(()).astype(st.dtype)
    return float(x), "0x" + x.view(f"u{st.dtype.itemsize}").item().to_bytes(
        st.dtype.itemsize, "big").hex()


def run_shape(tp: Any, opt: Any, where: str) -> dict:
    """What makes two runs comparable: dtype, inner-product contract (where not "plain"), the
    tape's seed (where not 0), parameters (node index, shape), optimizer."""
    st = store.Store(tp, where)
    if opt is not None:
        st.check_optimizer(opt, where)
    shape = {"dtype": st.dtype.name, "params": [[i, list(st.shape(i))] for i in st.params],
             "optimizer": "none" if opt is None else str(opt.state_dict(False)["kind"])}
    if st.contract is not None:  # the inner-product contract, where it is not "plain"
        shape["inner"] = st.contract
    if st.seed != 0:  # the tape's key stream, where it is not the default
        shape["seed"] = str(st.seed)
    return shape


class RunLog:
    """A JSONL log of a run, one line every ``every`` steps (see the module docstring).

    ``checkpoint_every=K`` (with ``checkpoint_dir``) also writes a checkpoint every K steps
    (``save_checkpoint``; the line names it). ``resume_at=k`` keeps an existing log's lines up
    to step k and appends after them (a run resumed from its step-k checkpoint); otherwise
    the file is started afresh at the first ``record``.

    >>> import numpy as np, gtape as g, gopt, tempfile, os
    >>> tp = g.Tape(); w = tp.param(np.array([1.0, 2.0]))
    >>> opt = gopt.SGD(tp, lr=0.1); _ = opt.add(w)
    >>> log = RunLog(os.path.join(tempfile.mkdtemp(), "run.jsonl"))
    >>> loss = g.sum(w * w); tp.backward(loss); opt.step()
    >>> len(log.record(1, tp, opt, loss=loss))
    64
    """

    def __init__(self, path: Any, every: int = 1, checkpoint_every: int = 0,
                 checkpoint_dir: Any = None, meta: dict | None = None,
                 resume_at: int | None = None) -> None:
        where = "RunLog"
        self.path = Path(path)
        self.every = _int(where, "every", every, 1)
        self.checkpoint_every = _int(where, "checkpoint_every", checkpoint_every, 0)
        if self.checkpoint_every and checkpoint_dir is None:
            raise ValueError(f"{where}: checkpoint_every={checkpoint_every} needs "
                             "checkpoint_dir (where the checkpoints go)")
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.meta = {} if meta is None else meta
        json.dumps(self.meta)
        self._last = -1
        self._kept: list[str] | None = None
        if resume_at is not None:
            k = _int(where, "resume_at", resume_at, 0)
            header, lines = read_log(self.path)
            kept = [ln for ln in lines if ln["step"] <= k]
            self._kept = [json.dumps(header)] + [json.dumps(ln) for ln in kept]
            self._header = header
            self._last = k
        self._file = None

    def record(self, step: int, tp: Any, opt: Any = None, loss: Any = None,
               rng: Any = None) -> str | None:
        """Log step ``step`` (after its update); returns the digest, or None when the step is
        not one to log. ``loss`` (a Var or a number) is the step's loss; ``rng`` the data
        order's generator (or its state) a checkpoint of this step resumes with."""
        where = "RunLog.record"
        step = _int(where, "step", step, 0)
        if step <= self._last:
            raise ValueError(f"{where}: step {step} after step {self._last}; expected steps "
                             "in increasing order")
        ckpt = self.checkpoint_every and step % self.checkpoint_every == 0
        if step % self.every and not ckpt:
            self._last = step
            return None
        shape = run_shape(tp, opt, where)
        line: dict[str, Any] = {"step": step, "loss": None, "loss_bits": None}
        if loss is not None:
            line["loss"], line["loss_bits"] = loss_bits(loss, tp, where)
        line["digest"] = canonical.entries_digest(store.entries(tp, opt, where))
        if ckpt:
            d = self.checkpoint_dir / f"step-{step:08d}"
            meta = dict(self.meta)
            meta["log"] = os.path.relpath(self.path.resolve(), d.resolve())
            checkpoint.save_checkpoint(d, tp, opt, step, rng, meta)
            line["checkpoint"] = os.path.relpath(d.resolve(), self.path.resolve().parent)
        self._write(shape, line)
        self._last = step
        return line["digest"]

    def _write(self, shape: dict, line: dict) -> None:
        if self._file is None:
            header = {"format": FORMAT, **shape, "every": self.every, "meta": self.meta}
            if self._kept is not None and {k: v for k, v in self._header.items()
                                           if k in shape} != shape:
                raise LogError(f"RunLog.record: {self.path} is the log of another run shape "
                               f"({self._header}); this run is {shape}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w")  # noqa: SIM115 - held open across records
            first = self._kept if self._kept is not None else [json.dumps(header)]
            self._file.write("".join(s + "\n" for s in first))
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file (fsynced); idempotent."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_LINE_KEYS = {"step": int, "digest": str}


def read_log(path: Any) -> tuple[dict, list[dict]]:
    """A run log's header and step lines, every line checked (LogError naming file:line)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise LogError(f"read_log: cannot read {p} ({e})") from None
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()
    elif raw:
        raise LogError(f"read_log: {p}:{len(raw)}: the last line is truncated (no newline); "
                       "expected complete JSON lines")
    if not raw:
        raise LogError(f"read_log: {p} is empty; expected a header line written by RunLog")
    rows = []
    for n, s in enumerate(raw, 1):
        try:
            rows.append(json.loads(s))
        except ValueError as e:
            raise LogError(f"read_log: {p}:{n} is not a JSON line ({e}); the log is truncated "
                           "or damaged") from None
    header, lines = rows[0], rows[1:]
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise LogError(f"read_log: {p}:1 is not a {FORMAT} header; expected a log written "
                       "by RunLog")
    last = -1
    for n, ln in enumerate(lines, 2):
        if not isinstance(ln, dict) or any(not isinstance(ln.get(k), t) or isinstance(
                ln.get(k), bool) for k, t in _LINE_KEYS.items()) or len(ln["digest"]) != 64:
            raise LogError(f"read_log: {p}:{n} is not a step line; expected step (int), "
                           f"digest (64 hex digits), loss_bits")
        if ln["step"] <= last:
            raise LogError(f"read_log: {p}:{n}: step {ln['step']} after step {last}; "
                           "expected increasing steps")
        last = ln["step"]
    return header, lines


def compare_logs(a: Any, b: Any) -> StepDivergence | None:
    """The first step, among the steps both logs recorded, whose digest or loss bits differ;
    None when they all agree. Refuses (LogError) logs of different run shapes, damaged or
    truncated lines, and logs with no step in common."""
    (ha, la), (hb, lb) = read_log(a), read_log(b)
    keys = ("dtype", "inner", "seed", "params", "optimizer")
    absent = {"inner": "plain", "seed": "0"}
    sa, sb = ({k: h.get(k, absent.get(k)) for k in keys} for h in (ha, hb))
    if sa != sb:
        diff = [k for k in keys if sa[k] != sb[k]]
        raise LogError(f"compare_logs: {a} and {b} are logs of different run shapes (they "
                       f"differ in {diff}: {[sa[k] for k in diff]} vs {[sb[k] for k in diff]})"
                       "; only runs of one model, dtype, inner-product contract, tape seed and "
                       "optimizer compare")
    by_step = {ln["step"]: ln for ln in lb}
    common = [ln for ln in la if ln["step"] in by_step]
    if not common:
        raise LogError(f"compare_logs: {a} and {b} have no step in common (steps "
                       f"{_span(la)} and {_span(lb)})")
    for x in common:
        y = by_step[x["step"]]
        bits_a, bits_b = x.get("loss_bits"), y.get("loss_bits")
        loss_differs = bits_a is not None and bits_b is not None and bits_a != bits_b
        if x["digest"] != y["digest"] or loss_differs:
            return StepDivergence(x["step"], x["digest"], y["digest"], bits_a, bits_b)
    return None


def common_steps(a: Any, b: Any) -> list[int]:
    """The steps both logs recorded (what ``compare_logs`` compares)."""
    steps = {ln["step"] for ln in read_log(b)[1]}
    return [ln["step"] for ln in read_log(a)[1] if ln["step"] in steps]


def _span(lines: list[dict]) -> str:
    return f"{lines[0]['step']}..{lines[-1]['step']}" if lines else "none"
