"""Canonical JSON and the hashes that compare states and streams.

Hashes are over *canonical JSON* (sorted keys, no whitespace, UTF-8), never over
Python's ``hash()`` (salted per process) or ``repr`` of floats across versions.
The same canonical text is what recorded LLM requests and effect arguments are
compared by (``ctx.llm``, ``ctx.effect``), so there is one encoder for both.

The stream hash covers every message's offset and exact bytes, so two logs hash
equal only if they hold the same bytes at the same offsets.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import struct
from typing import Any


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset)):
        # A set's iteration order depends on the process's hash seed: sort it, so that the
        # same state hashes the same in every process.
        try:
            return sorted(value)
        except TypeError:
            return sorted(value, key=canonical)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


# Built once: json.dumps with any non-default option builds a new JSONEncoder per call,
# which costs more than encoding a small payload. Same output as json.dumps(value, ...).
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # None without the C accelerator
_encode_str = json.encoder.encode_basestring  # ensure_ascii=False
_canonical_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=_json_default).encode


def canonical(value: Any) -> str:
    """Canonical JSON text: sorted keys, no whitespace; bytes as hex, sets sorted.

    What states are hashed by and what recorded requests and results are compared by.
    """
    if _c_make_encoder is None:
        return _canonical_encode(value)
    # What JSONEncoder.encode runs for these options, without its two Python frames: ctx.send
    # calls this inside the handler, where the guard's profile hook makes every call cost.
    # A fresh markers dict each time, as JSONEncoder's (a shared one would be shared by threads).
    return "".join(_c_make_encoder({}, _json_default, _encode_str, None, ":", ",", True, False, True)(value, 0))


def canonical_json(value: Any) -> bytes:
    """:func:`canonical` as UTF-8 bytes."""
    return _canonical_encode(value).encode()


def state_hash(state: Any) -> str:
    """sha256 of the state's canonical JSON."""
    return hashlib.sha256(canonical_json(state)).hexdigest()


class StreamHasher:
    """sha256 over (offset, length, bytes) of every message in order."""

    __slots__ = ("_h", "count")

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.count = 0

    def update(self, offset: int, value: bytes | None) -> None:
        value = value or b""
        self._h.update(_FRAME.pack(offset, len(value)) + value)
        self.count += 1

    def update_batch(self, msgs: list[Any]) -> None:
        """:meth:`update` for each of a batch of messages, in order."""
        update = self._h.update
        pack = _FRAME.pack
        for m in msgs:
            value = m.value() or b""
            update(pack(m.offset(), len(value)) + value)
        self.count += len(msgs)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


_FRAME = struct.Struct(">QI")
"""A message's frame in the stream hash: 8-byte big-endian offset, 4-byte big-endian length."""
