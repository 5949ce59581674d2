"""The default reducer of a plain replay: what each agent sent and received, chained in order.

A plain ``swarmlog replay`` knows nothing of a swarm's code; the ledger is the
state it can still rebuild for every agent from the log alone, and hash.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from pydantic_core import SchemaSerializer, core_schema

from ..errors import SwarmlogError
from ..events import Event
from ..log.hashing import FRAME

__all__ = ["Ledger", "LedgerRow", "mark_json"]

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

        The plain replay folds raw messages with :meth:`fold_messages`, whose loop is this one's
        (a test holds the two equal); this one folds what comes as rows or :class:`Event` objects
        (:meth:`apply`). Both run once per event, so they are written for speed. Everything it calls is bound
        to a local; the event type's crc32 is kept and continued over the payload's
        JSON (equal to the crc32 of their concatenation, without building it); the
        mark is packed to bytes once, even for a broadcast to many agents.
        """
        type_crcs = self._type_crcs
        crc32 = zlib.crc32
        pack = _MARK.pack
        encode = _mark_json
        get = states.get
        for offset, event_type, sender, to, payload in rows:
            type_crc = type_crcs.get(event_type)
            if type_crc is None:
                type_crc = type_crcs[event_type] = crc32(event_type.encode())
            mark = pack(crc32(encode(payload), type_crc))  # mark_json(payload), inlined
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
                s = get(to) or _new_state(states, to)  # _receive, inlined
                counts = s["received"]
                counts[event_type] = counts.get(event_type, 0) + 1
                s["last_offset"] = offset
                s["chain"] = crc32(mark, s["chain"])

    def fold_messages(self, states: dict[str, Any], msgs: Iterable[Any], *,
                      decode: Callable[[bytes | None, int], tuple[Any, dict[str, Any]]],
                      frames: Callable[[bytes], None],
                      undecodable: Callable[[int, SwarmlogError], None]) -> None:
        """:meth:`fold_rows` of a batch of raw messages, in one pass that also hashes the stream.

        The plain replay's hot loop (:class:`~swarmlog.replaying.fold.Fold`): each message's frame goes
        into the stream hash (``frames``: :meth:`swarmlog.log.hashing.StreamHasher.sink`), then it
        is decoded (``decode(value, offset)`` -> ``(writer, record)``) and folded, with
        no row built between the two. A message that does not decode is hashed all the same
        and given to ``undecodable(offset, error)``; the fold goes on with the next.

        Why one pass: a second loop over the batch for the hash, and a generator handing rows
        from the decoding loop to the folding one, cost a good part of what replay did beyond
        consuming and decoding (``replay.swarmlog``; the figures in bench/README.md, "The figures
        behind the code's comments"). The
        body is :meth:`fold_rows`' with :func:`swarmlog.log.hashing.frame` inlined before it;
        ``test_the_fused_fold_gives_the_two_pass_hash_and_states`` holds the two to the same
        digest and states.
        """
        type_crcs = self._type_crcs
        crc32 = zlib.crc32
        pack = _MARK.pack
        encode = _mark_json
        frame = FRAME.pack
        get = states.get
        for m in msgs:
            value = m.value()
            offset = m.offset()
            if value is None:  # a tombstone hashes as empty (hashing.frame)
                frames(frame(offset, 0))
            else:
                frames(frame(offset, len(value)))
                frames(value)
            try:
                writer, record = decode(value, offset)
            except SwarmlogError as exc:
                undecodable(offset, exc)
                continue
            event_type = writer.event_type
            sender = record["agent_id"]
            to = record["to"]
            type_crc = type_crcs.get(event_type)
            if type_crc is None:
                type_crc = type_crcs[event_type] = crc32(event_type.encode())
            mark = pack(crc32(encode(record["payload"]), type_crc))  # mark_json(payload), inlined
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
                s = get(to) or _new_state(states, to)  # _receive, inlined
                counts = s["received"]
                counts[event_type] = counts.get(event_type, 0) + 1
                s["last_offset"] = offset
                s["chain"] = crc32(mark, s["chain"])

_MARK = struct.Struct(">I")

_mark_json: Callable[[Any], bytes] = SchemaSerializer(
    core_schema.any_schema(), core_schema.CoreConfig(ser_json_bytes="hex", ser_json_inf_nan="constants")).to_json
"""``pydantic_core.to_json(value, bytes_mode="hex", inf_nan_mode="constants")``, its configuration
built once: the function parses its keywords and builds a serializer on every call, a good part of
what marking the bench's payload costs (``replay.swarmlog``). The same bytes for every value
(``test_the_marks_serializer_writes_to_jsons_bytes``)."""


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
    the log, and it is much faster than ``json`` with sorted keys (``replay.swarmlog``).
    """
    return _mark_json(payload)


def _new_state(states: dict[str, Any], agent: str) -> dict[str, Any]:
    s = states[agent] = {"sent": {}, "received": {}, "last_offset": -1, "chain": 0}
    return s


def _receive(s: dict[str, Any], event_type: str, offset: int, mark: bytes) -> None:
    counts = s["received"]
    counts[event_type] = counts.get(event_type, 0) + 1
    s["last_offset"] = offset
    s["chain"] = zlib.crc32(mark, s["chain"])
