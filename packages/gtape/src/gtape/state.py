"""Model state in and out: the checks of ``load_state_dict`` and safetensors model files.

``save(model, path)`` writes ``model.state_dict()`` with safetensors' numpy API (no pickle),
atomically; ``load(model, path)`` reads it back (``safetensors.numpy.load_file``) and loads
it with ``load_state_dict``: the same all-or-nothing checks, so a refused file changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gtensor import describe
from gtensor.files import write_atomic

if TYPE_CHECKING:
    from .modules import IncompatibleKeys, Module
    from .var import Var


def _listing(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:8])
    return shown + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def check_state(where: str, params: dict[str, Var], state: Any, strict: bool,
                buffers: dict[str, np.ndarray] | None = None
                ) -> tuple[list[tuple[Var, np.ndarray]], list[tuple[str, np.ndarray]],
                           IncompatibleKeys]:
    """The (param, host array) pairs and (buffer name, array) pairs to load, and the skipped
    keys; raises before any write: ValueError for missing/unexpected keys (strict), a wrong
    shape or a tied param given two different values, TypeError for a dtype or a value that
    is not an array."""
    from .modules import IncompatibleKeys

    buffers = buffers or {}
    if not isinstance(state, Mapping):
        raise TypeError(f"{where}: state_dict is {describe(state)}; expected a mapping "
                        "{name: array} (e.g. model.state_dict(), or a torch state_dict)")
    known = {**params, **buffers}
    missing = [k for k in known if k not in state]
    unexpected = [k for k in state if k not in known]
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing key(s) {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected key(s) {_listing(unexpected)}")
        raise ValueError(f"{where}: {' and '.join(parts)}; the model's keys are "
                         f"{_listing(list(known))} (pass strict=False to load the common "
                         "keys only); nothing was loaded")
    loads: dict[tuple[int, int], tuple[str, Var, np.ndarray]] = {}
    for name, p in params.items():
        if name not in state:
            continue
        arr = _host(where, name, state[name])
        dt = p.tape.dtype
        if arr.dtype.kind != "f":
            raise TypeError(f"{where}: {name!r} has dtype {arr.dtype}; expected floating "
                            f"point values (the tape is {dt.name}); nothing was loaded")
        if arr.dtype.itemsize > dt.itemsize:
            raise TypeError(f"{where}: {name!r} is {arr.dtype} but the tape is {dt.name}: "
                            "loading would round every value; convert it first (e.g. "
                            f"arr.astype(np.{dt.name})); nothing was loaded")
        if tuple(arr.shape) != p.shape:
            raise ValueError(f"{where}: {name!r} has shape {tuple(arr.shape)}; the model's "
                             f"param has shape {p.shape} (Linear weights are (out_features, "
                             "in_features), as in torch); nothing was loaded")
        key = (id(p.tape), p.index)
        if key in loads:  # a tied param under a second name: the same values, or refused
            first, _, prev = loads[key]
            if not np.array_equal(prev.astype(dt), arr.astype(dt), equal_nan=True):
                raise ValueError(f"{where}: {first!r} and {name!r} are one tied param but the "
                                 "state gives them different values; nothing was loaded")
            continue
        loads[key] = (name, p, arr)
    bufs = []
    for name, have in buffers.items():
        if name not in state:
            continue
        arr = _host(where, name, state[name])
        if tuple(arr.shape) != tuple(have.shape):
            raise ValueError(f"{where}: buffer {name!r} has shape {tuple(arr.shape)}; the "
                             f"model's has shape {tuple(have.shape)}; nothing was loaded")
        if not np.can_cast(arr.dtype, have.dtype, "safe"):
            raise TypeError(f"{where}: buffer {name!r} is {arr.dtype}, which does not convert "
                            f"exactly to the model's {have.dtype}; nothing was loaded")
        bufs.append((name, arr.astype(have.dtype)))
    return ([(p, arr) for _, p, arr in loads.values()], bufs,
            IncompatibleKeys(missing, unexpected))


def _host(where: str, name: str, value: Any) -> np.ndarray:
    """``value`` as a host numpy array (numpy, torch tensors, gtensor host arrays)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value).view(np.ndarray)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: {name!r} is {describe(value)}, which is not an array "
                        f"({e}); nothing was loaded") from None


def _check_module(where: str, model: Any) -> Module:
    from .modules import Module

    if not isinstance(model, Module):
        raise TypeError(f"{where}: model is {describe(model)}; expected a gtape.nn Module "
                        "(e.g. g.nn.Sequential(...))")
    return model


def save(model: Module, path: str | Path) -> Path:
    """Write ``model.state_dict()`` to ``path`` as a safetensors file (atomically)."""
    from safetensors.numpy import save as to_bytes

    # NOTE: np.asarray(order="C"), not ascontiguousarray: that makes a 0-d buffer (BatchNorm's
    # num_batches_tracked) 1-d
    sd = {k: np.asarray(v, order="C") for k, v in _check_module("save", model).state_dict().items()}
    if not sd:
        raise ValueError("save: the model has no parameters; nothing to write")
    dtypes = {p.tape.dtype.name for p in model.parameters()}
    data = to_bytes(sd, metadata={"format": "gtape", "dtype": ",".join(sorted(dtypes))})
    return write_atomic(path, lambda f: f.write(data))


def load(model: Module, path: str | Path, strict: bool = True) -> IncompatibleKeys:
    """Load a safetensors file (``save``'s, or one written from a torch state dict) into
    ``model`` with ``load_state_dict`` (all or nothing)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    _check_module("load", model)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"load: {str(path)!r} is not a file; expected a safetensors "
                                "file written by gtape.nn.save")
    try:
        sd = load_file(p)
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"load: {str(path)!r} is not a readable safetensors file ({e}); "
                         "nothing was loaded") from None
    return model.load_state_dict(sd, strict=strict)
