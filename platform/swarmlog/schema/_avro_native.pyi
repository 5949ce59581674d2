"""Type stub of the C extension swarmlog.schema._avro_native (_avro_native.c): compiled Avro readers in C."""

from collections.abc import Callable
from typing import Any

NULL: int
BOOLEAN: int
LONG: int
FLOAT: int
DOUBLE: int
STRING: int
BYTES: int
FIXED: int
ENUM: int
UNION: int
ARRAY: int
MAP: int
RECORD: int

class Program:
    def __init__(self, program: tuple[Any, ...], fallback: Callable[[bytes, int], Any]) -> None: ...
    def __call__(self, b: bytes, i: int, /) -> Any: ...
