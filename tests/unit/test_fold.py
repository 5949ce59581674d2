"""The plain replay's fold: one pass over a batch gives what hashing, decoding and folding apart give.

:meth:`Fold.apply_batch` hashes, decodes and folds each message in one loop (the ledger's
:meth:`~swarmlog.replaying.ledger.Ledger.fold_messages`); the reference here does it the long way, in
two passes: every message into :meth:`StreamHasher.update`, then every message decoded into an
:class:`Event` and given to :meth:`Ledger.apply`. Stream hash, states, per-agent hashes and the
undecodable messages must be the same, whatever the batches.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from fastavro.utils import generate_many
from pydantic_core import to_json

from swarmlog.errors import SwarmlogError
from swarmlog.events import Event
from swarmlog.log.hashing import StreamHasher, state_hash
from swarmlog.log.memory import MemoryMessage
from swarmlog.replaying.fold import Fold, Undecodable
from swarmlog.replaying.ledger import Ledger, _mark_json, mark_json
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog.settings import Settings

REGISTRY = SchemaRegistry.load(Settings().schema_dirs())
AGENTS = ["a", "b", "c", "d"]


def _values(n: int, seed: int) -> list[bytes | None]:
    """Events of every type and version (random payloads), broadcasts and self-sends among them,
    with undecodable messages in the middle: garbage, a tombstone, a truncated body, an unknown
    schema's fingerprint."""
    rnd = random.Random(seed)
    writers = [REGISTRY.get(t, v) for t in REGISTRY.event_types() for v in range(1, REGISTRY.latest(t).version + 1)]
    values: list[bytes | None] = []
    for i in range(n):
        writer = rnd.choice(writers)
        record = next(iter(generate_many(writer.schema, 1)))
        sender = rnd.choice(AGENTS[:2] if i < 5 else AGENTS)  # c and d join later: a broadcast reaches the seen
        to = rnd.choice([None, sender, *AGENTS])
        record.update(event_type=writer.event_type, schema_version=writer.version, agent_id=sender, to=to)
        values.append(Encoder(writer).encode(record))
    good = values[3]
    assert good is not None
    for at, bad in ((7, b"garbage"), (8, None), (20, good[:-3] if len(good) > 12 else b"\xc3\x01"),
                    (21, b"\xc3\x01" + bytes(8) + good[10:])):
        values.insert(at, bad)
    return values


def _messages(values: list[bytes | None], *, gap: int = 2) -> list[MemoryMessage]:
    # Offsets with gaps, as a transactional log's are (commit markers take offsets).
    return [MemoryMessage(i * gap + 3, v, None, None, 1_000 + i) for i, v in enumerate(values)]


def _two_passes(msgs: list[MemoryMessage]) -> tuple[str, dict[str, Any], list[Undecodable]]:
    hasher = StreamHasher()
    for m in msgs:
        hasher.update(m.offset(), m.value())
    decoder, ledger, states, undecodable = Decoder(REGISTRY), Ledger(), {}, []
    for m in msgs:
        try:
            writer, record = decoder.decode(m.value(), m.offset())
        except SwarmlogError as exc:
            undecodable.append(Undecodable(offset=m.offset(), error=str(exc)))
            continue
        ledger.apply(states, Event.from_message(m, writer, record))
    return hasher.hexdigest(), states, undecodable


def _fold(msgs: list[MemoryMessage], batch: int, reducer: Ledger | None = None) -> Fold:
    fold = Fold(registry=REGISTRY, reducer=reducer)
    for i in range(0, len(msgs), batch):
        fold.apply_batch(msgs[i:i + batch])
    return fold


class _LedgerByEvents(Ledger):
    """A subclass: the fold gives it Events through the reducer protocol, not raw messages."""

    def apply(self, states: dict[str, Any], event: Event) -> None:
        assert isinstance(event, Event)
        super().apply(states, event)


@pytest.mark.parametrize("batch", [1, 7, 5000])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_fused_fold_gives_the_two_pass_hash_and_states(batch: int, seed: int) -> None:
    msgs = _messages(_values(120, seed))
    stream_hash, states, undecodable = _two_passes(msgs)
    assert [u.offset for u in undecodable] == [m.offset() for m in (msgs[7], msgs[8], msgs[20], msgs[21])]
    assert {"a", "b", "c", "d"} <= set(states)
    for reducer in (None, _LedgerByEvents()):  # the ledger's one pass, and the reducer protocol's loop
        fold = _fold(msgs, batch, reducer)
        result = fold.result(msgs[-1].offset() + 1)
        assert result.stream_hash == stream_hash
        assert fold.hasher.count == len(msgs)
        assert result.states == states
        assert result.agents == {agent: state_hash(s) for agent, s in states.items()}
        assert result.undecodable == undecodable
        assert result.events == len(msgs) - 4


def test_the_stream_hash_covers_an_undecodable_message_s_bytes() -> None:
    values = _values(30, 3)
    changed = list(values)
    changed[7] = b"garbage!"  # still undecodable, other bytes
    a, b = _fold(_messages(values), 5000), _fold(_messages(changed), 5000)
    assert a.states == b.states and [u.offset for u in a.undecodable] == [u.offset for u in b.undecodable]
    assert a.hasher.hexdigest() != b.hasher.hexdigest()


def test_the_marks_serializer_writes_to_jsons_bytes() -> None:
    # The mark is defined as pydantic-core's to_json(bytes_mode="hex", inf_nan_mode="constants"):
    # the serializer built once must write the very same bytes, for every kind of value a
    # decoded payload holds (and the logical types fastavro converts to).
    import datetime
    import decimal
    import uuid

    values: list[Any] = [
        {"b": b"\x00\xff", "e": b""},
        {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "z": -0.0, "big": 1e16, "small": 1.5e-7, "f": 0.1},
        {"i": 2**70, "n": -2**63, "t": True, "f": False, "none": None},
        {"s": "é\u0000\"\\\n\t\u2028\U0001F600\x7f", "empty": ""},
        {"l": [1, [2, {"x": b"ab"}]], "m": {"k": {"z": 1, "a": 2}}},  # a dict's own order, not sorted
        {"dt": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
         "d": datetime.date(2020, 1, 1), "tm": datetime.time(1, 2, 3, 4000), "dec": decimal.Decimal("1.2300"),
         "u": uuid.UUID(int=5)},
        {},
    ]
    for schema in (REGISTRY.get(t, v) for t in REGISTRY.event_types()
                   for v in range(1, REGISTRY.latest(t).version + 1)):
        values.extend(r["payload"] for r in generate_many(schema.schema, 3))
    for value in values:
        assert _mark_json(value) == to_json(value, bytes_mode="hex", inf_nan_mode="constants") == mark_json(value)
