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
INT: int
OPTIONAL: int

class Program:
    def __init__(self, program: tuple[Any, ...], fallback: Callable[[bytes, int], Any]) -> None: ...
    def __call__(self, b: bytes, i: int, /) -> Any: ...

class EventEncoder:
    def __init__(self, prefix: bytes, type_version: bytes, payload: tuple[Any, ...] | None,
                 write_payload: Callable[[Any], bytes], fallback: Callable[..., bytes]) -> None: ...
    def encode_event(self, event_id: str, run_id: str, agent: str, to: str | None, causes: Any,
                     payload: Any, /) -> bytes: ...
