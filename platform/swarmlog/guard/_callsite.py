"""What a call into a C function was given, read from the caller's bytecode.

A profile hook's ``c_call`` event carries the function but not its arguments. A few functions
are deterministic or not depending on them — ``time.gmtime()`` reads the clock,
``time.gmtime(secs)`` does not — so for those rows the guard reads the call instruction at the
caller's ``f_lasti`` (its argument count and keyword names) and, for each argument, the
instruction that pushed it: a constant, or a local, global or free variable whose current value
is the value passed, or an attribute of one (``obj.ts``, ``timezone.utc``) read without running
any code (a property or a module ``__getattr__`` is not called). An argument computed otherwise
(``f()``, ``a[i]``) is :data:`UNKNOWN`; arithmetic and literals are never ``None``
(:data:`NOT_NONE`). ``f(*args)`` has no readable shape at all.

Only the rare path pays: a shape is worked out once per call instruction (cached), and only
for calls of the few functions whose rows have a condition.
"""

from __future__ import annotations

import dis
import types
from dataclasses import dataclass
from typing import Any

__all__ = ["MISSING", "NOT_NONE", "UNKNOWN", "CallSite"]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISSING = _Marker("MISSING")
"""The argument was not passed."""
UNKNOWN = _Marker("UNKNOWN")
"""The argument was passed, computed by an expression the guard does not evaluate."""
NOT_NONE = _Marker("NOT_NONE")
"""The argument was passed, computed by arithmetic or a literal display: never ``None``."""

_LOADS = {"LOAD_CONST": "const", "LOAD_FAST": "fast", "LOAD_FAST_CHECK": "fast", "LOAD_DEREF": "fast",
          "LOAD_CLASSDEREF": "fast", "LOAD_GLOBAL": "global", "LOAD_NAME": "name"}
_NEVER_NONE = {"BINARY_OP", "BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP", "BUILD_CONST_KEY_MAP",
               "BUILD_STRING", "FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "COMPARE_OP", "IS_OP",
               "CONTAINS_OP", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "BUILD_SLICE", "LIST_TO_TUPLE"}


@dataclass(frozen=True, slots=True)
class _Shape:
    positional: int
    keywords: tuple[str, ...]
    producers: tuple[tuple[str, Any], ...]  # per pushed argument: (kind, const value or name)


# Keyed by id(code), the code object kept beside to check identity: hashing a code object hashes
# its bytecode and constants on every lookup.
_instructions: dict[int, tuple[types.CodeType, list[dis.Instruction], dict[int, int]]] = {}
_shapes: dict[tuple[int, int], tuple[types.CodeType, _Shape | None]] = {}
_CACHE_LIMIT = 4096


def _code_instructions(code: types.CodeType) -> tuple[list[dis.Instruction], dict[int, int]]:
    found = _instructions.get(id(code))
    if found is None or found[0] is not code:
        if len(_instructions) > _CACHE_LIMIT:
            _instructions.clear()
        listing = list(dis.get_instructions(code))
        found = _instructions[id(code)] = (code, listing, {ins.offset: i for i, ins in enumerate(listing)})
    return found[1], found[2]


def _effect(ins: dis.Instruction) -> int:
    arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
    return dis.stack_effect(ins.opcode, arg, jump=False)


def _shape(code: types.CodeType, lasti: int) -> _Shape | None:
    listing, index = _code_instructions(code)
    i = index.get(lasti)
    if i is None:
        return None
    ins = listing[i]
    keywords: tuple[str, ...] = ()
    if ins.opname == "CALL":  # 3.11: [KW_NAMES] PRECALL CALL; 3.12: [KW_NAMES] CALL
        j = i - 1
        if j >= 0 and listing[j].opname == "PRECALL":
            j -= 1
        if j >= 0 and listing[j].opname == "KW_NAMES":
            keywords = tuple(code.co_consts[listing[j].arg or 0])
            j -= 1
    elif ins.opname == "CALL_KW":  # 3.13: the keyword names are a constant pushed last
        j = i - 1
        if j < 0 or listing[j].opname != "LOAD_CONST":
            return None
        keywords = tuple(listing[j].argval)
        j -= 1
    else:  # CALL_FUNCTION_EX (f(*args)) and anything else: no readable shape
        return None
    count = ins.arg or 0
    producers: list[tuple[str, Any]] = []
    end = j
    for _ in range(count):  # the last argument first: each is the expression ending at `end`
        net, start = 0, end
        while start >= 0:
            step = listing[start]
            if step.is_jump_target or "JUMP" in step.opname or step.opname == "FOR_ITER":
                start = -1
                break
            net += _effect(step)
            if net >= 1:
                break
            start -= 1
        if start < 0 or net != 1:  # a conditional expression, or something pushing two values
            producers.extend([("unknown", None)] * (count - len(producers)))
            break
        last, first = listing[end], listing[start]
        kind = _LOADS.get(first.opname)
        if kind == "global" and (first.arg or 0) & 1:  # LOAD_GLOBAL that also pushes NULL: not an argument
            kind = None
        attrs = tuple(a.argval for a in listing[start + 1:end + 1])
        if kind is not None and all(a.opname == "LOAD_ATTR" for a in listing[start + 1:end + 1]):
            producers.append((kind, (first.argval, attrs)))
        elif last.opname in _NEVER_NONE:
            producers.append(("not_none", None))
        else:
            producers.append(("unknown", None))
        end = start - 1
    producers.reverse()
    return _Shape(positional=count - len(keywords), keywords=keywords, producers=tuple(producers))


class CallSite:
    """A C call as its caller made it: ``self`` (for a method) and the arguments the guard can see."""

    __slots__ = ("frame", "self_", "_shape")

    def __init__(self, frame: types.FrameType, self_: object) -> None:
        self.frame = frame
        self.self_ = self_
        code, lasti = frame.f_code, frame.f_lasti
        found = _shapes.get((id(code), lasti))
        if found is None or found[0] is not code:
            if len(_shapes) > _CACHE_LIMIT:
                _shapes.clear()
            found = _shapes[id(code), lasti] = (code, _shape(code, lasti))
        self._shape = found[1]

    @property
    def readable(self) -> bool:
        """Whether the call's arguments could be read at all (``f(*args)`` cannot)."""
        return self._shape is not None

    def arg(self, position: int, name: str | None = None) -> object:
        """The argument at ``position`` (or passed as ``name=``): its value, :data:`MISSING`,
        :data:`NOT_NONE` or :data:`UNKNOWN`."""
        shape = self._shape
        if shape is None:
            return UNKNOWN
        if name is not None and name in shape.keywords:
            index = shape.positional + shape.keywords.index(name)
        elif position < shape.positional:
            index = position
        else:
            return MISSING
        kind, found = shape.producers[index]
        if kind == "not_none":
            return NOT_NONE
        if kind == "unknown":
            return UNKNOWN
        name, attrs = found
        if kind == "const":
            value = name
        else:
            value = self._variable(kind, name)
        for attr in attrs:
            if value is UNKNOWN:
                break
            value = _static_attr(value, attr)
        return value

    def _variable(self, kind: str, name: str) -> object:
        frame = self.frame
        if kind == "fast":
            return frame.f_locals.get(name, UNKNOWN)
        if kind == "name" and name in frame.f_locals:
            return frame.f_locals[name]
        if name in frame.f_globals:
            return frame.f_globals[name]
        return frame.f_builtins.get(name, UNKNOWN)

    def absent(self, position: int, name: str | None = None) -> bool | None:
        """True if the argument was not passed or is ``None``; False if it is something else;
        None if the guard cannot tell."""
        value = self.arg(position, name)
        if value is MISSING or value is None:
            return True
        if value is UNKNOWN:
            return None
        return False


def _static_attr(obj: object, name: str) -> object:
    """``obj.name`` if it can be read without running code (no property, no ``__getattr__``)."""
    if isinstance(obj, types.ModuleType):
        return vars(obj).get(name, UNKNOWN)
    klass = obj if isinstance(obj, type) else type(obj)
    declared: object = UNKNOWN
    for base in klass.__mro__:
        if name in vars(base):
            declared = vars(base)[name]
            break
    if isinstance(obj, type):  # a class attribute: plain values only, not descriptors
        return UNKNOWN if hasattr(type(declared), "__get__") else declared
    if declared is not UNKNOWN and hasattr(type(declared), "__set__"):
        return UNKNOWN  # a data descriptor (a property, a slot) decides: not evaluated here
    instance = getattr(obj, "__dict__", None)
    if isinstance(instance, dict) and name in instance:
        return instance[name]
    if declared is not UNKNOWN and not hasattr(type(declared), "__get__"):
        return declared
    return UNKNOWN
