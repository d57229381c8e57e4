"""Checkpoints that resume bit-identically: parameters, optimizer state, the data order's RNG
state and the step counter, in a directory; no pickle; refused when damaged.

Layout of a checkpoint directory: ``state.npz`` holds the run's state as the named arrays a
digest hashes (``store.entries``: the tape's dtype, every parameter by node index, the
optimizer's scalars and buffers); ``manifest.json`` (written last: it commits the checkpoint)
holds the format tag, the step, the state's digest, the RNG state, free-form ``meta`` and a
SHA-256 over all of those. Loading recomputes both hashes before anything is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gtensor import describe, files

from . import canonical, store

FORMAT = "gverify-checkpoint-v1"
STATE, MANIFEST = "state.npz", "manifest.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: damaged, incomplete, or of another run."""


@dataclass
class Checkpoint:
    """A checkpoint read from disk (its hashes verified)."""

    path: Path
    step: int
    digest: str
    rng_state: dict | None
    meta: dict = field(default_factory=dict)
    entries: list[tuple[str, np.ndarray]] = field(default_factory=list, repr=False)


def _manifest_check(step: int, digest: str, rng: Any, meta: Any) -> str:
    body = json.dumps({"format": FORMAT, "step": step, "digest": digest, "rng": rng,
                       "meta": meta}, sort_keys=True)
    return canonical.sha256(body.encode())


def _rng_state(where: str, rng: Any) -> dict | None:
    if rng is None:
        return None
    if isinstance(rng, np.random.Generator):
        rng = rng.bit_generator.state
    if not isinstance(rng, dict) or "bit_generator" not in rng:
        raise TypeError(f"{where}: rng is {describe(rng)}; expected a numpy Generator, its "
                        "bit_generator.state dict, or None")
    try:
        return json.loads(json.dumps(rng))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: rng state is not JSON data ({e})") from None


def save_checkpoint(path: Any, tp: Any, opt: Any, step: int, rng: Any = None,
                    meta: dict | None = None) -> Path:
    """Write a checkpoint of ``tp`` + ``opt`` after ``step`` into directory ``path``.

    ``rng`` (a numpy Generator or its ``bit_generator.state``) is the data order's state to
    resume with; ``meta`` any JSON data the program needs to rebuild itself (its config).
    Both files are written atomically, the manifest last.
    """
    where = "save_checkpoint"
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise TypeError(f"{where}: step is {describe(step)}; expected an int >= 0")
    rng_state = _rng_state(where, rng)
    meta = {} if meta is None else meta
    try:
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: meta is not JSON data ({e}); expected a dict of JSON "
                        "values") from None
    ents = store.entries(tp, opt, where)
    digest = canonical.entries_digest(ents)
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    files.write_atomic(d / STATE, lambda f: np.savez(f, **dict(ents)))
    manifest = {"format": FORMAT, "step": int(step), "digest": digest, "rng": rng_state,
                "meta": meta, "entries": [n for n, _ in ents],
                "check": _manifest_check(int(step), digest, rng_state, meta)}
    files.write_atomic(d / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    return d


def read_checkpoint(path: Any) -> Checkpoint:
    """Read and verify a checkpoint directory (CheckpointError when damaged or incomplete)."""
    where = "read_checkpoint"
    d = Path(path)
    try:
        manifest = json.loads((d / MANIFEST).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{where}: {d} has no {MANIFEST}; expected a directory written "
                              "by save_checkpoint (an interrupted save never writes it)") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{where}: {d / MANIFEST} is damaged ({e})") from None
    keys = ("format", "step", "digest", "rng", "meta", "entries", "check")
    if not isinstance(manifest, dict) or any(k not in manifest for k in keys):
        raise CheckpointError(f"{where}: {d / MANIFEST} lacks {keys}; expected a manifest "
                              "written by save_checkpoint")
    if manifest["format"] != FORMAT:
        raise CheckpointError(f"{where}: {d} has format {manifest['format']!r}; expected "
                              f"{FORMAT!r}")
    step, digest, rng, meta = (manifest["step"], manifest["digest"], manifest["rng"],
                               manifest["meta"])
    if _manifest_check(step, digest, rng, meta) != manifest["check"]:
        raise CheckpointError(f"{where}: {d / MANIFEST} is damaged: its check hash does not "
                              "match its step, digest, RNG state and meta")
    try:
        with np.load(d / STATE, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise CheckpointError(f"{where}: {d} has no {STATE}") from None
    except Exception as e:  # zipfile, zlib and format errors of a damaged archive
        raise CheckpointError(f"{where}: {d / STATE} is damaged ({type(e).__name__}: {e})"
                              ) from None
    names = manifest["entries"]
    if sorted(names) != sorted(arrays):
        raise CheckpointError(f"{where}: {d / STATE} holds {sorted(arrays)}; the manifest "
                              f"lists {sorted(names)}")
    ents = [(n, arrays[n]) for n in names]
    if canonical.entries_digest(ents) != digest:
        raise CheckpointError(f"{where}: {d / STATE} is damaged: its digest does not match the "
                              f"manifest's ({digest[:16]}...); refusing to resume from it")
    return Checkpoint(d, int(step), digest, rng, meta, ents)


def load_checkpoint(path: Any, tp: Any, opt: Any, rng: np.random.Generator | None = None
                    ) -> Checkpoint:
    """Restore a checkpoint into ``tp`` (a tape or captured program), ``opt`` and ``rng``.

    The program rebuilds the same model and registers the same parameters first. Everything
    is checked before anything changes -- the hashes, the dtype, the parameters (node indices,
    shapes), the optimizer (kind, registered parameters, gopt's own checks) and the RNG's
    kind -- so a refused load leaves the run as it was. Returns the checkpoint (its ``step``
    is the step counter to continue from; ``meta`` what the program saved).
    """
    where = "load_checkpoint"
    ck = read_checkpoint(path) if not isinstance(path, Checkpoint) else path
    st = store.Store(tp, where)
    if opt is not None:
        st.check_optimizer(opt, where)
    got = dict(ck.entries)
    mine = dict(store.tape_entries(st))
    if str(got.get("tape.dtype")) != st.dtype.name:
        raise CheckpointError(f"{where}: the checkpoint holds a {got.get('tape.dtype')} run; "
                              f"this tape is {st.dtype.name}")
    saved = str(got.get("tape.contract", "plain"))
    if saved != (st.contract or "plain"):
        raise CheckpointError(f"{where}: the checkpoint holds a run under the {saved!r} "
                              f"inner-product contract; this tape's is "
                              f"{st.contract or 'plain'!r} (Tape(..., inner=...) must match)")
    saved_seed = str(got.get("tape.seed", "0"))
    if saved_seed != str(st.seed):
        raise CheckpointError(f"{where}: the checkpoint holds a run of a tape with seed "
                              f"{saved_seed}; this tape's seed is {st.seed} (Tape(..., seed=...) "
                              "must match: the modules' default keys come from it)")
    if got.get("tape.params") is None or got["tape.params"].tolist() != st.params:
        raise CheckpointError(f"{where}: the checkpoint's parameters are nodes "
                              f"{got.get('tape.params')}; this run's are {st.params} (rebuild "
                              "the same model first)")
    for i in st.params:
        a, b = got[f"param.{i}"], mine[f"param.{i}"]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CheckpointError(f"{where}: parameter node {i} is {a.dtype} {a.shape} in the "
                                  f"checkpoint; this run's is {b.dtype} {b.shape}")
    saved_states = [] if got.get("tape.states") is None else got["tape.states"].tolist()
    if saved_states != st.states:
        raise CheckpointError(f"{where}: the checkpoint's states (running statistics) are "
                              f"nodes {saved_states}; this run's are {st.states} (rebuild "
                              "the same model first)")
    for i in st.states:
        a, b = got[f"state.{i}"], mine[f"state.{i}"]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CheckpointError(f"{where}: state node {i} is {a.dtype} {a.shape} in the "
                                  f"checkpoint; this run's is {b.dtype} {b.shape}")
    kind = str(got.get("opt.kind"))
    if (opt is None) != (kind == "none"):
        raise CheckpointError(f"{where}: the checkpoint's optimizer is {kind!r}; got opt "
                              f"{describe(opt)}")
    if rng is not None:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"{where}: rng is {describe(rng)}; expected a numpy Generator or "
                            "None")
        saved = None if ck.rng_state is None else ck.rng_state.get("bit_generator")
        if saved != type(rng.bit_generator).__name__:
            raise CheckpointError(f"{where}: the checkpoint holds RNG state {saved}; rng is a "
                                  f"{type(rng.bit_generator).__name__} generator")
    if opt is not None:
        registered = [p.index for p in opt.params]
        if got["opt.params"].tolist() != registered:
            raise CheckpointError(f"{where}: the checkpoint's optimizer updates nodes "
                                  f"{got['opt.params'].tolist()}; opt has {registered} "
                                  "registered (register the same ones, in the same order)")
        state = {k[4:]: v for k, v in got.items() if k.startswith("opt.") and k != "opt.params"}
        opt.load_state_dict(state)  # checks everything first; refuses without a change
    for i in (*st.params, *st.states):
        st.write(i, got[f"param.{i}" if i in st.params else f"state.{i}"])
    if rng is not None:
        rng.bit_generator.state = ck.rng_state
    now = canonical.entries_digest(store.entries(tp, opt, where))
    if now != ck.digest:  # pragma: no cover - every field was checked above
        raise RuntimeError(f"{where}: the restored state's digest {now[:16]}... differs from "
                           f"the checkpoint's {ck.digest[:16]}...")
    return ck
