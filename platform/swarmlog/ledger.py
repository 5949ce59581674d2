"""The default reducer of a plain replay: what each agent sent and received, chained in order.

A plain ``swarmlog replay`` knows nothing of a swarm's code; the ledger is the
state it can still rebuild for every agent from the log alone, and hash.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from typing import Any

from pydantic_core import to_json

from .events import Event

LedgerRow = tuple[int, str, str, str | None, dict[str, Any]]
"""What the ledger reads of an event: (offset, event_type, agent_id, to, payload)."""


class Ledger:
    """The default reducer: what each agent sent and received, chained in order.

    Per agent: counts of events sent and received by type, the offset of the
    last event that concerned it, and a CRC chain over those events' *marks*, so
    that a changed, missing, duplicated or reordered event changes the agent's
    hash. A broadcast concerns every agent already seen in the log.

    An event's mark is ``crc32(event_type + mark_json(payload))``.
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
            # mark_json(payload), inlined.
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


def mark_json(payload: dict[str, Any]) -> bytes:
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
