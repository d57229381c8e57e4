"""torch's tensor methods on Vars, spelled with recorded ops (so they differentiate), bound onto
``Var`` by ``bind`` when gtape is imported.

Shape methods: ``transpose(d0, d1)`` (two ints: torch's swap; a tuple or none: numpy's
permutation / reversal), ``permute``, ``view`` / ``reshape``, ``unsqueeze``, ``squeeze``,
``flatten``, ``expand``, ``split``, ``chunk``, ``size``, ``dim``, ``numel``, ``contiguous``
(the Var itself: every value is contiguous), ``t``. Math: ``exp``, ``log``, ``tanh``,
``sigmoid``, ``relu``, ``sqrt``, ``abs``, ``softmax(dim)``, ``log_softmax(dim)``,
``masked_fill(mask, value)``, ``matmul``. A movement is a copy (``reshape``, ``transpose``,
``slice``, ``broadcast_to`` ops), never a view.

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> x = tp.const(np.arange(24.0).reshape(2, 3, 4))
>>> x.transpose(1, 2).shape, x.view(6, -1).shape, x.unsqueeze(0).shape, x.size(-1)
((2, 4, 3), (6, 4), (1, 2, 3, 4), 4)
>>> [p.shape for p in x.split(2, dim=-1)], x.permute(2, 0, 1).shape
([(2, 3, 2), (2, 3, 2)], (4, 2, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import ops
from .var import Var


def _axis(where: str, d: Any, ndim: int, extra: int = 0) -> int:
    """``d`` as an axis in [0, ndim + extra) (negative counts from the end)."""
    n = ndim + extra
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not -n <= d < n:
        raise IndexError(f"{where}: dim {d!r} is out of range for a Var of {ndim} dimensions "
                         f"(expected an int in [{-n}, {n}))")
    return int(d) % n if n else 0


def _ints(where: str, dims: tuple) -> tuple:
    """``f(2, 3)`` or ``f((2, 3))`` as a tuple of ints."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise TypeError(f"{where}: {d!r} is not an int; expected ints")
    return tuple(int(d) for d in dims)


def transpose(self: Var, *dims: Any) -> Var:
    """Two ints: swap those dims (torch's ``transpose(d0, d1)``); a tuple: numpy's permutation;
    none: reverse the axes (numpy's)."""
    if len(dims) == 2 and not isinstance(dims[0], (tuple, list)):
        nd = self.ndim
        a, b = (_axis("transpose", d, nd) for d in _ints("transpose", dims))
        perm = list(range(nd))
        perm[a], perm[b] = perm[b], perm[a]
        return ops.transpose(self, perm)
    if not dims:
        return ops.transpose(self)
    return permute(self, *dims)


def permute(self: Var, *dims: Any) -> Var:
    """The axes in the order ``dims`` (torch's ``permute``; numpy's ``transpose(axes)``)."""
    perm = _ints("permute", dims)
    nd = self.ndim
    axes = [_axis("permute", d, nd) for d in perm]
    if sorted(axes) != list(range(nd)):
        raise ValueError(f"permute: dims {perm} are not a permutation of the {nd} dims of a Var "
                         f"of shape {self.shape}")
    return ops.transpose(self, axes)


def t(self: Var) -> Var:
    """The transpose of a Var of at most 2 dims (torch's ``t``)."""
    if self.ndim > 2:
        raise ValueError(f"t: the Var has shape {self.shape}; expected at most 2 dims (use "
                         "transpose(d0, d1))")
    return self if self.ndim < 2 else ops.transpose(self)


def view(self: Var, *shape: Any) -> Var:
    """Same elements in row-major order, new shape (torch's ``view``: a ``reshape`` copy)."""
    return ops.reshape(self, _ints("view", shape))


def unsqueeze(self: Var, dim: int) -> Var:
    """A size-1 axis inserted at ``dim`` (in [-ndim-1, ndim])."""
    s = list(self.shape)
    s.insert(_axis("unsqueeze", dim, len(s), extra=1), 1)
    return ops.reshape(self, s)


def squeeze(self: Var, dim: int | Sequence[int] | None = None) -> Var:
    """Size-1 axes removed: all of them, or those of ``dim`` (an axis of another size stays, as
    torch)."""
    s = self.shape
    if dim is None:
        drop = {i for i, n in enumerate(s) if n == 1}
    else:
        ds = dim if isinstance(dim, (tuple, list)) else (dim,)
        drop = {a for a in (_axis("squeeze", d, len(s)) for d in ds) if s[a] == 1}
    return ops.reshape(self, [n for i, n in enumerate(s) if i not in drop])


def flatten(self: Var, start_dim: int = 0, end_dim: int = -1) -> Var:
    """Dims ``start_dim`` .. ``end_dim`` (inclusive) merged into one (torch's ``flatten``)."""
    s = self.shape
    if not s:
        return ops.reshape(self, (1,))
    a, b = _axis("flatten", start_dim, len(s)), _axis("flatten", end_dim, len(s))
    if a > b:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return ops.reshape(self, (*s[:a], int(np.prod(s[a:b + 1], dtype=np.int64)), *s[b + 1:]))


def expand(self: Var, *sizes: Any) -> Var:
    """Broadcast to ``sizes`` (-1 keeps a dim; new dims go in front), torch's ``expand``: a
    ``broadcast_to`` copy."""
    want = _ints("expand", sizes)
    s = self.shape
    if len(want) < len(s):
        raise ValueError(f"expand: sizes {want} have fewer dims than the Var's shape {s}")
    lead = len(want) - len(s)
    full = tuple(n if n != -1 or i < lead else s[i - lead] for i, n in enumerate(want))
    if any(n < 0 for n in full):
        raise ValueError(f"expand: sizes {want}: -1 is only allowed for an existing dim")
    return self if full == s else ops.broadcast_to(self, full)


def split(self: Var, split_size_or_sections: int | Sequence[int], dim: int = 0) -> list[Var]:
    """Pieces along ``dim``: of ``split_size`` each (the last may be smaller), or of the given
    section sizes (torch's ``split``); each piece a ``slice``."""
    d = _axis("split", dim, self.ndim)
    n = self.shape[d]
    sizes = split_size_or_sections
    if isinstance(sizes, (int, np.integer)) and not isinstance(sizes, bool):
        if sizes < 1:
            raise ValueError(f"split: split_size is {sizes}; expected an int >= 1")
        sizes = [min(int(sizes), n - i) for i in range(0, n, int(sizes))] or [0]
    else:
        sizes = list(_ints("split", (sizes,)))
        if sum(sizes) != n or any(k < 0 for k in sizes):
            raise ValueError(f"split: sections {sizes} do not sum to dim {dim}'s size {n}")
    out, at = [], 0
    for k in sizes:
        out.append(ops.slice(self, d, at, at + k))
        at += k
    return out


def chunk(self: Var, chunks: int, dim: int = 0) -> list[Var]:
    """``chunks`` pieces of ceil(size / chunks) along ``dim`` (fewer when it divides so),
    torch's ``chunk``."""
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise ValueError(f"chunk: chunks is {chunks!r}; expected an int >= 1")
    n = self.shape[_axis("chunk", dim, self.ndim)]
    return split(self, max(1, -(-n // int(chunks))), dim)


def size(self: Var, dim: int | None = None) -> Any:
    """The shape (a tuple), or the size of one dim (torch's ``size``)."""
    s = self.shape
    return s if dim is None else s[_axis("size", dim, len(s))]


def dim(self: Var) -> int:
    """The number of dims (torch's ``dim()``; ``ndim`` too)."""
    return self.ndim


def numel(self: Var) -> int:
    """The number of elements."""
    return int(np.prod(self.shape, dtype=np.int64))


def contiguous(self: Var) -> Var:
    """The Var itself: every value on a tape is a contiguous array (torch's no-op case)."""
    return self


def masked_fill(self: Var, mask: Any, value: Any) -> Var:
    """``value`` where ``mask`` is true, else the Var (``gtape.attention.masked_fill``)."""
    from .attention import masked_fill as _masked_fill
    return _masked_fill(self, mask, value)


def _unary(name: str, doc: str) -> Any:
    fn = getattr(ops, name)

    def method(self: Var) -> Var:
        return fn(self)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


def _reduction(name: str, doc: str) -> Any:
    fn = getattr(ops, name)

    def method(self: Var, dim: Any = None, keepdim: bool = False) -> Var:
        return fn(self, None if dim == () else dim, keepdim)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


def softmax(self: Var, dim: int = -1) -> Var:
    """``g.softmax(self, dim)``."""
    return ops.softmax(self, dim)


def log_softmax(self: Var, dim: int = -1) -> Var:
    """``g.log_softmax(self, dim)``."""
    return ops.log_softmax(self, dim)


def matmul(self: Var, other: Any) -> Var:
    """``self @ other`` (torch.matmul's rules)."""
    return ops.matmul(self, other)


METHODS = {f.__name__: f for f in (
    transpose, permute, t, view, unsqueeze, squeeze, flatten, expand, split, chunk, size, dim,
    numel, contiguous, masked_fill, softmax, log_softmax, matmul,
    _unary("exp", "e ** self."), _unary("log", "The natural log."),
    _unary("tanh", "tanh(self)."), _unary("sigmoid", "1 / (1 + exp(-self))."),
    _unary("relu", "max(self, 0)."), _unary("sqrt", "The square root."),
    _unary("abs", "|self|."), _unary("neg", "-self."),
    _reduction("amax", "The maximum over ``dim`` (all for None / ()): ``g.amax``."),
    _reduction("amin", "The minimum over ``dim`` (all for None / ()): ``g.amin``."),
    _reduction("prod", "The serial product over ``dim`` (all for None): ``g.prod``."))}


def bind(cls: type) -> None:
    """Set each method of ``METHODS`` on ``cls`` (``Var``) where it has none of that name."""
    for name, fn in METHODS.items():
        if name not in vars(cls):
            setattr(cls, name, fn)


__all__ = ["METHODS", "bind"]
