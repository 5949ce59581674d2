"""Agent state as a fold over the log, and the hashes that compare states.

A *reducer* folds events, in offset order, into per-agent state. Replay and the
live agents use the same reducer, so "rebuilt from offset zero equals live" is
a comparison of two hashes.

Hashes are over *canonical JSON* (sorted keys, no whitespace, UTF-8), never
over Python's ``hash()`` (salted per process) or ``repr`` of floats across
versions. (Inside the ledger, each event's *mark* uses a faster encoding of its
payload; see :func:`payload_json`.) The stream hash covers every message's offset and exact bytes, so
two logs hash equal only if they hold the same bytes at the same offsets.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic_core import to_json

from .events import Event


class Reducer(Protocol):
    """Folds one event into the states of the agents it concerns."""

    def apply(self, states: dict[str, Any], event: Event) -> None: ...


def canonical_json(value: Any) -> bytes:
    return _canonical_encode(value).encode()


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"state is not JSON-serialisable: {type(value).__name__}")


# Built once: json.dumps with any non-default option builds a new JSONEncoder per call,
# which costs more than encoding a small payload. Same output as json.dumps(value, ...).
_canonical_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=_json_default).encode


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
        """:meth:`update` for each of a batch of Kafka messages, in order."""
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


LedgerRow = tuple[int, str, str, str | None, dict[str, Any]]
"""What the ledger reads of an event: (offset, event_type, agent_id, to, payload)."""


class Ledger:
    """The default reducer: what each agent sent and received, chained in order.

    Per agent: counts of events sent and received by type, the offset of the
    last event that concerned it, and a CRC chain over those events' *marks*, so
    that a changed, missing, duplicated or reordered event changes the agent's
    hash. A broadcast concerns every agent already seen in the log.

    An event's mark is ``crc32(event_type + payload_json(payload))``.
    """

    __slots__ = ("_type_crcs",)

    def __init__(self) -> None:
        self._type_crcs: dict[str, int] = {}

    def apply(self, states: dict[str, Any], event: Event) -> None:
        self.fold_rows(states, ((event.offset, event.event_type, event.agent_id, event.to, event.payload),))

    def fold_rows(self, states: dict[str, Any], rows: Iterable[LedgerRow]) -> None:
        """:meth:`apply` for each event of a batch, given as rows rather than :class:`Event` objects.

        The replay fold calls this once per batch: the loop below runs once per
        event of the log, so it is written for speed. Everything it calls is bound
        to a local; the event type's crc32 is kept and continued over the payload's
        JSON (equal to the crc32 of their concatenation, without building it); the
        mark is packed to bytes once, even for a broadcast to many agents.
        """
        type_crcs = self._type_crcs
        crc32 = zlib.crc32
        pack = _MARK.pack
        get = states.get
        for offset, event_type, sender, to, payload in rows:
            type_crc = type_crcs.get(event_type)
            if type_crc is None:
                type_crc = type_crcs[event_type] = crc32(event_type.encode())
            # payload_json(payload), inlined.
            mark = pack(crc32(to_json(payload, bytes_mode="hex", inf_nan_mode="constants"), type_crc))
            s = get(sender) or _new_state(states, sender)
            counts = s["sent"]
            counts[event_type] = counts.get(event_type, 0) + 1
            s["last_offset"] = offset
            s["chain"] = crc32(mark, s["chain"])
            if to is None:
                for agent in list(states):
                    if agent != sender:
                        _receive(states[agent], event_type, offset, mark)
            elif to != sender:
                _receive(get(to) or _new_state(states, to), event_type, offset, mark)


_MARK = struct.Struct(">I")


def payload_json(payload: dict[str, Any]) -> bytes:
    """The bytes of a payload in an event's mark: compact UTF-8 JSON, keys in the dict's order.

    Not sorted, for speed (sorting the items costs more than encoding them): the
    decoder builds every payload of a type in one order, its newest schema's field
    order, whichever version wrote it (Avro resolution keeps the writer's fields
    in order and appends newer fields' defaults; upcasters keep the order).
    ``test_payloads_decode_in_the_newest_schemas_field_order_from_every_writer``
    holds the schemas to that, so an event written by an old and by the newest
    writer marks the same. Bytes are hex; NaN and infinities are ``NaN`` and
    ``Infinity``. pydantic-core's encoder: the fold runs this once per event of
    the log, and it is about five times faster than ``json`` with sorted keys.
    """
    return to_json(payload, bytes_mode="hex", inf_nan_mode="constants")


def _new_state(states: dict[str, Any], agent: str) -> dict[str, Any]:
    s = states[agent] = {"sent": {}, "received": {}, "last_offset": -1, "chain": 0}
    return s


def _receive(s: dict[str, Any], event_type: str, offset: int, mark: bytes) -> None:
    counts = s["received"]
    counts[event_type] = counts.get(event_type, 0) + 1
    s["last_offset"] = offset
    s["chain"] = zlib.crc32(mark, s["chain"])
