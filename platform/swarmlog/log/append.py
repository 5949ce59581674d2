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

from ..errors import (
    AppendFailed,
    AppendIncomplete,
    DuplicateEventId,
    EventFate,
    InvalidCause,
    InvalidEvent,
    UsageError,
)
from ..kafka.backend import KafkaBackend
from ..schema.codec import Decoder, Encoder
from ..schema.registry import EventSchema, SchemaRegistry
from ..settings import Settings
from .base import Appender, Delivered, LogBackend, message_at
from .protocol import (
    AGENT_NAME_RULE,
    ID_RULE,
    LABEL_RULE,
    MESSAGE,
    Headers,
    agent_name_problem,
    id_problem,
    name_problem,
)

__all__ = ["EventLog"]

logger = logging.getLogger(__name__)

_NOT_SEEN: Any = object()
_FATES_MAX = 100_000
"""Written events whose fates an incomplete append remembers (for its retry), at most; pending
and refused ones are always kept (forgetting a pending one would let its retry duplicate it)."""
_NAMES_MAX = 4096
_IDS_KEPT = 100_000
"""Explicit event ids an EventLog remembers having appended, at most (the newest): the duplicates it can know."""
_EVENTS_KEPT = 100_000
"""Offsets an EventLog remembers holding events (for checking causes without a read), at most."""


def _bad_name(event_type: str, field: str, value: object, problem: str | None, rule: str) -> InvalidEvent:
    return InvalidEvent(event_type=event_type, field=field, problem=f"{value!r} {problem}; {rule}")


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
        if id_problem(run_id, empty=True) is not None:  # before a producer is made
            raise _bad_name("(any)", "run_id", run_id, id_problem(run_id, empty=True), ID_RULE)
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
        """Agent names (writers and recipients) found to follow the name grammar, encoded."""
        self._labels: set[str] = set()
        """Message kinds found to follow theirs."""
        self._run_ids: set[str] = {run_id}
        """Run ids found to follow theirs (an empty one is allowed)."""
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
        self._ids: dict[str, int | None] = {}
        """Explicit event ids this log appended (the latest ``_IDS_KEPT``): offset, or None while queued.
        A second event with one is refused (DuplicateEventId): readers would skip it as a copy."""
        self._explicit: list[int] = []
        """Where in ``_call`` the events with explicit ids are."""
        self._backend = backend
        self._events: set[int] = set()
        """Offsets known to hold events of this log (its own, and causes found to): causes need no read."""
        self._end = 0
        """The log's end as last known (exclusive): a cause below it needs no watermark request."""
        self._raw = ""
        """Once produce_raw was used: what its messages' ids in ``_call`` start with (they are no events)."""

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
        explicit = event_id is not None
        if event_id is None:
            self._counter += 1
            event_id = self._id_prefix + str(self._counter)
        else:
            if self._fates and self._known(event_id):
                return
            if event_id in self._ids:  # an id this log already appended: a second event would be a copy
                raise DuplicateEventId(event_type=event_type, event_id=event_id, offset=self._ids[event_id])
            if id_problem(event_id) is not None:
                raise _bad_name(event_type, "event_id", event_id, id_problem(event_id), ID_RULE)
        enc = self._encoders.get(event_type)
        if enc is None:
            enc = self._encoder(event_type)
        payload = enc.schema.validate_payload(payload)
        if causes:
            self._check_causes(event_type, causes)
        if run_id is not None and run_id not in self._run_ids:
            self._run_id(event_type, run_id)
        names = self._agent_bytes
        # Names are checked (protocol.name_problem) the first time this log sees them: they repeat.
        agent_b = names.get(agent)
        if agent_b is None:
            agent_b = self._name(event_type, "agent_id", agent)
        if to is None:
            to_b = None
        else:
            to_b = names.get(to)
            if to_b is None:
                to_b = self._name(event_type, "to", to)
        if event_type == MESSAGE and payload["kind"] not in self._labels:
            self._label(event_type, payload["kind"])
        value = enc.encode_event(event_id, self.run_id if run_id is None else run_id, agent, to, causes, payload)
        self._appender.send(value, agent_b, enc.headers(agent_b, to_b))
        if explicit:
            self._explicit.append(len(self._call))
            self._remember_id(event_id, None)
        self._call.append(event_id)

    def _remember_id(self, event_id: str, offset: int | None) -> None:
        ids = self._ids
        ids[event_id] = offset
        if len(ids) > _IDS_KEPT:  # the oldest first: a dict keeps insertion order
            del ids[next(iter(ids))]

    # -- causes ---------------------------------------------------------------------------

    def _check_causes(self, event_type: str, causes: Sequence[int]) -> None:
        """:class:`~swarmlog.errors.InvalidCause` unless every cause is an event already in this log.

        Why at write: a cause is what ``show``, the timeline, tracing and ``check`` follow back, and
        a reader cannot tell a cause that never named an event from one whose event the log lost
        since (a hole: compaction, a deletion). So a negative cause, one at or past the log's end
        (the new event's own offset is later still), and one at an offset that holds no event (a
        transaction marker, an aborted or deleted record, a message that is not an event) are
        refused before anything is written. The offsets this log wrote itself and those it found
        to hold events are known without asking; any other costs one read of that offset, once (it is
        then known). That read checks the envelope only, so an event of a schema version newer than this
        process knows is a valid cause (the writers-first rolling upgrade of docs/schemas.md).
        """
        for c in causes:
            if type(c) is not int or c < 0:
                raise InvalidCause(event_type=event_type, cause=c, why="is negative" if type(c) is int
                                   else f"is a {type(c).__name__}, not an offset")
            if c in self._events:
                continue
            if c >= self._end:
                self._end = max(self._end, self._backend.watermarks(self.topic)[1])
                if c >= self._end:
                    raise InvalidCause(event_type=event_type, cause=c, why=(
                        f"is at or past the end of the log (the next offset is {self._end}): it cannot cause an "
                        f"event appended now, whose own offset is later still"))
            why = self._holds_no_event(c)
            if why is not None:
                raise InvalidCause(event_type=event_type, cause=c, why=why)
            self._known_event(c)

    def _holds_no_event(self, offset: int) -> str | None:
        found = message_at(self._backend, self.topic, offset)
        if found is None:
            low, _ = self._backend.watermarks(self.topic)
            if offset < low:
                return f"is before the log's first offset {low} (deleted)"
            return ("holds no event (a transaction marker, an aborted record, or an offset not yet committed: "
                    "readers see none there)")
        # The envelope, not the payload: a cause a newer writer wrote (a schema version this process
        # does not know yet, mid rolling upgrade) is an event all the same (Decoder.envelope_problem).
        problem = Decoder.envelope_problem(found.value())
        if problem is not None:
            return f"holds a message that is not a readable event (it {problem})"
        return None

    def _known_event(self, offset: int) -> None:
        if len(self._events) >= _EVENTS_KEPT:
            self._events.clear()
        self._events.add(offset)

    def _name(self, event_type: str, field: str, name: str) -> bytes:
        problem = agent_name_problem(name)
        if problem is not None:
            raise _bad_name(event_type, field, name, problem, AGENT_NAME_RULE)
        names = self._agent_bytes
        if len(names) >= _NAMES_MAX:  # names repeat; anything else must not grow this forever
            names.clear()
        b = names[name] = name.encode()
        return b

    def _label(self, event_type: str, kind: str) -> None:
        problem = name_problem(kind, agent=False)
        if problem is not None:
            raise _bad_name(event_type, "payload.kind", kind, problem, LABEL_RULE)
        if len(self._labels) >= _NAMES_MAX:
            self._labels.clear()
        self._labels.add(kind)

    def _run_id(self, event_type: str, run_id: str) -> None:
        problem = id_problem(run_id, empty=True)
        if problem is not None:
            raise _bad_name(event_type, "run_id", run_id, problem, ID_RULE)
        if len(self._run_ids) >= _NAMES_MAX:
            self._run_ids.clear()
        self._run_ids.add(run_id)

    def produce_raw(self, value: bytes | None, *, key: bytes | None = None, headers: Headers | None = None) -> None:
        """Produce bytes as they are (tools and tests: e.g. a message no schema describes)."""
        self._appender.send(value, key, headers)
        self._counter += 1
        self._raw = self._id_prefix + "raw"  # from now on, flushes tell its messages from events
        self._call.append(f"{self._raw}{self._counter}")

    def flush(self, timeout: float = 60.0) -> list[int]:
        """Wait up to ``timeout`` s for every event produced since the last flush; return their
        offsets in produce order, or raise :class:`~swarmlog.errors.AppendIncomplete`."""
        delivered = self._appender.flush(timeout)
        call, self._call = self._call, []
        explicit, self._explicit = self._explicit, []
        if not (self._carried or self._reused or delivered.errors or delivered.pending) \
                and len(delivered.offsets) == len(call):
            offsets = delivered.offsets  # the common case: this call's events, all written, in order
            if offsets:
                self._wrote(offsets if not self._raw else [o for e, o in zip(call, offsets, strict=True)
                                                           if not e.startswith(self._raw)])
                for i in explicit:
                    self._ids[call[i]] = offsets[i]
            return offsets
        return self._settle(call, delivered, timeout)

    def _wrote(self, offsets: list[int]) -> None:
        """Offsets this log's events got: events a later cause may name without a read to check it."""
        if not offsets:
            return
        if len(self._events) + len(offsets) > _EVENTS_KEPT:
            self._events.clear()
        self._events.update(offsets)
        if offsets[-1] >= self._end:
            self._end = offsets[-1] + 1

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
        written = sorted(f for e, f in zip(call, result, strict=True)
                         if type(f) is int and not (self._raw and e.startswith(self._raw)))
        if written:
            self._wrote(written)
        ids = self._ids
        for eid, fate in zip(call, result, strict=True):
            if eid in ids:  # an explicit id: its offset once written; forgotten if refused (sent anew)
                if isinstance(fate, str):
                    del ids[eid]
                elif fate is not None:
                    ids[eid] = fate
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

    def offset_of(self, event_id: str) -> int | None:
        """The offset of the event with ``event_id`` in the whole log, None if there is none
        (:func:`offset_of`)."""
        return offset_of(self._backend, self.topic, event_id)

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


def offset_of(backend: LogBackend, topic: str, event_id: str) -> int | None:
    """The offset of the event with ``event_id`` in ``topic``'s whole log, None if there is none: a read
    of every message's envelope (``swarmlog append --event-id`` asks before it writes)."""
    want = event_id.encode()
    find = Decoder.event_id
    with backend.reader(topic) as reader:
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                if find(m) == want:
                    return int(m.offset())
    return None
