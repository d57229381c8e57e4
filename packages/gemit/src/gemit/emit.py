"""emit_c / emit_cuda: a per-example loss of a tape and its gradient as one standalone function.

>>> import numpy as np, gtape as g
>>> from gemit import emit_c
>>> tp = g.Tape()
>>> w, x = tp.param(np.zeros(3)), tp.const(np.ones(3))
>>> src = emit_c(tp, g.sum(w * x), params=[w], inputs=[x], name="grad")
>>> "double grad(const double *params, const double *example, double *grad_out)" in src
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from gtape.leaves import PARAM, Leaf
from gtape.tape import Tape
from gtape.trace import check_episode, check_var_of, trace
from gtape.var import Var
from gtensor import describe
from gtensor.dtypes import TYPED_DTYPES, float_type

from .plan import plan
from .render import render, signature

_IDENT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"


def emit_c(tp: Tape, loss: Var, params: Sequence[Var], inputs: Sequence[Var],
           name: str = "grad") -> str:
    """C source of ``T name(const T *params, const T *example, T *grad_out)`` returning the loss.

    ``params`` / ``example`` / ``grad_out`` hold the given Vars' values (gradients) raveled in C
    order and concatenated in the given order; T is ``double`` (``float`` for a float32 tape).
    int64 / bool leaves among ``inputs`` (labels, ids, masks) are read from an extra
    ``const long long *example_ids`` parameter after ``example`` (same rule, a bool true where
    nonzero); the signature has it only when there are such inputs. Bitwise equal to the tape
    when compiled with ``-ffp-contract=off``.
    """
    return _emit("emit_c", tp, loss, params, inputs, name, "c")


def emit_cuda(tp: Tape, loss: Var, params: Sequence[Var], inputs: Sequence[Var],
              name: str = "grad") -> str:
    """CUDA source of ``__device__ T name(...)``: the body of ``emit_c``, run by one thread."""
    return _emit("emit_cuda", tp, loss, params, inputs, name, "cuda")


def _emit(where: str, tp: Tape, loss: Var, params: Sequence[Var], inputs: Sequence[Var],
          name: str, target: str) -> str:
    tp, li = check_episode(where, tp, loss)
    if not isinstance(name, str) or not name or name[0] not in _IDENT or \
            not all(ch in _IDENT or ch.isdigit() for ch in name):
        raise ValueError(f"{where}: name {name!r} is not a C identifier")
    p_idx = _leaves(where, tp, li, params, "params")
    i_idx = _leaves(where, tp, li, inputs, "inputs")
    for i in p_idx:
        if tp.node(i).op is not PARAM:
            raise ValueError(f"{where}: params holds node {i} (a const); expected param Vars "
                             "(tp.param), whose gradients grad_out receives")
    both = set(p_idx) & set(i_idx)
    if both or len(set(p_idx)) != len(p_idx) or len(set(i_idx)) != len(i_idx):
        raise ValueError(f"{where}: a Var is listed twice in params / inputs (nodes "
                         f"{sorted(both) or 'repeated'}); each leaf has one place in one vector")
    _supported(where, tp, li)
    t = trace(tp, loss, "sim", where=where)
    prog = plan(t, p_idx, i_idx)
    names = {n.index: n.name for n in t.nodes}
    head = _header(where, prog, tp, p_idx, i_idx, name, target)
    return render(prog, name, target, head, names)


def _supported(where: str, tp: Tape, li: int) -> None:
    """NotImplementedError naming the first op up to the loss that has no kernel to emit."""
    ft = float_type(tp.dtype)
    for n in tp.nodes()[:li + 1]:
        if not n.is_leaf and not n.op.kernel_set(ft):
            raise NotImplementedError(f"{where}: node {n.index} is op {n.name!r}, which has no "
                                      f"{ft.suffix} kernel; gemit emits only ops with kernels")


def _leaves(where: str, tp: Tape, li: int, vs: Sequence[Var], what: str) -> list[int]:
    """Node indices of ``vs``: leaf Vars of ``tp`` at or before the loss."""
    if isinstance(vs, Var) or not isinstance(vs, Sequence):
        raise TypeError(f"{where}: {what} is {describe(vs)}; expected a list of Vars")
    out = []
    for k, v in enumerate(vs):
        check_var_of(where, tp, f"{what}[{k}]", v)
        node = tp.node(v)
        if not isinstance(node.op, Leaf):
            raise ValueError(f"{where}: {what}[{k}] is node {v.index} ({node.name}); expected a "
                             "leaf (tp.param / tp.const)")
        if v.index > li:
            raise ValueError(f"{where}: {what}[{k}] is node {v.index}, recorded after the loss "
                             f"(node {li}); the loss cannot depend on it")
        out.append(v.index)
    return out


def _header(where: str, prog, tp: Tape, p_idx: list[int], i_idx: list[int], name: str,
            target: str) -> str:
    def layout(idx: list[int]) -> str:
        parts, start = [], 0
        for i in idx:
            shape = tp.node(i).shape
            size = int(np.prod(shape))
            parts.append(f"node {i} {shape} at [{start}, {start + size})")
            start += size
        return "; ".join(parts) or "(empty)"

    typed = {i for i in i_idx if tp.node(i).op is not PARAM and _is_typed(tp, i)}
    ids = [f"   example_ids ({prog.n_ids}): "
           f"{layout([i for i in i_idx if i in typed])} (int64; a bool is true where nonzero)"]
    ops = sorted({k.name for k in prog.kernels})
    return "\n".join([
        f"/* Generated by gemit.{where} from a gtape episode ({len(prog.calls)} kernel calls);",
        "   do not edit: regenerate from the tape. Each kernel is gtensor's own text, run by one",
        "   thread; compile with -ffp-contract=off (C) or --fmad=false (CUDA).",
        f"   inner products: the tape's {tp.inner!r} contract"
        f"{' (one fma() per term, from +0.0)' if tp.inner == 'fma' else ''}",
        f"   {signature(prog, name)}{' (__device__)' if target == 'cuda' else ''}",
        f"   params   ({prog.n_params}): {layout(p_idx)}",
        f"   example  ({prog.n_example}): {layout([i for i in i_idx if i not in typed])}",
        *(ids if typed else []),
        f"   grad_out ({prog.n_params}): d loss / d params, same layout; returns the loss",
        f"   kernels: {', '.join(ops)} */",
    ])


def _is_typed(tp: Tape, i: int) -> bool:
    """Whether leaf ``i`` holds int64 / bool data (an ``example_ids`` input)."""
    return np.dtype(tp.var_at(i).dtype) in TYPED_DTYPES
