"""Lazy re-exports (PEP 562), one rule for every package that re-exports names of its modules
(``api``, ``verify``): a public name's module is imported on its first use, never when the
package is, so a process pays only for the names it uses (a CLI verb, an engine module that needs
one class of a package)."""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Mapping, Optional, Tuple

#: public name -> (the module that defines it, its name there; None when the name is the module)
Table = Mapping[str, Tuple[str, Optional[str]]]


def exports(package: str, where: Table, namespace: Dict[str, object]) -> Tuple[Callable[[str], object],
                                                                               Callable[[], List[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``globals()``: ``namespace``) over
    ``where``: a name is looked up in its module on first use and kept in the namespace (later uses
    are plain attribute reads); ``dir()`` lists every name, imported or not."""

    def __getattr__(name: str) -> object:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(found[0])
        value = module if found[1] is None else getattr(module, found[1])
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


__all__ = ["Table", "exports"]
