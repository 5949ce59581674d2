"""The append side on Kafka: one idempotent ``acks=all`` producer of a topic.

Ordering: with ``enable.idempotence=true`` librdkafka keeps at most five requests in
flight and the broker de-duplicates retries by sequence number, so one producer's
messages land exactly once and in the order it produced them, even across retries.
Delivery reports for one partition arrive in produce order, which is how
:meth:`KafkaAppender.flush` pairs offsets with messages without a per-message callback.

A definite fate for every message: ``message.timeout.ms=0`` (librdkafka: "a time of 0 is
infinite"), so librdkafka never drops a message it may already have written. With the
broker away longer than a flush waits, the flush reports what was acknowledged and how
many are still pending; those stay queued in the producer, are written once, in order,
when the broker answers, and the next flush reports them. A delivery timeout instead would
turn each into "timed out, perhaps written": a fate nobody can act on without duplicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ..log.base import Delivered
from ..log.protocol import Headers
from ..settings import Settings
from .config import APPENDER_REQUIRED, PRODUCER_TUNING, new_client
from .errors import translate

__all__ = ["KafkaAppender"]

_POLL_EVERY = 1000
"""Serve delivery reports every this many sends, so their queue stays short."""


class KafkaAppender:
    """Sends messages to partition 0 of one topic; :meth:`flush` says what became of them."""

    def __init__(self, *, settings: Settings, topic: str, producer_config: Mapping[str, object] | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self._producer = new_client(Producer, settings, {**APPENDER_REQUIRED, "on_delivery": self._on_delivery},
                                    tuning={**PRODUCER_TUNING, **(producer_config or {})})
        self._delivered = Delivered()
        # Messages sent and reported: their difference is what is still pending. (What flush()
        # returns counts librdkafka's queued error callbacks too, not only messages.)
        self._sent = 0
        self._reported = 0

    def send(self, value: bytes | None, key: bytes | None, headers: Headers | None) -> None:
        producer = self._producer
        while True:
            try:
                producer.produce(self.topic, value, key, partition=0, headers=headers)  # type: ignore[arg-type]
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            except KafkaException as exc:
                raise translate(exc, operation=f"appending to {self.topic!r}",
                                bootstrap=self.settings.bootstrap_servers, topic=self.topic) from None
        self._sent += 1
        if not self._sent % _POLL_EVERY:
            producer.poll(0)

    def flush(self, timeout: float) -> Delivered:
        self._producer.flush(timeout)
        delivered, self._delivered = self._delivered, Delivered()
        delivered.pending = self._sent - self._reported
        return delivered

    def close(self, timeout: float = 30.0) -> int:
        self._producer.flush(timeout)
        return self._sent - self._reported

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        self._reported += 1
        delivered = self._delivered
        if err is not None:
            delivered.errors[len(delivered.offsets)] = err.str()
            delivered.offsets.append(-1)
        else:
            delivered.offsets.append(msg.offset())
