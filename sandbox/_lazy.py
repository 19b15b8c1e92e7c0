"""Package attributes imported on first use (PEP 562), so that importing a package costs
only what is used from it: `import sandbox` loads no submodule, and a process that needs
one module (the spawner, the parse worker, `sandbox run`) loads that module and what it
imports, not the whole library."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def exports(package: str, where: Mapping[str, Iterable[str]]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: each name in `where[module]` is imported
    from `module` when first read, then kept in the package's namespace."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*module_of, *vars(importlib.import_module(package))})

    return __getattr__, __dir__
