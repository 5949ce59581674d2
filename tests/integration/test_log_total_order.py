"""The log: one total order, each producer's order preserved, nothing written that is invalid."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import subprocess
import sys

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from swarmlog.errors import InvalidEvent, TopicNotFound, TopicNotSinglePartition
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.reader import LogReader
from swarmlog.kafka.topic import create_topic, topic_config
from swarmlog.log.append import EventLog
from swarmlog.log.protocol import H_AGENT, H_TO, H_TYPE, H_VERSION
from swarmlog.replaying import replay
from swarmlog.settings import Settings

from .conftest import new_topic_name, read_log, subprocess_env

PRODUCERS = 5
PER_PRODUCER = 2000


def _read_all(settings: Settings, registry) -> list[tuple[int, dict, list]]:
    return [(r.offset, r.record, r.headers) for r in read_log(settings, registry)]


def _produce(settings_json: str, producer: int, barrier) -> None:
    settings = Settings.model_validate_json(settings_json)
    with EventLog(settings=settings, run_id="order") as log:
        barrier.wait()
        for i in range(PER_PRODUCER):
            log.produce("agent.message", {"kind": "seq", "body": str(i)}, agent=f"p{producer}")
            if i % 250 == 0:
                log.flush()  # interleave in many small batches, not one big one
        log.flush()


def test_five_concurrent_producers_land_exactly_once_in_one_total_order(settings, registry):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PRODUCERS)
    procs = [ctx.Process(target=_produce, args=(settings.model_dump_json(), p, barrier)) for p in range(PRODUCERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0

    events = _read_all(settings, registry)
    assert len(events) == PRODUCERS * PER_PRODUCER
    offsets = [off for off, _, _ in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    per_producer: dict[str, list[int]] = {}
    for _, rec, _ in events:
        per_producer.setdefault(rec["agent_id"], []).append(int(rec["payload"]["body"]))
    assert sorted(per_producer) == [f"p{i}" for i in range(PRODUCERS)]
    for agent, seqs in per_producer.items():
        # Exactly once and in the producer's own order.
        assert seqs == list(range(PER_PRODUCER)), agent
    # The producers really interleaved: the total order is not just one producer after another.
    agents_in_order = [rec["agent_id"] for _, rec, _ in events]
    switches = sum(1 for a, b in itertools.pairwise(agents_in_order) if a != b)
    assert switches >= PRODUCERS


def test_append_returns_the_offset_the_broker_assigned(settings, registry):
    with EventLog(settings=settings) as log:
        offsets = [log.append("agent.message", {"kind": "k", "body": str(i)}, agent="a") for i in range(3)]
        more = log.append_many(("agent.message", {"kind": "k", "body": f"m{i}"}, {"agent": "b", "to": "a"})
                               for i in range(4))
    seen = _read_all(settings, registry)
    assert [off for off, _, _ in seen] == offsets + more
    assert [rec["payload"]["body"] for _, rec, _ in seen] == ["0", "1", "2", "m0", "m1", "m2", "m3"]


def test_routing_fields_travel_as_headers(settings, registry):
    with EventLog(settings=settings) as log:
        log.append("agent.message", {"kind": "k", "body": "b"}, agent="alice", to="bob")
        log.append("agent.message", {"kind": "k", "body": "b"}, agent="alice")
    (_, _, h1), (_, _, h2) = _read_all(settings, registry)
    newest = str(registry.latest("agent.message").version).encode()  # producers write the newest version
    assert dict(h1) == {H_TYPE: b"agent.message", H_VERSION: newest, H_AGENT: b"alice", H_TO: b"bob"}
    assert H_TO not in dict(h2)


def test_invalid_payload_is_rejected_before_anything_is_written(settings):
    with EventLog(settings=settings) as log:
        with pytest.raises(InvalidEvent) as err:
            log.append("agent.message", {"kind": "k", "body": {"not": "a string"}}, agent="a")
        assert err.value.field == "payload.body"
    with LogReader(settings=settings) as reader:
        low, high = reader.consumer.get_watermark_offsets(TopicPartition(settings.topic, 0), timeout=10)
    assert high == 0


def test_topic_is_created_single_partition_with_unlimited_retention(settings):
    cfg = topic_config(settings, settings.topic)
    assert cfg["retention.ms"] == "-1" and cfg["retention.bytes"] == "-1"
    assert cfg["message.timestamp.type"] == "LogAppendTime"
    again = create_topic(settings, settings.topic)  # idempotent
    assert again.partitions == 1 and not again.created


def test_a_missing_topic_is_a_clear_error_not_an_auto_created_one(base_settings):
    name = new_topic_name("missing")
    s = base_settings.model_copy(update={"topic": name})
    with pytest.raises(TopicNotFound, match="swarmlog topic create"):
        EventLog(settings=s)


@pytest.fixture
def three_partition_topic(base_settings) -> Settings:
    name = new_topic_name("three")
    admin = admin_client(base_settings)
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(30)
    return base_settings.model_copy(update={"topic": name})


def test_a_three_partition_topic_is_refused_by_append_sink_and_replay(three_partition_topic):
    from swarmlog_connectors.postgres_sink import PostgresSink

    s = three_partition_topic
    with pytest.raises(TopicNotSinglePartition) as err:
        EventLog(settings=s)
    assert err.value.partitions == 3 and "exactly one" in str(err.value)
    with pytest.raises(TopicNotSinglePartition):
        PostgresSink(settings=s).run(until_end=True)
    with pytest.raises(TopicNotSinglePartition):
        replay(settings=s)
    with pytest.raises(TopicNotSinglePartition):
        create_topic(s, s.topic)
    # And on the command line: a run-time error (exit 70) with a one-line reason, no traceback.
    for argv in (["append", "agent.message", json.dumps({"kind": "k", "body": "b"}), "--agent", "a"],
                 ["sink", "--until-end"], ["replay"]):
        proc = subprocess.run([sys.executable, "-m", "swarmlog.cli", *argv], env=subprocess_env(s),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 70, (argv, proc.stderr)
        assert "3 partitions" in proc.stderr and "Traceback" not in proc.stderr
