"""Compile emitted C with the system compiler and call it through ctypes (tests, rung 5)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from gtensor.dtypes import float_type

CFLAGS = ("-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=c99")


def c_compiler() -> str:
    """The system C compiler ($CC, cc or gcc); RuntimeError when there is none."""
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    raise RuntimeError("gemit.build: no C compiler found ($CC, cc, gcc or clang)")


class GradFn:
    """An emitted ``grad`` loaded from a shared object: ``fn(params, example) -> (loss, grad)``;
    ``fn(params, example, ids)`` for a function with ``example_ids`` (``n_ids`` > 0)."""

    def __init__(self, path: str, name: str, dtype: np.dtype, n_params: int,
                 n_example: int, n_ids: int = 0) -> None:
        self.path, self.name, self.dtype = path, name, np.dtype(dtype)
        self.n_params, self.n_example, self.n_ids = n_params, n_example, n_ids
        ct = np.ctypeslib.as_ctypes_type(float_type(self.dtype).np)
        self._lib = ctypes.CDLL(path)
        self._fn = getattr(self._lib, name)
        ptr = ctypes.POINTER(ct)
        self._iptr = ctypes.POINTER(ctypes.c_longlong)
        ids = [self._iptr] if n_ids else []
        self._fn.argtypes = [ptr, ptr, *ids, ptr]
        self._fn.restype = ct
        self._ptr = ptr
        self._batch = getattr(self._lib, f"{name}_batch")
        self._batch.argtypes = [ptr, ptr, *ids, ctypes.c_longlong, ptr, ptr]
        self._batch.restype = None

    def __call__(self, params: np.ndarray, example: np.ndarray,
                 ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The loss (a 0-d array) and the gradient vector for one example (``ids``: its int64
        ``example_ids`` vector, where the function has one)."""
        p = self._vector(params, self.n_params, "params")
        x = self._vector(example, self.n_example, "example")
        idv = self._ids(ids, (self.n_ids,), "ids")
        g = np.empty(self.n_params, self.dtype)
        loss = self._fn(p.ctypes.data_as(self._ptr), x.ctypes.data_as(self._ptr),
                        *idv, g.ctypes.data_as(self._ptr))
        return np.array(loss, dtype=self.dtype), g

    def batch(self, params: np.ndarray, examples: np.ndarray,
              ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-example losses (n,) and gradients (n, n_params) of the rows of ``examples``
        (and of ``ids``, (n, n_ids) int64, where the function takes ``example_ids``)."""
        p = self._vector(params, self.n_params, "params")
        x = np.ascontiguousarray(examples, dtype=self.dtype)
        if x.ndim != 2 or x.shape[1] != self.n_example:
            raise ValueError(f"GradFn {self.name}.batch: examples has shape {x.shape}; expected "
                             f"(n, {self.n_example})")
        n = x.shape[0]
        idv = self._ids(ids, (n, self.n_ids), "ids")
        losses = np.empty(n, self.dtype)
        grads = np.empty((n, self.n_params), self.dtype)
        self._batch(p.ctypes.data_as(self._ptr), x.ctypes.data_as(self._ptr), *idv, n,
                    losses.ctypes.data_as(self._ptr), grads.ctypes.data_as(self._ptr))
        return losses, grads

    def _vector(self, a: np.ndarray, n: int, what: str) -> np.ndarray:
        a = np.asarray(a)
        if a.dtype != self.dtype or a.size != n:
            raise ValueError(f"GradFn {self.name}: {what} is {a.dtype} with {a.size} elements; "
                             f"expected {self.dtype} with {n}")
        return np.ascontiguousarray(a).ravel()

    def _ids(self, ids: np.ndarray | None, shape: tuple, what: str) -> list:
        """``[pointer]`` to the int64 ids (of ``shape``), or ``[]`` for a function without."""
        if not self.n_ids:
            if ids is not None:
                raise ValueError(f"GradFn {self.name}: got {what}, but the function takes no "
                                 "example_ids (n_ids = 0); expected None")
            return []
        a = None if ids is None else np.asarray(ids)
        if a is None or a.dtype != np.int64 or a.shape != shape:
            got = "None" if a is None else f"{a.dtype} of shape {a.shape}"
            raise ValueError(f"GradFn {self.name}: {what} is {got}; expected int64 of shape "
                             f"{shape} (the example_ids)")
        return [np.ascontiguousarray(a).ctypes.data_as(self._iptr)]  # keeps its array alive


def batch_wrapper(name: str, dtype: object, n_params: int, n_example: int,
                  n_ids: int = 0) -> str:
    """C text of ``void {name}_batch(params, X, [I,] n, L, G)``: ``name`` on each row of X (and
    of the int64 ids I, where ``n_ids`` > 0) in turn."""
    t = float_type(dtype).ctype
    ids_param = "const long long *I, " if n_ids else ""
    ids_arg = f"I + i * {n_ids}LL, " if n_ids else ""
    return f"""
void {name}_batch(const {t} *params, const {t} *X, {ids_param}long long n, {t} *L, {t} *G)
{{
    for (long long i = 0; i < n; ++i)
        L[i] = {name}(params, X + i * {n_example}LL, {ids_arg}G + i * {n_params}LL);
}}
"""


def compile_c(source: str, name: str, dtype: object, n_params: int, n_example: int,
              workdir: str | None = None, n_ids: int = 0) -> GradFn:
    """Compile ``source`` (from ``emit_c``) into a shared object and load ``name`` from it.

    ``n_ids``: the length of the ``example_ids`` vector of a function with int64 / bool inputs
    (0: the function has none). A per-example loop ``{name}_batch`` is appended
    (``GradFn.batch``); no arithmetic is added.
    """
    source = source + batch_wrapper(name, dtype, n_params, n_example, n_ids)
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    out = Path(workdir or tempfile.mkdtemp(prefix="gemit-"))
    out.mkdir(parents=True, exist_ok=True)
    src, lib = out / f"gemit_{key}.c", out / f"gemit_{key}.so"
    if not lib.exists():
        src.write_text(source)
        tmp = out / f"gemit_{key}.{os.getpid()}.so"
        cmd = [c_compiler(), *CFLAGS, "-o", str(tmp), str(src), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"gemit.compile_c: {' '.join(cmd)} failed:\n{proc.stderr}")
        os.replace(tmp, lib)
    return GradFn(str(lib), name, np.dtype(dtype), n_params, n_example, n_ids)
