"""Checks of what a trainer is given (params, batches) and the cut into microbatches.

Every refusal happens on the driver, before any task is sent, and names the call, the argument,
what came and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gtensor import describe


def params(where: str, init: Any, dtype: np.dtype) -> dict[str, np.ndarray]:
    """``init`` ({name: real array}) as fresh C-contiguous host arrays (not yet rounded)."""
    if not isinstance(init, Mapping) or not init:
        raise TypeError(f"{where}: init_params is {describe(init)}; expected a non-empty dict "
                        "{name: numpy array}")
    out = {}
    for name, value in init.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where}: init_params has the key {name!r}; expected non-empty "
                            "str names")
        a = np.asarray(value)
        if a.dtype.kind not in "iuf" or a.dtype.kind == "b":
            raise TypeError(f"{where}: init_params[{name!r}] is {describe(value)}; expected "
                            f"real numbers (they become {dtype.name})")
        out[name] = np.array(a, order="C", copy=True)
    return out


def same_params(where: str, arg: str, got: Any, shapes: Mapping[str, tuple[int, ...]],
                dtype: np.dtype | None = None) -> dict[str, np.ndarray]:
    """``got`` checked to hold exactly the params ``shapes`` names, each of its shape."""
    if not isinstance(got, Mapping):
        raise TypeError(f"{where}: {arg} is {describe(got)}; expected a dict "
                        "{name: numpy array}")
    missing = [n for n in shapes if n not in got]
    extra = [n for n in got if n not in shapes]
    if missing or extra:
        raise ValueError(f"{where}: {arg} has names {sorted(map(str, got))}; expected exactly "
                         f"{sorted(shapes)} (missing {missing}, unknown {extra})")
    out = {}
    for name, shape in shapes.items():
        a = np.asarray(got[name])
        if a.dtype.kind not in "iuf" or (dtype is not None and a.dtype != dtype):
            want = dtype.name if dtype is not None else "real numbers"
            raise TypeError(f"{where}: {arg}[{name!r}] is {describe(got[name])}; expected "
                            f"{want}")
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{where}: {arg}[{name!r}] has shape {tuple(a.shape)}; expected "
                             f"{tuple(shape)} (the shape of init_params[{name!r}])")
        out[name] = np.array(a, order="C", copy=True)
    return out


def batch(where: str, got: Any, keys: tuple[str, ...] | None, m: int) -> dict[str, np.ndarray]:
    """``got`` ({key: array of B rows}) checked: the trainer's keys (``keys``; None: any
    non-empty set, fixed by the first step), one common B > 0 with B % m == 0, real data."""
    if not isinstance(got, Mapping) or not got:
        raise TypeError(f"{where}: batch is {describe(got)}; expected a non-empty dict "
                        "{name: numpy array of B rows}")
    names = [k for k in got]
    if any(not isinstance(k, str) for k in names):
        raise TypeError(f"{where}: batch has keys {names!r}; expected str keys")
    if keys is not None and set(names) != set(keys):
        missing = [k for k in keys if k not in got]
        extra = [k for k in names if k not in keys]
        raise ValueError(f"{where}: batch has keys {sorted(names)}; expected {sorted(keys)} "
                         f"(missing {missing}, unknown {extra})")
    out, rows = {}, None
    for k in (keys or tuple(names)):
        a = np.asarray(got[k])
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{where}: batch[{k!r}] is {describe(got[k])}; expected real "
                            "numbers (float rows become const Vars; int and bool rows pass "
                            "as numpy arrays)")
        if a.ndim < 1:
            raise ValueError(f"{where}: batch[{k!r}] is 0-d; expected an array of B rows "
                             "(first axis)")
        if rows is None:
            rows = a.shape[0]
        elif a.shape[0] != rows:
            raise ValueError(f"{where}: batch[{k!r}] has {a.shape[0]} rows but "
                             f"batch[{next(iter(out))!r}] has {rows}; expected the same B "
                             "rows in every entry")
        out[k] = np.ascontiguousarray(a)
    if rows == 0 or rows % m:
        raise ValueError(f"{where}: the batch has B = {rows} rows; expected a positive multiple "
                         f"of microbatch = {m} (B % m == 0: the batch is cut into B/m "
                         "microbatches of m rows, in order)")
    return out


def cut(data: Mapping[str, np.ndarray], m: int) -> list[dict[str, np.ndarray]]:
    """The batch cut into B/m microbatches of m rows, in row order (copies)."""
    rows = next(iter(data.values())).shape[0]
    return [{k: np.array(a[lo:lo + m]) for k, a in data.items()} for lo in range(0, rows, m)]


def indices(where: str, got: Any, rows: int | None, m: int) -> np.ndarray:
    """B row indices into the resident data (``load_data``): ints in [0, rows), B % m == 0."""
    try:
        a = np.asarray(got)
    except ValueError:
        a = np.zeros(0, object)
    if a.dtype.kind not in "iu" or a.ndim != 1:
        raise TypeError(f"{where}: batch is {describe(got)}; expected a non-empty dict "
                        "{name: numpy array of B rows}, or a 1-d int array of B row indices "
                        "into the resident data (load_data)")
    if rows is None:
        raise ValueError(f"{where}: got {a.size} row indices but no data is resident; call "
                         "load_data(data) first (or pass the rows: {name: array})")
    if a.size == 0 or a.size % m:
        raise ValueError(f"{where}: the batch has B = {a.size} rows; expected a positive "
                         f"multiple of microbatch = {m}")
    if a.min() < 0 or a.max() >= rows:
        raise ValueError(f"{where}: row indices lie in [{a.min()}, {a.max()}]; expected them in "
                         f"[0, {rows}) (the resident data's rows)")
    return np.ascontiguousarray(a, dtype=np.int64)


def positive_int(where: str, arg: str, x: Any) -> int:
    """``x`` checked to be an int >= 1."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{where}: {arg} is {describe(x)}; expected an int >= 1")
    return int(x)
