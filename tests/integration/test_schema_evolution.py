"""Schema evolution on the real Kafka and Postgres: old logs replay and mirror with today's code.

The pure half (schema check, upcasters, decoding every version into the newest, property
tests) is ``tests/unit/test_schema_evolution.py``.
"""

from __future__ import annotations

import json
from typing import Any

from swarmlog.events import Event
from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import H_VERSION
from swarmlog.replaying import replay
from swarmlog.schema.check import conforms
from swarmlog.schema.codec import Decoder, Encoder
from swarmlog.schema.registry import SchemaRegistry
from swarmlog_connectors.postgres_sink import PostgresSink

from ..fixtures.make_v1_log import BIN, SIDECAR, V1Facts, unframe
from ..unit.test_schema_evolution import _record
from .conftest import new_topic_name


def _v1_facts(registry: SchemaRegistry) -> V1Facts:
    return V1Facts({t: [f["name"] for f in registry.get(t, 1).payload_schema["fields"]]
                    for t in registry.event_types()})


def test_the_v1_log_replays_with_todays_code_to_the_hashes_recorded_when_it_was_made(
        base_settings, settings, registry):
    """What "the same result" means with upcasters in the chain.

    Today's reader turns each v1 event into the newest version: it fills fields v1
    never wrote (v3's ``urgency``) and runs upcasters that change what values mean.
    Hashes over those fields would be a statement about today's schemas, and a v4
    would rightly change them. So the hashes recorded in the fixture cover the *v1
    facts*: the ledger over each payload cut down to v1's fields (``V1Facts``). Any
    version, any chain of upcasters, must reproduce them: losing or changing what v1
    wrote is the one thing it may never do.

    The full newest-version payloads are compared too, but between two logs replayed
    with the same code: the v1 bytes, and the same run re-written by today's newest
    writer must replay to identical per-agent states (the chain is a function of what
    was written, whichever version wrote it).
    """
    sidecar = json.loads(SIDECAR.read_text())
    values = unframe(BIN.read_bytes())
    newest = registry.latest("agent.message")
    assert newest.version >= 3  # the point of the test: v1 bytes read by a reader two versions on

    with EventLog(settings=settings, registry=registry) as log:
        for value in values:
            log.produce_raw(value)
        assert log.flush() == list(range(len(values)))

    facts = replay(settings=settings, registry=registry, reducer=_v1_facts(registry))
    assert facts.undecodable == [] and facts.events == sidecar["events"]
    assert facts.stream_hash == sidecar["stream_hash"]  # the same bytes at the same offsets
    assert facts.agents == sidecar["agents_v1_facts"]
    full_from_v1 = replay(settings=settings, registry=registry)

    # The same run written by today's newest writer: decode each event, append it again.
    decoder = Decoder(registry)
    rewritten = settings.model_copy(update={"topic": new_topic_name("v1-rewritten")})
    create_topic(base_settings, rewritten.topic)
    with EventLog(settings=rewritten, registry=registry) as log:
        written: list[int] = []
        for offset, value in enumerate(values):
            writer, record = decoder.decode(value, offset)
            assert writer.version == 1
            assert conforms(record, registry.latest(writer.event_type)) is None
            log.produce(writer.event_type, record["payload"], agent=record["agent_id"], to=record["to"],
                        causes=record["causes"], run_id=record["run_id"], event_id=record["event_id"])
            # Each event flushed before the next may name it as a cause: causes are checked at write, and
            # an event still queued has no offset in the log yet (docs/edges.md, "Causes").
            written += log.flush()
        assert written == list(range(len(values)))
    with LogReader(settings=rewritten) as reader:
        reader.assign(0)
        versions = [dict(m.headers())[H_VERSION] for batch in reader.batches() for m in batch]
    assert versions == [str(registry.latest(t).version).encode()
                        for t in (decoder.decode(v)[0].event_type for v in values)]

    facts_newest = replay(settings=rewritten, registry=registry, reducer=_v1_facts(registry))
    assert facts_newest.agents == sidecar["agents_v1_facts"]
    assert facts_newest.stream_hash != sidecar["stream_hash"]  # different bytes, same meaning
    full_from_newest = replay(settings=rewritten, registry=registry)
    assert full_from_newest.agents == full_from_v1.agents


# --- v1, v2 and v3 side by side in one log ------------------------------------------------------


class _Capture:
    """A reducer that keeps what it was given (to look at decoded events after a replay)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def apply(self, states: dict[str, Any], event: Event) -> None:
        self.events.append(event)
        states.setdefault(event.agent_id, 0)
        states[event.agent_id] += 1


def test_v1_v2_and_v3_events_in_one_log_are_mirrored_and_replayed_as_v3(settings, registry, db):
    written = [
        (1, {"kind": "k", "body": "from v1"}),
        (2, {"kind": "k", "body": "from v2", "priority": 5}),
        (3, {"kind": "k", "body": "from v3", "urgency": "critical"}),
    ]
    with EventLog(settings=settings, registry=registry) as log:
        for version, payload in written:
            enc = Encoder(registry.get("agent.message", version))
            value = enc.encode(_record(version, payload, event_id=f"e{version}"))
            log.produce_raw(value, key=b"alice", headers=enc.headers(b"alice", b"bob"))
        log.flush()
    as_v3 = [{"kind": "k", "body": "from v1", "urgency": "normal"},
             {"kind": "k", "body": "from v2", "urgency": "high"},
             {"kind": "k", "body": "from v3", "urgency": "critical"}]

    stats = PostgresSink(settings=settings, registry=registry).run(until_end=True)
    assert stats.rows == 3 and stats.dead_letters == 0
    rows = db.execute("SELECT seq, event_id, schema_version, payload FROM events WHERE topic = %s ORDER BY seq",
                      (settings.topic,)).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(0, "e1", 1), (1, "e2", 2), (2, "e3", 3)]
    assert [r[3] for r in rows] == as_v3

    capture = _Capture()
    result = replay(settings=settings, registry=registry, reducer=capture)
    assert result.events == 3 and result.undecodable == []
    assert [(e.offset, e.version, e.payload) for e in capture.events] == [
        (i, v, p) for i, ((v, _), p) in enumerate(zip(written, as_v3, strict=True))]
