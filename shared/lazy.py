"""A package's names loaded on first use (PEP 562's module `__getattr__`): importing
`shared.plan` must not import the compiler stack (seconds), so that the atlas's look-up
answers in well under one."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def exports(package: str, table: dict[str, str]) -> Callable[[str], object]:
    """The `__getattr__` of `package`: each name of `table` from the module it maps to."""

    def attribute(name: str) -> object:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(table[name]), name)

    return attribute
