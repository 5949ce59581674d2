"""Appending events to a swarm's log: :class:`EventLog`.

An event is validated against its schema before anything is written (the error
names the field), encoded once (Avro single-object encoding, routing headers
beside it), and handed to the backend's appender — on Kafka an idempotent
``acks=all`` producer. The offset the log assigns is the event's sequence number
and its logical time; it is returned to the caller.

Offsets are ordered but not contiguous: transactional producers (the agent
runtime) leave control records between events. Never compute "the next offset"
by adding one to the last.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import AppendFailed, UsageError
from ..kafka.backend import KafkaBackend
from ..protocol import Headers
from ..schema.codec import Encoder
from ..schema.registry import EventSchema, SchemaRegistry
from ..settings import Settings
from .base import Appender, LogBackend


class EventLog:
    """The append side of one swarm's topic.

    ``append`` is synchronous and returns the event's offset. For throughput,
    ``produce`` many events and ``flush`` once: it returns their offsets in the
    order they were produced. ``backend`` defaults to the Kafka cluster of
    ``settings`` (``producer_config`` then tunes its producer).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        registry: SchemaRegistry | None = None,
        topic: str | None = None,
        run_id: str = "",
        backend: LogBackend | None = None,
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        self.settings = settings
        self.topic = topic or settings.topic
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.run_id = run_id
        if backend is None:
            backend = KafkaBackend(settings, producer_config=producer_config)
        elif producer_config:
            raise UsageError("producer_config tunes the Kafka producer EventLog makes itself; with an explicit "
                             "backend, configure the backend instead")
        self._appender: Appender = backend.appender(self.topic)
        self._encoders: dict[str, Encoder] = {}
        self._agent_bytes: dict[str, bytes] = {}
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
        self._appender.send(value, agent_b, enc.headers(agent_b, to_b))

    def produce_raw(self, value: bytes, *, key: bytes | None = None, headers: Headers | None = None) -> None:
        """Produce bytes as they are (tools and tests: e.g. a message no schema describes)."""
        self._appender.send(value, key, headers)

    def flush(self, timeout: float = 60.0) -> list[int]:
        """Wait for every produced event; return their offsets in produce order."""
        delivered = self._appender.flush(timeout)
        if delivered.unacknowledged:
            raise AppendFailed(topic=self.topic, detail=f"{delivered.unacknowledged} event(s) not acknowledged "
                                                        f"within {timeout}s")
        if delivered.errors:
            raise AppendFailed(topic=self.topic, detail="; ".join(sorted(set(delivered.errors))))
        return delivered.offsets

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
        self._appender.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _encoder(self, event_type: str) -> Encoder:
        schema: EventSchema = self.registry.latest(event_type)
        enc = self._encoders[event_type] = Encoder(schema)
        return enc
