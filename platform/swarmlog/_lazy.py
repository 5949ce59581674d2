"""Public names imported when first used (PEP 562), for a package face whose machinery is heavy.

Every ``swarmlog`` command starts by importing ``swarmlog``, so whatever the package's face
imports, every command pays for at start-up: the determinism guard's tables alone cost a short
command more than its own work, and ``swarmlog replay`` of a short log runs none of it
(``cli_replay_3`` in bench/cli.py). A face lists its heavy names here instead; the first lookup
imports the module and binds the name in the face, so every later lookup is a plain attribute read.

The one private module at the top of the package: every face imports it, so it is a leaf of the
import graph, belonging to no wing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(namespace: dict[str, Any], table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``table``'s names (name -> relative module) in ``namespace``."""
    package = namespace["__package__"]
    module_name = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
