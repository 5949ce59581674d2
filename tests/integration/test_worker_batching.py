"""The live agent's adaptive batching (``swarmlog.kafka.channel.next_batch``), against the real broker.

A live agent hands a consumed batch to one transaction. ``consume(n, timeout)`` would
return a short batch only when the timeout expires, so a lone input (one chain, one hop
at a time) would wait out the timeout on every hop. ``next_batch`` waits for the first
message only, then takes what has already been fetched.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from swarmlog.kafka.channel import next_batch
from swarmlog.kafka.config import consumer as make_consumer
from swarmlog.log.append import EventLog
from swarmlog.settings import Settings

WAIT_S = 20.0


def _consumer(settings: Settings):
    c = make_consumer(settings)
    c.assign([TopicPartition(settings.topic, 0, OFFSET_BEGINNING)])
    return c


def _events(msgs: list) -> list[int]:
    return [m.offset() for m in msgs if m.error() is None]


def test_a_lone_input_is_handed_over_without_waiting_out_the_poll_timeout(settings: Settings) -> None:
    with EventLog(settings=settings) as log:
        offset = log.append("agent.message", {"kind": "note", "body": "hi"}, agent="a", to="b")
    consumer = _consumer(settings)
    try:
        t0 = time.monotonic()
        msgs = next_batch(consumer, 500, WAIT_S)
        elapsed = time.monotonic() - t0
    finally:
        consumer.close()
    assert _events(msgs) == [offset]
    # consume(500, WAIT_S) would have returned this one message only after WAIT_S.
    assert elapsed < WAIT_S / 2, f"a lone message took {elapsed:.1f} s of a {WAIT_S:.0f} s wait"


def test_a_fetched_backlog_comes_in_one_batch_up_to_the_batch_size(settings: Settings) -> None:
    with EventLog(settings=settings) as log:
        for i in range(50):
            log.produce("agent.message", {"kind": "note", "body": f"m{i}"}, agent="a", to="b")
        offsets = log.flush()
    consumer = _consumer(settings)
    try:
        first = _events(next_batch(consumer, 10, WAIT_S))  # capped at the batch size
        # The other 40 came in the same fetch response as the first ten: one batch, no wait.
        t0 = time.monotonic()
        rest = _events(next_batch(consumer, 500, WAIT_S))
        elapsed = time.monotonic() - t0
    finally:
        consumer.close()
    assert first == offsets[:10]
    assert rest == offsets[10:]
    assert elapsed < WAIT_S / 2


def test_an_idle_log_returns_an_empty_batch_after_the_wait(settings: Settings) -> None:
    consumer = _consumer(settings)
    try:
        next_batch(consumer, 500, 5.0)  # the end-of-partition event of the empty topic, if any
        t0 = time.monotonic()
        msgs = next_batch(consumer, 500, 0.5)
        elapsed = time.monotonic() - t0
    finally:
        consumer.close()
    assert _events(msgs) == []
    assert elapsed >= 0.4  # it did wait: an idle agent does not spin
