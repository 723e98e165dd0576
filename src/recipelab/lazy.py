"""A package's entry points, imported on first use.

``recipelab status`` and ``logs`` import the packages whose records they read; a package
that imported its heavy modules (torch, Optuna) with itself would make them slow. So a
package names its entry points and the module each lives in, and its ``__getattr__`` asks
:func:`lazy_export`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def lazy_export(package: str, exports: Mapping[str, str], name: str) -> Any:
    """``name`` from the module ``exports[name]``, imported now; AttributeError, as Python's
    own, for a name the package does not export (submodules are asked for here first)."""
    try:
        module = exports[name]
    except KeyError:
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)
