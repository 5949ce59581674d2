"""Upcasters: the code that carries an event across a version that changed its meaning.

Most new versions need none: Avro schema resolution fills a new field's default and
drops a removed one. When a version changes what a value *means* (v2's integer
``priority`` becomes v3's ``urgency`` enum), Avro cannot know how to map one to the
other, and a function ``v<N>_to_v<N+1>`` in ``schemas/<event_type>/upcasters.py``,
beside the schemas it bridges, does it.

An upcaster takes the whole decoded record (envelope and payload) in version N's
shape and returns it in version N+1's shape; it must be pure (replay runs it on
every old event, forever). The decoder plans the chain once per writer fingerprint:
Avro resolution up to the first version an upcaster starts from, then the
upcasters, with Avro resolution between them.

This module finds those files, checks their names against the registry's versions,
and returns ``{(event_type, N): fn}`` for ``Decoder(registry, upcasters=...)``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import SchemaError
from .registry import SchemaRegistry

__all__ = ["UPCASTERS_FILE", "Upcaster", "discover_upcasters", "upcasters_for"]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""Whole record of version N in, whole record of version N+1 out."""

UPCASTERS_FILE = "upcasters.py"

_NAME = re.compile(r"^v(?P<n>[0-9]+)_to_v(?P<m>[0-9]+)$")

# One discovery per registry: a Decoder is built per replay / sink, the files do not
# change under a running process, and re-executing them would only cost time.
_BY_REGISTRY: weakref.WeakKeyDictionary[SchemaRegistry, dict[tuple[str, int], Upcaster]] = \
    weakref.WeakKeyDictionary()


def discover_upcasters(schema_dirs: Path | Sequence[Path], *,
                       registry: SchemaRegistry | None = None) -> dict[tuple[str, int], Upcaster]:
    """Every upcaster in ``<dir>/*/upcasters.py`` of each layer, checked against the schemas there.

    ``registry`` is the one loaded from ``schema_dirs`` (loaded here if not given).
    Raises :class:`~swarmlog.errors.SchemaError` naming the file and the function if an
    upcasters file sits where no schemas are, cannot be imported, defines a public
    function not named ``v<N>_to_v<N+1>``, or names a version that does not exist.
    """
    layers = [Path(schema_dirs)] if isinstance(schema_dirs, Path) else [Path(d) for d in schema_dirs]
    registry = registry if registry is not None else SchemaRegistry.load(layers)
    found: dict[tuple[str, int], Upcaster] = {}
    for layer in layers:
        for path in sorted(layer.glob(f"*/{UPCASTERS_FILE}")):
            found.update(_load_file(path, registry, layer=layer))
    return found


def upcasters_for(registry: SchemaRegistry) -> dict[tuple[str, int], Upcaster]:
    """The upcasters beside ``registry``'s schema files (what ``Decoder(registry)`` uses).

    Looks in each event type's directory (where its ``v<N>.avsc`` files are), so it
    works for registries loaded from any directory; the result is cached per registry.
    """
    cached = _BY_REGISTRY.get(registry)
    if cached is None:
        cached = {}
        for event_type in registry.event_types():
            path = registry.latest(event_type).path.parent / UPCASTERS_FILE
            if path.is_file():
                cached.update(_load_file(path, registry))
        _BY_REGISTRY[registry] = cached
    return dict(cached)


def _load_file(path: Path, registry: SchemaRegistry, *, layer: Path | None = None) -> dict[tuple[str, int], Upcaster]:
    event_type = path.parent.name
    known = {s.version for s in registry.versions(event_type)}
    # In another layer than the type's schemas, it would bridge versions it does not sit beside.
    if not known or (layer is not None and registry.latest(event_type).path.parent != path.parent):
        raise SchemaError(
            f"{path}: there are no schemas for {event_type!r} beside it; upcasters live in the "
            f"directory of the event type whose versions they bridge"
        )
    module = _import(path, event_type)
    found: dict[tuple[str, int], Upcaster] = {}
    for name, obj in sorted(vars(module).items()):
        match = _NAME.match(name)
        defined_here = inspect.isfunction(obj) and obj.__module__ == module.__name__
        if match is None:
            if defined_here and not name.startswith("_"):
                raise SchemaError(
                    f"{path}: function {name!r} is not named v<N>_to_v<N+1>; upcasters are named "
                    f"after the versions they bridge (e.g. v2_to_v3), helpers are private (_{name})"
                )
            continue
        n, m = int(match["n"]), int(match["m"])
        if name != f"v{n}_to_v{m}":
            raise SchemaError(f"{path}: {name!r} has leading zeros; name it v{n}_to_v{m}")
        if m != n + 1:
            raise SchemaError(
                f"{path}: {name!r} must bridge one version (v{n}_to_v{n + 1}); chain several "
                f"upcasters instead of skipping versions"
            )
        if n not in known or m not in known:
            missing = n if n not in known else m
            raise SchemaError(
                f"{path}: {name!r} names v{missing}, but {event_type} has versions "
                f"v{min(known)}..v{max(known)}; add schemas/{event_type}/v{missing}.avsc first, or remove {name}"
            )
        if not callable(obj):
            raise SchemaError(f"{path}: {name!r} must be a function taking a v{n} record and returning a v{m} record")
        try:
            inspect.signature(obj).bind(object())
        except TypeError:
            raise SchemaError(
                f"{path}: {name}{inspect.signature(obj)} must take exactly one argument, the whole v{n} record"
            ) from None
        except ValueError:  # some builtins have no signature; calling them is the test
            pass
        found[(event_type, n)] = obj
    return found


def _import(path: Path, event_type: str) -> ModuleType:
    """Import one upcasters file by path, under a module name unique to its directory.

    The name carries the event type and a digest of the directory, so that two schema
    directories (the repo's and a test's copy) never share a module.
    """
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"_swarmlog_upcasters_{event_type.replace('.', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SchemaError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise SchemaError(f"{path}: importing it failed: {exc!r}") from exc
    return module
