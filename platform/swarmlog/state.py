"""Agent state as a fold over the log, and the hashes that compare states.

A *reducer* folds events, in offset order, into per-agent state. Replay and the
live agents use the same reducer, so "rebuilt from offset zero equals live" is
a comparison of two hashes.

Hashes are over *canonical JSON* (sorted keys, no whitespace, UTF-8), never
over Python's ``hash()`` (salted per process) or ``repr`` of floats across
versions. The stream hash covers every message's offset and exact bytes, so
two logs hash equal only if they hold the same bytes at the same offsets.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any, Protocol

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
        self._h.update(offset.to_bytes(8, "big") + len(value).to_bytes(4, "big"))
        self._h.update(value)
        self.count += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class Ledger:
    """The default reducer: what each agent sent and received, chained in order.

    Per agent: counts of events sent and received by type, the offset of the
    last event that concerned it, and a CRC chain over those events' types and
    payloads, so that a changed, missing, duplicated or reordered event changes
    the agent's hash. A broadcast concerns every agent already seen in the log.
    """

    def apply(self, states: dict[str, Any], event: Event) -> None:
        sender = event.agent_id
        mark = zlib.crc32(event.event_type.encode() + canonical_json(event.payload))
        self._touch(states, sender, "sent", event, mark)
        if event.to is not None:
            if event.to != sender:
                self._touch(states, event.to, "received", event, mark)
        else:
            for agent in list(states):
                if agent != sender:
                    self._touch(states, agent, "received", event, mark)

    @staticmethod
    def _touch(states: dict[str, Any], agent: str, side: str, event: Event, mark: int) -> None:
        s = states.get(agent)
        if s is None:
            s = states[agent] = {"sent": {}, "received": {}, "last_offset": -1, "chain": 0}
        counts = s[side]
        counts[event.event_type] = counts.get(event.event_type, 0) + 1
        s["last_offset"] = event.offset
        s["chain"] = zlib.crc32(mark.to_bytes(4, "big"), s["chain"])
