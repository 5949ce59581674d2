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
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

__all__ = ["FRAME", "SHORT_SHA256", "StreamHasher", "canonical", "canonical_json", "frame", "sha256_digest",
           "short_sha256", "state_hash"]

try:
    from json.encoder import c_make_encoder  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - CPython always has it
    c_make_encoder = None


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


_reference_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=_json_default).encode
"""The definition of canonical JSON: ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``, bytes as hex and sets sorted."""


def _make_canonical_encode() -> Callable[[Any], str]:
    """:data:`_reference_encode`'s output, with CPython's C encoder built once.

    ``JSONEncoder.encode`` builds a new C encoder on every call, which costs more than
    encoding a small value (most of what a two-key state's encoding took; the figures in
    bench/README.md, "The figures behind the code's comments"). This runs for every
    message a handler sends and, for the state digests, after every step. Without
    circular-reference markers (they cannot be reset between calls), a cycle ends in
    RecursionError, turned into the ValueError the reference encoder raises.
    """
    if c_make_encoder is None:  # not CPython
        return _reference_encode
    encoder = c_make_encoder(None, _json_default, encode_basestring, None, ":", ",", True, False, True)
    join = "".join

    def canonical(value: Any) -> str:
        try:
            return join(encoder(value, 0))
        except RecursionError:
            raise ValueError("circular reference (or nesting too deep to encode)") from None

    return canonical


canonical = _make_canonical_encode()
"""``canonical(value)``: canonical JSON text: sorted keys, no whitespace; bytes as hex, sets sorted.

What states are hashed by and what recorded requests and results are compared by. ctx.send
calls this inside the handler, where the guard's profile hook adds to the cost of every call: it
is the encoding function itself (one Python call and one C call), no wrapper, no JSONEncoder
frames."""


def canonical_json(value: Any) -> bytes:
    """:func:`canonical` as UTF-8 bytes."""
    return canonical(value).encode()


try:  # CPython's own sha256, beside OpenSSL's (3.11: _sha256; 3.12 on: _sha2)
    from _sha256 import sha256 as _builtin_sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other versions and builds
    try:
        from _sha2 import sha256 as _builtin_sha256  # type: ignore[import-not-found]
    except ImportError:
        _builtin_sha256 = hashlib.sha256

SHORT_SHA256 = 256
"""Inputs shorter than this are hashed by :data:`short_sha256`."""

short_sha256: Callable[[bytes], Any] = _builtin_sha256
"""A sha256 constructor for short inputs (a step's derived draw, a small state's canonical JSON):
CPython's own implementation, where there is one, rather than OpenSSL's. The digests are the same
(sha256 is sha256); what differs is the cost. Between a handler's calls OpenSSL's code and state
are out of the caches, and setting up its context then costs more than hashing a short input
(measured in a ring agent's step loop, ``swarm.agent_steps_cpu``) — while OpenSSL is the faster
per byte. Hence the cut-over at :data:`SHORT_SHA256` bytes (:func:`sha256_digest`); the figures
in bench/README.md, "The figures behind the code's comments"."""


def sha256_digest(data: bytes) -> bytes:
    """The 32-byte sha256 of ``data``: :data:`short_sha256` under :data:`SHORT_SHA256` bytes,
    OpenSSL's ``hashlib.sha256`` from there on."""
    return (short_sha256 if len(data) < SHORT_SHA256 else hashlib.sha256)(data).digest()


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
        self._h.update(frame(offset, value))
        self.count += 1

    def update_batch(self, msgs: list[Any]) -> None:
        """:meth:`update` for each of a batch of messages, in order."""
        update = self._h.update
        pack = FRAME.pack
        for m in msgs:
            value = m.value() or b""
            update(pack(m.offset(), len(value)) + value)
        self.count += len(msgs)

    def sink(self, n: int) -> Callable[[bytes], None]:
        """The hash's own ``update``, for a loop that hashes ``n`` messages itself, counted here.

        For a per-message loop that does other work too (the plain replay's
        :meth:`~swarmlog.replaying.ledger.Ledger.fold_messages` decodes and folds in the same pass): it
        must write each message as :func:`frame` does — :data:`FRAME`, then the value's bytes,
        ``None`` as empty — in offset order, so that the digest is :meth:`update`'s.
        """
        self.count += n
        return self._h.update

    def hexdigest(self) -> str:
        return self._h.hexdigest()


FRAME = struct.Struct(">QI")
"""A message's frame wherever the log's bytes are hashed (the stream hash, a token's chain): 8-byte
big-endian offset, 4-byte big-endian length, then the value's bytes."""


def frame(offset: int, value: bytes | None) -> bytes:
    """One message as :data:`FRAME` and its value (``None``, a tombstone, hashes as empty)."""
    value = value or b""
    return FRAME.pack(offset, len(value)) + value
