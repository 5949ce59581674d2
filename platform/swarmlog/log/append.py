"""Appending events to a swarm's log: :class:`EventLog`.

An event is validated against its schema before anything is written (the error
names the field), encoded once (Avro single-object encoding, routing headers
beside it), and handed to the backend's appender — on Kafka an idempotent
``acks=all`` producer. The offset the log assigns is the event's sequence number
and its logical time; it is returned to the caller.

Offsets are ordered but not contiguous: transactional producers (the agent
runtime) leave control records between events. Never compute "the next offset"
by adding one to the last.

**Every event has a definite fate**, even when Kafka does not answer in time. The
producer never gives up on a message (:mod:`swarmlog.kafka.producer`), and one
producer's acknowledgements arrive in the order it sent, so a flush that times out
knows exactly which events were written (at which offsets), which the broker refused,
and which are still queued — to be written exactly once, in order, when Kafka
answers. It raises :class:`~swarmlog.errors.AppendIncomplete` with each event's fate.
The caller acts on it by appending the same events again with the same event ids:
those already written return their offsets, those still queued are waited for, not
sent again, and only refused ones are sent anew. So a retry never duplicates, and
every offset returned is the offset of the event it is paired with, however late
its acknowledgement arrived.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import AppendFailed, AppendIncomplete, EventFate, UsageError
from ..kafka.backend import KafkaBackend
from ..schema.codec import Encoder
from ..schema.registry import EventSchema, SchemaRegistry
from ..settings import Settings
from .base import Appender, Delivered, LogBackend
from .protocol import Headers

__all__ = ["EventLog"]

logger = logging.getLogger(__name__)

_NOT_SEEN: Any = object()
_FATES_MAX = 100_000
"""Written events whose fates an incomplete append remembers (for its retry), at most; pending
and refused ones are always kept (forgetting a pending one would let its retry duplicate it)."""


class EventLog:
    """The append side of one swarm's topic.

    ``append`` is synchronous and returns the event's offset. For throughput,
    ``produce`` many events and ``flush`` once: it returns their offsets in the
    order they were produced. ``backend`` defaults to the Kafka cluster of
    ``settings`` (``producer_config`` then tunes its producer).

    When Kafka does not acknowledge everything in time, ``flush`` (and ``append``,
    ``append_many``) raise :class:`~swarmlog.errors.AppendIncomplete` with each event's
    fate; append the same events again with the same ``event_id`` to finish: nothing is
    sent twice (see the module's docstring).
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
        # Pairing acknowledgements with events, by position: the appender reports in send order.
        self._call: list[str] = []
        """Ids of the events produced since the last flush, in order (the call's events)."""
        self._carried: list[str] = []
        """Ids sent before this call's and not reported yet: their reports come first."""
        self._reused: set[str] = set()
        """Ids of this call that were not sent again: a retry of a written or pending event."""
        self._fates: dict[str, int | str | None] = {}
        """The fates an incomplete flush reported, for the retry: offset, refusal, or None (pending)."""

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
        """Validate, encode and hand one event to the producer (no wait).

        An ``event_id`` an incomplete flush reported as written or still queued is not sent
        again: the next flush gives its offset (see :class:`~swarmlog.errors.AppendIncomplete`).
        """
        if event_id is None:
            self._counter += 1
            event_id = self._id_prefix + str(self._counter)
        elif self._fates and self._known(event_id):
            return
        enc = self._encoders.get(event_type)
        if enc is None:
            enc = self._encoder(event_type)
        payload = enc.schema.validate_payload(payload)
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
        self._call.append(event_id)

    def produce_raw(self, value: bytes | None, *, key: bytes | None = None, headers: Headers | None = None) -> None:
        """Produce bytes as they are (tools and tests: e.g. a message no schema describes)."""
        self._appender.send(value, key, headers)
        self._counter += 1
        self._call.append(f"{self._id_prefix}raw{self._counter}")

    def flush(self, timeout: float = 60.0) -> list[int]:
        """Wait up to ``timeout`` s for every event produced since the last flush; return their
        offsets in produce order, or raise :class:`~swarmlog.errors.AppendIncomplete`."""
        delivered = self._appender.flush(timeout)
        call, self._call = self._call, []
        if not (self._carried or self._reused or delivered.errors or delivered.pending) \
                and len(delivered.offsets) == len(call):
            return delivered.offsets  # the common case: this call's events, all written, in order
        return self._settle(call, delivered, timeout)

    def _known(self, event_id: str) -> bool:
        """Whether a retried event is already written or queued (then it joins this call unsent)."""
        fate = self._fates.get(event_id, _NOT_SEEN)
        if fate is _NOT_SEEN:
            return False
        if isinstance(fate, str):  # refused: not in the log, send it again
            del self._fates[event_id]
            return False
        self._call.append(event_id)
        self._reused.add(event_id)
        return True

    def _settle(self, call: list[str], delivered: Delivered, timeout: float) -> list[int]:
        reused, self._reused = self._reused, set()
        # Send order: what earlier calls left pending, then this call's events that were sent.
        sent = self._carried + ([e for e in call if e not in reused] if reused else call)
        offsets, errors = delivered.offsets, delivered.errors
        if len(offsets) + delivered.pending != len(sent):  # would pair offsets with the wrong events
            raise AppendFailed(topic=self.topic, detail=f"internal error: {len(offsets)} report(s) and "
                                                        f"{delivered.pending} pending for {len(sent)} sent event(s)")
        now: dict[str, int | str | None] = {}
        for i, off in enumerate(offsets):
            now[sent[i]] = errors[i] if off < 0 else off
        self._carried = sent[len(offsets):]
        for eid in self._carried:
            now[eid] = None
        fates = self._fates
        for eid, fate in now.items():
            if eid in fates:  # an event of an earlier call, whose retry will ask for it
                fates[eid] = fate
        result = [now[eid] if eid in now else fates.get(eid) for eid in call]
        if all(type(f) is int for f in result):
            for eid in call:
                fates.pop(eid, None)  # settled, and the caller has the offsets
            return result  # type: ignore[return-value]
        for eid, fate in zip(call, result, strict=True):
            fates[eid] = fate
        self._forget_some()
        raise AppendIncomplete(topic=self.topic, timeout=timeout, fates=[
            EventFate(eid, f if type(f) is int else None, f if isinstance(f, str) else None)
            for eid, f in zip(call, result, strict=True)])

    def _forget_some(self) -> None:
        fates = self._fates
        if len(fates) <= _FATES_MAX:
            return
        written = [eid for eid, f in fates.items() if type(f) is int]
        for eid in written[: len(fates) - _FATES_MAX]:
            del fates[eid]

    def append(self, event_type: str, payload: Any, *, timeout: float = 60.0, **kwargs: Any) -> int:
        """Append one event and return its offset (waits up to ``timeout`` s for the broker's
        acknowledgement; see :meth:`flush`)."""
        self.produce(event_type, payload, **kwargs)
        return self.flush(timeout)[-1]

    def append_many(self, events: Iterable[tuple[str, Any, Mapping[str, Any]]], *,
                    timeout: float = 60.0) -> list[int]:
        """Append ``(event_type, payload, kwargs)`` triples; return their offsets in order (see
        :meth:`flush`: to retry an incomplete one, give each event its ``event_id`` in ``kwargs``)."""
        for event_type, payload, kwargs in events:
            self.produce(event_type, payload, **kwargs)
        return self.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Wait up to ``timeout`` s for what is still queued, then close the producer.

        Raises :class:`~swarmlog.errors.AppendFailed` if events were still queued: closing
        abandons them, and whether they reached the log is then unknown.
        """
        abandoned = self._appender.close(timeout)
        if abandoned:
            raise AppendFailed(topic=self.topic, detail=(
                f"closed with {abandoned} event(s) still queued after {timeout}s (Kafka unreachable?): they "
                f"may or may not be in the log; read it for their event ids before appending them again"))

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except AppendFailed as failure:
            if exc is None:
                raise
            logger.error("%s", failure)  # the error on its way out says more; this one is logged

    def _encoder(self, event_type: str) -> Encoder:
        schema: EventSchema = self.registry.latest(event_type)
        enc = self._encoders[event_type] = Encoder(schema)
        return enc
