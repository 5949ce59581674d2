"""Appending events to the swarm's log.

An :class:`EventLog` validates an event against its schema (before anything is
written), encodes it, and produces it through an **idempotent** producer with
``acks=all``. The offset the broker assigns is the event's sequence number; it is
returned to the caller.

Ordering: with ``enable.idempotence=true`` librdkafka keeps at most five
requests in flight and the broker de-duplicates retries by sequence number, so
one producer's events land exactly once and in the order it produced them, even
across retries. Delivery reports for one partition arrive in produce order,
which is how :meth:`EventLog.flush` pairs offsets with events without keeping a
per-message callback.

Offsets are ordered but not contiguous: transactional producers (the agent
runtime) leave control records between events. Never compute "the next offset"
by adding one to the last.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from .codec import Encoder
from .errors import AppendFailed, ServiceUnavailable
from .schemas import EventSchema, SchemaRegistry
from .settings import Settings
from .topic import require_single_partition

PRODUCER_REQUIRED: dict[str, object] = {
    "enable.idempotence": True,
    "acks": "all",
    # A producer must never create the topic by accident: a broker default of N
    # partitions would silently give the swarm N clocks.
    "allow.auto.create.topics": False,
}
PRODUCER_TUNING: dict[str, object] = {
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


class EventLog:
    """The append side of one swarm's topic.

    ``append`` is synchronous and returns the event's offset. For throughput,
    ``produce`` many events and ``flush`` once: it returns their offsets in the
    order they were produced.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        registry: SchemaRegistry | None = None,
        topic: str | None = None,
        run_id: str = "",
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        self.settings = settings
        self.topic = topic or settings.topic
        self.registry = registry or SchemaRegistry.load(settings.schema_dir)
        self.run_id = run_id
        require_single_partition(settings, self.topic)
        config = settings.kafka_config(
            {**PRODUCER_REQUIRED, "on_delivery": self._on_delivery},
            tuning={**PRODUCER_TUNING, **(producer_config or {})},
        )
        self._producer = Producer(config)
        self._encoders: dict[str, Encoder] = {}
        self._agent_bytes: dict[str, bytes] = {}
        self._offsets: list[int] = []
        self._errors: list[str] = []
        self._pending = 0
        # Unique event ids without a clock or a random call per event.
        self._id_prefix = os.urandom(8).hex() + "-"
        self._counter = 0

    # -- the hot path ---------------------------------------------------------------

    def produce(
        self,
        event_type: str,
        payload: Any,
        *,
        agent: str,
        to: str | None = None,
        causes: Sequence[int] = (),
        run_id: str | None = None,
        event_id: str | None = None,
    ) -> None:
        """Validate, encode and hand one event to the producer (no wait)."""
        enc = self._encoders.get(event_type)
        if enc is None:
            enc = self._encoder(event_type)
        payload = enc.schema.validate_payload(payload)
        if event_id is None:
            self._counter += 1
            event_id = self._id_prefix + str(self._counter)
        value = enc.encode_event(event_id, self.run_id if run_id is None else run_id, agent, to, causes, payload)
        names = self._agent_bytes
        agent_b = names.get(agent)
        if agent_b is None:
            agent_b = names[agent] = agent.encode()
        if to is None:
            to_b = None
        else:
            to_b = names.get(to)
            if to_b is None:
                to_b = names[to] = to.encode()
        self._send(value, agent_b, enc.headers(agent_b, to_b))

    def produce_raw(self, value: bytes, *, key: bytes | None = None,
                    headers: list[tuple[str, bytes]] | None = None) -> None:
        """Produce bytes as they are (tools and tests: e.g. a message no schema describes)."""
        self._send(value, key, headers)

    def flush(self, timeout: float = 60.0) -> list[int]:
        """Wait for every produced event; return their offsets in produce order."""
        remaining = self._producer.flush(timeout)
        if remaining:
            raise AppendFailed(topic=self.topic, detail=f"{remaining} event(s) not acknowledged within {timeout}s")
        if self._errors:
            errors, self._errors = self._errors, []
            self._offsets = []
            raise AppendFailed(topic=self.topic, detail="; ".join(sorted(set(errors))))
        offsets, self._offsets = self._offsets, []
        return offsets

    def append(self, event_type: str, payload: Any, **kwargs: Any) -> int:
        """Append one event and return its offset (waits for the broker's acknowledgement)."""
        self.produce(event_type, payload, **kwargs)
        return self.flush()[-1]

    def append_many(self, events: Iterable[tuple[str, Any, Mapping[str, Any]]]) -> list[int]:
        """Append ``(event_type, payload, kwargs)`` triples; return their offsets in order."""
        for event_type, payload, kwargs in events:
            self.produce(event_type, payload, **kwargs)
        return self.flush()

    def close(self) -> None:
        self._producer.flush(30)

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------

    def _send(self, value: bytes, key: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, partition=0, headers=headers)
                break
            except BufferError:
                self._producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            except KafkaException as exc:
                raise _translate(exc, self.settings, self.topic) from None
        self._pending += 1
        if self._pending >= 1000:
            self._pending = 0
            self._producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err.str())
        else:
            self._offsets.append(msg.offset())

    def _encoder(self, event_type: str) -> Encoder:
        schema: EventSchema = self.registry.latest(event_type)
        enc = self._encoders[event_type] = Encoder(schema)
        return enc


def _translate(exc: KafkaException, settings: Settings, topic: str) -> Exception:
    err = exc.args[0]
    if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        return ServiceUnavailable(service="Kafka", address=settings.bootstrap_servers, detail=err.str())
    return AppendFailed(topic=topic, detail=err.str())
