"""The append side on Kafka: one idempotent ``acks=all`` producer of a topic.

Ordering: with ``enable.idempotence=true`` librdkafka keeps at most five requests in
flight and the broker de-duplicates retries by sequence number, so one producer's
messages land exactly once and in the order it produced them, even across retries.
Delivery reports for one partition arrive in produce order, which is how
:meth:`KafkaAppender.flush` pairs offsets with messages without a per-message callback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ..log.base import Delivered
from ..protocol import Headers
from ..settings import Settings
from .config import PRODUCER_REQUIRED, PRODUCER_TUNING, new_client
from .errors import translate

_POLL_EVERY = 1000
"""Serve delivery reports every this many sends, so their queue stays short."""


class KafkaAppender:
    """Sends messages to partition 0 of one topic; :meth:`flush` says what became of them."""

    def __init__(self, *, settings: Settings, topic: str, producer_config: Mapping[str, object] | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self._producer = new_client(Producer, settings, {**PRODUCER_REQUIRED, "on_delivery": self._on_delivery},
                                    tuning={**PRODUCER_TUNING, **(producer_config or {})})
        self._delivered = Delivered()
        self._pending = 0

    def send(self, value: bytes, key: bytes | None, headers: Headers | None) -> None:
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
        self._pending += 1
        if self._pending >= _POLL_EVERY:
            self._pending = 0
            producer.poll(0)

    def flush(self, timeout: float) -> Delivered:
        remaining = self._producer.flush(timeout)
        delivered, self._delivered = self._delivered, Delivered()
        delivered.unacknowledged = remaining
        return delivered

    def close(self) -> None:
        self._producer.flush(30)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._delivered.errors.append(err.str())
        else:
            self._delivered.offsets.append(msg.offset())
