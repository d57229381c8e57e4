"""torch's keyword habits on numpy-named functions: ``dim=`` for ``axis=`` and ``keepdim=`` for
``keepdims=`` (``g.sum(x, dim=1, keepdim=True)``, ``g.softmax(x, dim=-1)``).

``torch_dims(fn)`` wraps a function that has an ``axis`` (or ``keepdims``) parameter so that
the torch spelling is accepted too; giving both spellings of one parameter is refused. The
wrapper keeps the function's name, docstring and signature (``gtape.surface`` reads them).

>>> import numpy as np, gtape as g
>>> tp = g.Tape()
>>> g.sum(tp.const(np.ones((2, 3))), dim=1, keepdim=True).shape
(2, 1)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

ALIASES = {"dim": "axis", "keepdim": "keepdims"}  # torch's keyword -> numpy's


def torch_dims(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` accepting ``dim=`` / ``keepdim=`` for its ``axis`` / ``keepdims`` (unchanged when
    it has neither)."""
    sig = inspect.signature(fn)
    aliases = {t: n for t, n in ALIASES.items() if n in sig.parameters and t not in sig.parameters}
    if not aliases:
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for torch_name, name in aliases.items():
            if torch_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{fn.__name__}: both {name}= and {torch_name}= were given; "
                                    f"expected one of them (torch's {torch_name} is numpy's "
                                    f"{name})")
                kwargs[name] = kwargs.pop(torch_name)
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    wrapper.torch_aliases = dict(aliases)  # type: ignore[attr-defined]
    return wrapper


def normalize(where: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with torch's keyword names replaced by numpy's (both given: TypeError)."""
    out = dict(kwargs)
    for torch_name, name in ALIASES.items():
        if torch_name in out:
            if name in out:
                raise TypeError(f"{where}: both {name}= and {torch_name}= were given; expected "
                                "one of them")
            out[name] = out.pop(torch_name)
    return out
