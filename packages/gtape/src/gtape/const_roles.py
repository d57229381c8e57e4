"""What a const leaf is for: data a caller hands in, or a per-shape constant the model makes.

A captured program (ggpu-replay) refreshes its data inputs step by step and holds its
per-shape constants without being asked. The rule, applied where gtape turns host data into
consts:

* **constant**: a const that gtape makes from shapes alone -- the causal mask of
  ``is_causal``, the ``-inf`` that masks fill in, ``masked_fill``'s fill value -- and any const
  made while the forward of a module ported by ``from_torch`` runs from host data that is not
  (a view of) an argument of the outermost forward call: the position ids of
  ``torch.arange(t)``, a mask cut from a registered buffer (``self.bias[:, :, :T, :T] == 0``);
* **data**: everything else (the default): consts the caller makes (``tp.const``), host
  arrays handed to ops or layers outside a ported forward, and inside one the arguments of its
  outermost call and views of them (``idx``, ``targets.view(-1)``).

Host computations inside a ported forward are frozen at capture: a mask computed there from
the batch (``idx == pad``) is a new array, so it counts as a constant; pass such a mask as an
argument of the forward to make it data.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> q = tp.const(np.ones((1, 3, 2)), name="q")
>>> out = g.scaled_dot_product_attention(q, q, q, is_causal=True)
>>> [role_of(tp.var_at(n.index)) for n in tp.nodes() if n.name == "const"]
['data', 'constant', 'constant']
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from .leaves import CONST
from .var import Var

CONSTANT = "constant"
DATA = "data"

# per tape: const node -> (its serial, role); entries of nodes a reset_to dropped are told
# apart by the serial
_ROLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_local = threading.local()


def mark(v: Var, role: str) -> None:
    """Record const ``v``'s role (CONSTANT or DATA)."""
    if role not in (CONSTANT, DATA):
        raise ValueError(f"const_roles.mark: role is {role!r}; expected {CONSTANT!r} or "
                         f"{DATA!r}")
    _ROLES.setdefault(v.tape, {})[v.index] = (v.serial, role)


def role_of(v: Var) -> str:
    """CONSTANT or DATA (the default) for const ``v``."""
    got = _ROLES.get(v.tape, {}).get(v.index)
    return DATA if got is None or got[0] != v.serial else got[1]


def made_input(out: Var, position: int) -> Var:
    """The Var of input ``position`` of ``out``'s node (a const the call that recorded ``out``
    made from host data)."""
    tape = out.tape
    return tape._var(tape._inputs[out.index][position])


def mark_made(out: Var, start: int, role: str) -> None:
    """Mark every const among the inputs of ``out``'s node recorded at index >= ``start``
    (those the call that recorded ``out`` made from host operands) as ``role``."""
    tape = out.tape
    for j in tape._inputs[out.index]:
        if j >= start and tape._op[j] is CONST:
            mark(tape._var(j), role)


def mark_since(tape: Any, start: int, role: str) -> None:
    """Mark the consts recorded at index >= ``start`` that have no role yet as ``role``."""
    roles = _ROLES.get(tape, {})
    for j in range(start, len(tape)):
        if tape._op[j] is CONST:
            v = tape._var(j)
            got = roles.get(j)
            if got is None or got[0] != v.serial:
                mark(v, role)


# ---------------------------------------------------------------- ported forwards
def in_ported_forward() -> bool:
    """Whether the forward of a module ported by ``from_torch`` is running in this thread."""
    return getattr(_local, "entries", None) is not None


@contextlib.contextmanager
def ported_call(args: tuple, kwargs: dict) -> Iterator[None]:
    """The outermost call of a ported module's forward: its host array arguments (numpy, or
    torch tensors) are the caller's data while it runs."""
    if in_ported_forward():
        yield
        return
    entries = []
    for x in (*args, *kwargs.values()):
        host = _as_host(x)
        if host is not None:
            entries.append(host)
    _local.entries = entries
    try:
        yield
    finally:
        _local.entries = None


def _as_host(x: Any) -> np.ndarray | None:
    """``x``'s numpy data without a copy (a numpy array, or a CPU torch tensor), else None."""
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__
    if (mod == "torch" or mod.startswith("torch.")) and hasattr(x, "numpy"):
        try:
            return x.detach().numpy()
        except (RuntimeError, TypeError):
            return None
    return None


def from_caller(host: Any) -> bool:
    """Whether host data ``host`` is the caller's: outside a ported forward always; inside,
    when it shares memory with an argument of the outermost call."""
    entries = getattr(_local, "entries", None)
    if entries is None:
        return True
    arr = _as_host(host)
    if arr is None:
        return False
    return any(np.may_share_memory(arr, e) for e in entries)


def host_role(*hosts: Any) -> str:
    """DATA when some of ``hosts`` is the caller's data (``from_caller``), else CONSTANT."""
    return DATA if any(from_caller(h) for h in hosts) else CONSTANT


__all__ = ["CONSTANT", "DATA", "from_caller", "host_role", "in_ported_forward", "made_input",
           "mark", "mark_made", "mark_since", "ported_call", "role_of"]
