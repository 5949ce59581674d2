"""Reading to the end of the log on the real broker: the read stops at the end without waiting out a
fetch, past the commit marker a transactional log ends with, and still stops short of an open
transaction; a backend's closed readers are reused clean (bench/snapshots.py, bench/cli.py)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from swarmlog.errors import TopicNotSinglePartition
from swarmlog.kafka import reader as reader_module
from swarmlog.kafka.backend import KafkaBackend
from swarmlog.kafka.config import admin_client
from swarmlog.kafka.reader import LogReader, watermarks
from swarmlog.settings import Settings

from .conftest import new_topic_name

LONG_FETCH_WAIT_MS = 20_000
"""The broker holds an empty fetch this long: a read that waited for the end-of-partition event
would take it; one that knows the end from its position takes none of it."""


def _transactional_producer(settings: Settings) -> Producer:
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers,
                         "transactional.id": f"swarmlog-test-{uuid.uuid4().hex[:12]}"})
    producer.init_transactions(30)
    return producer


def _committed(producer: Producer, topic: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v)
    producer.commit_transaction(30)


def _read(settings: Settings, topic: str, **batches: object) -> tuple[list[int], LogReader, float]:
    reader = LogReader(settings=settings, topic=topic, consumer_config={"fetch.wait.max.ms": LONG_FETCH_WAIT_MS})
    reader.assign(0)
    t0 = time.monotonic()
    offsets = [m.offset() for batch in reader.batches(**batches) for m in batch]  # type: ignore[arg-type]
    return offsets, reader, time.monotonic() - t0


def test_a_read_to_the_end_stops_there_without_a_fetch_wait(settings):
    # A log the runtime writes ends with a commit marker no read_committed reader receives.
    producer = _transactional_producer(settings)
    _committed(producer, settings.topic, [b"a", b"b"])
    _committed(producer, settings.topic, [b"c"])
    end = watermarks(settings, settings.topic)[1]
    assert end == 5  # a, b, marker, c, marker

    offsets, reader, seconds = _read(settings, settings.topic)
    with reader:
        assert offsets == [0, 1, 3]
        assert reader.position.end_offset == end and reader.position.reached_end_of_log
    assert seconds < LONG_FETCH_WAIT_MS / 1000 / 2, f"the read waited {seconds:.1f} s for the broker"

    offsets, reader, seconds = _read(settings, settings.topic, end=end)  # an explicit end past the last marker
    with reader:
        assert offsets == [0, 1, 3] and reader.position.end_offset == end
    assert seconds < LONG_FETCH_WAIT_MS / 1000 / 2


def test_a_read_to_the_end_stops_at_an_open_transaction(settings):
    producer = _transactional_producer(settings)
    _committed(producer, settings.topic, [b"a"])
    producer.begin_transaction()
    producer.produce(settings.topic, b"open")
    producer.flush(30)
    try:
        high = watermarks(settings, settings.topic)[1]
        assert high == 3  # a, marker, the open transaction's record
        reader = LogReader(settings=settings, topic=settings.topic, consumer_config={"fetch.wait.max.ms": 100})
        reader.assign(0)
        with reader:
            offsets = [m.offset() for batch in reader.batches() for m in batch]
            # Not past the last stable offset, and not waiting for the transaction to end either.
            assert offsets == [0] and reader.position.end_offset == 2 and reader.position.reached_end_of_log
    finally:
        producer.abort_transaction(30)


def test_a_closed_reader_is_reused_clean_for_another_topic(base_settings):
    backend = KafkaBackend(base_settings)
    first, second = new_topic_name(), new_topic_name()
    for name, values in ((first, [b"1", b"2", b"3"]), (second, [b"x"])):
        backend.create_topic(name)
        p = Producer({"bootstrap.servers": base_settings.bootstrap_servers, "enable.idempotence": True})
        for v in values:
            p.produce(name, v)
        assert p.flush(30) == 0
    try:
        with backend.reader(first) as reader:
            reader.assign(0)
            batches = reader.batches()
            assert [m.value() for m in next(batches)][:1] == [b"1"]  # left with messages fetched, unread
            kept = reader
        with backend.reader(second) as reader:
            assert reader is kept  # the same consumer, reopened
            reader.assign(0)
            assert [m.value() for batch in reader.batches() for m in batch] == [b"x"]
            assert reader.position.end_offset == 1
        with backend.reader(first) as reader:
            reader.assign(1)
            assert [m.value() for batch in reader.batches() for m in batch] == [b"2", b"3"]
    finally:
        backend.close()


def test_a_backend_that_goes_closes_the_readers_it_kept(base_settings):
    # An entry point makes a backend, reads, and drops it: the consumer it kept is closed then, in
    # that thread, not left to the cycle collector or the interpreter's teardown (a consumer
    # destroyed there can hold a stopping agent past its SIGTERM grace).
    topic = new_topic_name()
    backend = KafkaBackend(base_settings)
    backend.create_topic(topic)
    with backend.reader(topic) as reader:
        reader.assign(0)
        assert list(reader.batches()) == []
    consumer = reader.consumer
    consumer.assignment()  # kept: still open
    del backend, reader
    try:
        consumer.assignment()
    except RuntimeError as exc:
        assert "closed" in str(exc).lower()
    else:
        raise AssertionError("the kept consumer is still open after its backend went")


def test_a_kept_reader_checks_a_topic_only_if_its_backend_has_not(base_settings, monkeypatch):
    # A debugging session opens three readers a query (bench/snapshots.py): checking each topic's
    # partitions again on every reuse was a metadata request each, 1-25 ms. A topic the backend
    # has not checked is still checked, and refused, by a reused consumer.
    checked: list[str] = []
    real = reader_module.require_single_partition

    def counting(settings, topic, **kw):
        checked.append(topic)
        return real(settings, topic, **kw)

    monkeypatch.setattr(reader_module, "require_single_partition", counting)
    backend = KafkaBackend(base_settings)
    one, three = new_topic_name(), new_topic_name("three")
    backend.create_topic(one)
    admin = admin_client(base_settings)
    admin.create_topics([NewTopic(three, num_partitions=3, replication_factor=1)])[three].result(30)
    try:
        with backend.reader(one) as reader:
            kept = reader
        for _ in range(3):
            with backend.reader(one) as reader:
                assert reader is kept
                reader.assign(0)
                assert list(reader.batches()) == []
        assert checked == [one]
        with pytest.raises(TopicNotSinglePartition):
            backend.reader(three)
        assert checked == [one, three]
    finally:
        backend.close()
