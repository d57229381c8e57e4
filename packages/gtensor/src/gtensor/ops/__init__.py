"""The op set. Importing this package registers every op in ``REGISTRY``: every module of the
package is imported, so an op defined in a new file here is registered with no other change."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

from .registry import REGISTRY, Op, get  # noqa: E402

__all__ = ["REGISTRY", "Op", "get"]
