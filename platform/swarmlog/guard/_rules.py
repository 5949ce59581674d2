"""The table compiled into what the hook looks up: function objects, C methods by type, code objects.

Each refused row's dotted path is resolved to the object a handler would call, and filed where
the hook finds it with one dict lookup:

* a C function (``time.time``), or a C method bound to one object (``random.random``, bound to
  ``random``'s hidden generator): by the function object itself, in :data:`EXACT`;
* a C method of any instance (``socket.socket.connect``), or a C classmethod on any subclass
  (``datetime.datetime.now`` on ``class MyDateTime(datetime)``): by the type of ``self``,
  learned on first sight, in :func:`rules_for_type` / :func:`rules_for_class`;
* a Python function, method or class (``uuid.uuid4``, ``os.environ.get``, ``threading.Thread``):
  by its code object (a class by its ``__init__``'s), with the instance it must be bound to, if
  any, in :data:`CODES` — looked up by the code's qualified name, then compared by identity: a
  code object hashes its bytecode and constants on every lookup (the larger the function, the
  longer), a name's hash is cached in the string.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

from .table import COVERAGE, Row

__all__ = ["CODES", "EXACT", "MethodRule", "called_from_exempt", "code_entries", "resolve", "rules_for_class",
           "rules_for_type"]


def resolve(call: str) -> object:
    """The object a dotted path names (``"socket.socket.connect"``); raises LookupError."""
    parts = call.split(".")
    if len(parts) == 1:
        parts = ["builtins", *parts]
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                obj = getattr(obj, name)
        except AttributeError:
            break
        return obj
    raise LookupError(f"guard table row {call!r} does not resolve to anything")


@dataclass(frozen=True, slots=True)
class MethodRule:
    """A C method refused on any instance (or, for a classmethod, any subclass) of ``owner``."""

    owner: type
    descriptor: object
    classmethod: bool
    rows: tuple[Row, ...]

    def matches(self, fn: object, self_: object) -> bool:
        if self.classmethod:
            bound = self.descriptor.__get__(None, self_)  # type: ignore[attr-defined]
        else:
            # With its type: a METH_METHOD descriptor (SimpleQueue.get) crashes binding without one.
            bound = self.descriptor.__get__(self_, type(self_))  # type: ignore[attr-defined]
        # Equal bound builtins share `self` and the C function, so an override does not match.
        return bool(fn == bound)


EXACT: dict[object, tuple[Row, ...]] = {}
"""C function object -> the rows naming it, in table order."""
Entries = tuple[tuple[object, Row], ...]
CODES: dict[str, tuple[tuple[types.CodeType, Entries], ...]] = {}
"""co_qualname -> ((code object, its entries), ...); an entry is (the instance the function must
be bound to, or None; row), bound ones first."""
_METHODS: dict[tuple[type, object, bool], list[Row]] = {}
_method_rules: list[MethodRule] = []
_exempt_callers: dict[str, tuple[types.CodeType, ...]] = {}  # row.case -> codes whose calls pass


def _find_descriptor(owner: type, name: str) -> object:
    for klass in owner.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    raise LookupError(f"{owner.__qualname__} has no attribute {name!r}")


def _code_of(obj: object) -> tuple[types.CodeType, object] | None:
    """(code, instance it is bound to or None) of a Python function, method or class."""
    if isinstance(obj, types.MethodType):
        func = obj.__func__
        if not isinstance(func, types.FunctionType):
            return None
        bound = obj.__self__
        return func.__code__, (None if isinstance(bound, type) else bound)  # a classmethod: any class
    if isinstance(obj, types.FunctionType):
        return obj.__code__, None
    if isinstance(obj, type):
        init = vars(obj).get("__init__")
        if isinstance(init, types.FunctionType):
            return init.__code__, None
    return None


def _register(row: Row) -> None:
    try:
        obj = resolve(row.call)
    except LookupError:
        if row.optional:
            return
        raise
    if obj is None and row.optional:
        return
    if row.unless_called_from:
        codes = set()
        for path in row.unless_called_from:
            found = _code_of(resolve(path))
            if found is None:
                raise TypeError(f"guard table row {row.case!r}: {path!r} is not a Python function")
            codes.add(found[0])
        _exempt_callers[row.case] = tuple(codes)
    if isinstance(obj, types.BuiltinFunctionType):  # a C function, or a C method bound to its self
        owner = obj.__self__
        if isinstance(owner, type):  # a classmethod: also refused on subclasses
            _METHODS.setdefault((owner, _find_descriptor(owner, obj.__name__), True), []).append(row)
        EXACT[obj] = (*EXACT.get(obj, ()), row)
        return
    if isinstance(obj, types.MethodDescriptorType):  # a C method of any instance
        _METHODS.setdefault((obj.__objclass__, obj, False), []).append(row)
        return
    found = _code_of(obj)
    if found is None:
        raise TypeError(f"guard table row {row.case!r} resolves to {obj!r}, which the guard cannot match")
    code, bound = found
    entries = [*code_entries(code), (bound, row)]
    entries.sort(key=lambda entry: entry[0] is None)  # bound to one instance first: the more specific row
    others = tuple(pair for pair in CODES.get(code.co_qualname, ()) if pair[0] is not code)
    CODES[code.co_qualname] = (*others, (code, tuple(entries)))


def code_entries(code: types.CodeType) -> Entries:
    """The entries of the rows whose function has this code object (none: ``()``)."""
    for candidate, entries in CODES.get(code.co_qualname, ()):
        if candidate is code:
            return entries
    return ()


for _row in COVERAGE:
    if _row.refused:
        _register(_row)
_method_rules.extend(MethodRule(owner, descriptor, cm, tuple(rows))
                     for (owner, descriptor, cm), rows in _METHODS.items())


def called_from_exempt(row: Row, caller: types.FrameType | None) -> bool:
    """Whether ``caller`` is one of the functions the row lets call it (``unless_called_from``)."""
    codes = _exempt_callers.get(row.case)
    if codes is None or caller is None:
        return False
    code = caller.f_code
    return any(code is c for c in codes)


# What the hook learns about the `self` of C methods, so that it pays one dict lookup per C
# call on a type it has seen before: type of an instance -> {method name: rules}, and for
# classmethods (whose self is a class) class -> {method name: rules}. {} means "nothing here".
BY_TYPE: dict[type, dict[str, list[MethodRule]]] = {}
BY_CLASS: dict[type, dict[str, list[MethodRule]]] = {}
LOOK_UP_AS_CLASS: dict[str, list[MethodRule]] = {"": []}
"""In :data:`BY_TYPE`, for a metaclass: look ``self`` up as a class in :data:`BY_CLASS`."""
_CACHE_LIMIT = 4096  # classes created at run time (namedtuple, create_model) must not pile up


def _learn(cache: dict[type, dict[str, list[MethodRule]]], klass: type,
           classmethods: bool) -> dict[str, list[MethodRule]]:
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
    if not classmethods and issubclass(klass, type):
        cache[klass] = LOOK_UP_AS_CLASS
        return LOOK_UP_AS_CLASS
    found: dict[str, list[MethodRule]] = {}
    for rule in _method_rules:
        if rule.classmethod == classmethods and issubclass(klass, rule.owner):
            found.setdefault(rule.descriptor.__name__, []).append(rule)  # type: ignore[attr-defined]
    for rules in found.values():  # the most derived owner names the call
        rules.sort(key=lambda r: klass.__mro__.index(r.owner))
    cache[klass] = found
    return found


def rules_for_type(klass: type) -> dict[str, list[MethodRule]]:
    """The C-method rules for instances of ``klass`` (the slow path: first sight of a type)."""
    return _learn(BY_TYPE, klass, False)


def rules_for_class(klass: type) -> dict[str, list[MethodRule]]:
    """The C-classmethod rules for ``klass`` itself (the slow path: first sight of a class)."""
    return _learn(BY_CLASS, klass, True)
