"""Reading a swarm's log as events: ``swarmlog log`` and ``swarmlog show``, and what a timeline draws.

A :class:`LogView` reads the topic ``read_committed`` (what every replay sees), decodes
each message into the newest schema version this process knows, and hands out
:class:`LoggedEvent` objects in offset order: the :class:`~swarmlog.events.Event`, the
message's headers, and — for a message that does not decode — why not, instead of
dropping it. Filters (offset range, agents, event types, run) apply after decoding;
``follow=True`` keeps reading as the log grows, like ``tail -f``.

Causes, both ways. Every event names the offsets that caused it (``causes``: for a
step's output, the step's input first, then the effects it used; for a timer's firing,
its ``timer.set``). :meth:`LogView.explain` resolves one event's causes and finds what
it caused — every later event naming it — and :meth:`LogView.graph` does the same for
a whole range in one pass, which is what a timeline's causal arrows are drawn from.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import EventNotFound, SwarmlogError
from ..events import Event
from ..kafka.backend import backend_for
from ..log.base import LogBackend
from ..log.protocol import (
    EFFECT_RECORDED,
    HANDLER_FAILED,
    HTTP_EXCHANGE,
    LLM_CALL,
    MESSAGE,
    RECORDED_EFFECTS,
    RUN_CONTINUED,
    RUN_FORKED,
    RUN_MOVED,
    RUN_SEEDED,
    RUN_STARTED,
    STATE_DIGEST,
    TIMER_CANCELLED,
    TIMER_FIRED,
    TIMER_SET,
)
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings
from ..terminal import printable
from .conversation import Conversation, conversation

__all__ = ["BROADCAST", "CausalGraph", "Explained", "LogView", "LoggedEvent"]

logger = logging.getLogger(__name__)

BROADCAST = "*"
"""How a line shows the recipient of a broadcast (``to`` is null)."""


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One message of the log as read: its decoded event, or why it does not decode."""

    offset: int
    event: Event | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    error: str | None = None
    """Why the message is not a readable event (``event`` is then None)."""

    @property
    def event_type(self) -> str:
        return self.event.event_type if self.event is not None else "(undecodable)"

    @property
    def agent(self) -> str:
        return self.event.agent_id if self.event is not None else ""

    @property
    def to(self) -> str | None:
        return self.event.to if self.event is not None else None

    @property
    def causes(self) -> list[int]:
        return list(self.event.causes) if self.event is not None else []

    @property
    def payload(self) -> dict[str, Any]:
        return self.event.payload if self.event is not None else {}

    @property
    def kind(self) -> str | None:
        return self.event.kind if self.event is not None else None

    @property
    def conversation(self) -> Conversation | None:
        """The model call this event records, read as a conversation (an ``llm.call``, or an
        ``http.exchange`` with a known LLM API); None for anything else."""
        return conversation(self.event.event_type, self.event.payload) if self.event is not None else None

    def summary(self, width: int = 72) -> str:
        """A short text of the payload, by event type (what ``swarmlog log`` prints after the routing),
        non-printable characters escaped (:func:`swarmlog.terminal.printable`)."""
        return _clip(printable(_summary(self)), width)

    def line(self, width: int = 72) -> str:
        """The event on one line: offset, agent, type, recipient, a short payload. Whatever came from
        the log is escaped (:func:`swarmlog.terminal.printable`): a name holding a newline or an escape
        sequence shows as its escapes, and cannot forge a line or act on the terminal."""
        if self.event is None:
            return (f"{self.offset:>7}  {'?':<12} {'(undecodable)':<16}   {'':<12} "
                    f"{_clip(printable(self.error or ''), width)}")
        to = printable(self.to) if self.to is not None else BROADCAST
        return (f"{self.offset:>7}  {printable(self.agent):<12} {printable(self.event_type):<16} → {to:<12} "
                f"{self.summary(width)}")

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-able (``swarmlog log --json`` prints one of these a line)."""
        doc: dict[str, Any] = {"offset": self.offset}
        e = self.event
        if e is None:
            doc.update({"event_type": None, "error": self.error})
        else:
            doc.update({"event_type": e.event_type, "version": e.version, "event_id": e.event_id,
                        "run_id": e.run_id, "agent": e.agent_id, "to": e.to, "causes": list(e.causes),
                        "payload": _plain(e.payload), "timestamp_ms": e.timestamp_ms})
            convo = self.conversation
            if convo is not None:
                doc["conversation"] = convo.to_json()
        doc["headers"] = {k: v.decode(errors="replace") for k, v in self.headers}
        return doc


@dataclass(frozen=True, slots=True)
class Explained:
    """One event with what caused it and what it caused (``swarmlog show``)."""

    event: LoggedEvent
    causes: list[LoggedEvent | int]
    """The events its ``causes`` name, in that order (an offset that holds no readable event stays an int)."""
    caused: list[LoggedEvent]
    """Every later event that names it among its causes, in offset order."""
    scanned_to: int
    """``caused`` is complete up to this offset (exclusive): the end of the log, unless a bound was given."""

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event.to_json(),
                "causes": [c.to_json() if isinstance(c, LoggedEvent) else {"offset": c, "event_type": None}
                           for c in self.causes],
                "caused": [c.to_json() for c in self.caused], "scanned_to": self.scanned_to}


@dataclass(slots=True)
class CausalGraph:
    """The events of a range and their causes both ways, from one pass (what a timeline draws)."""

    events: dict[int, LoggedEvent]
    causes: dict[int, list[int]]
    """offset -> the offsets it names as causes (those before the range included)."""
    caused: dict[int, list[int]]
    """offset -> the offsets in the range that name it, in order."""


class LogView:
    """The events of one topic, decoded (``backend``: Kafka by default)."""

    def __init__(self, *, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                 backend: LogBackend | None = None) -> None:
        self.settings = settings
        self.topic = topic or settings.topic
        self.registry = registry or SchemaRegistry.load(settings.schema_dirs())
        self.backend = backend_for(settings, backend)
        self.decoder = Decoder(self.registry)

    # -- reading -----------------------------------------------------------------------------

    def read(self, message: Any) -> LoggedEvent:
        """The :class:`LoggedEvent` of one raw message of this log."""
        off = message.offset()
        headers = message.headers() or []
        try:
            writer, record = self.decoder.decode(message.value(), off)
        except SwarmlogError as exc:
            return LoggedEvent(off, None, headers, str(exc))
        return LoggedEvent(off, Event.from_message(message, writer, record), headers)

    def events(self, *, start: int = 0, end: int | None = None, agents: Iterable[str] = (),
               types: Iterable[str] = (), run: str | None = None, follow: bool = False,
               stop: threading.Event | None = None) -> Iterator[LoggedEvent]:
        """The events of ``[start, end)`` in offset order that pass every filter given.

        ``agents``: events one of them wrote or that were addressed to one of them (a broadcast
        is addressed to every agent but its sender). ``types``: event types (``agent.message``)
        or message kinds (``agent.message:task_complete``). ``run``: events of that run id.
        ``follow``: past the end, wait for more until ``stop`` is set (or forever).
        """
        want_agents = frozenset(agents)
        want_types = frozenset(types)
        with self.backend.reader(self.topic) as reader:
            reader.assign(start)
            for batch in reader.batches(end=end, follow=follow):
                for m in batch:
                    e = self.read(m)
                    if _wanted(e, want_agents, want_types, run):
                        yield e
                if stop is not None and stop.is_set():
                    return

    def event(self, offset: int) -> LoggedEvent:
        """The event at ``offset``; raises :class:`~swarmlog.errors.EventNotFound` if none is there."""
        for e in self.events(start=offset, end=offset + 1):
            if e.offset == offset:
                return e
        raise EventNotFound(topic=self.topic, offset=offset, log_end=self.backend.watermarks(self.topic)[1])

    def explain(self, offset: int, *, within: int | None = None) -> Explained:
        """The event at ``offset``, its causes resolved, and every later event that names it.

        What it caused is searched to the end of the log (an effect can name its cause
        much later: a wall-clock firing names its ``timer.set``), or for ``within``
        offsets after it.
        """
        event = self.event(offset)
        causes: list[LoggedEvent | int] = []
        for c in event.causes:
            try:
                causes.append(self.event(c))
            except EventNotFound:
                causes.append(c)
        end = offset + 1 + within if within is not None else None
        caused = []
        scanned_to = offset + 1
        with self.backend.reader(self.topic) as reader:
            reader.assign(offset + 1)
            for batch in reader.batches(end=end):
                for m in batch:
                    e = self.read(m)
                    if offset in e.causes:
                        caused.append(e)
            scanned_to = reader.position.end_offset
        return Explained(event, causes, caused, scanned_to)

    def graph(self, *, start: int = 0, end: int | None = None) -> CausalGraph:
        """Every event of ``[start, end)`` with its causes both ways."""
        events: dict[int, LoggedEvent] = {}
        causes: dict[int, list[int]] = {}
        caused: dict[int, list[int]] = {}
        for e in self.events(start=start, end=end):
            events[e.offset] = e
            causes[e.offset] = e.causes
            for c in e.causes:
                caused.setdefault(c, []).append(e.offset)
        return CausalGraph(events=events, causes=causes, caused=caused)


def _wanted(e: LoggedEvent, agents: frozenset[str], types: frozenset[str], run: str | None) -> bool:
    ev = e.event
    if ev is None:
        return not agents and not types and run is None  # shown unless filtered away: never hidden silently
    if run is not None and ev.run_id != run:
        return False
    if agents and ev.agent_id not in agents and not any(ev.addressed_to(a) for a in agents):
        return False
    if types and ev.event_type not in types and (ev.kind is None or f"{ev.event_type}:{ev.kind}" not in types):
        return False
    return True


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _json_default(value: Any) -> Any:
    # Avro bytes and fixed (a state digest's sha256) as hex, as every digest is shown elsewhere.
    return value.hex() if isinstance(value, bytes | bytearray) else str(value)


def _plain(value: Any) -> Any:
    """``value`` with its bytes as hex: what ``--json`` prints, not Python's ``b'...'``."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.hex() if isinstance(value, bytes | bytearray) else value


def _short_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=_json_default, ensure_ascii=False)


def _summary(e: LoggedEvent) -> str:
    text = _what(e)
    p = e.payload
    if e.event_type in RECORDED_EFFECTS and p.get("call") is not None:
        # An async step's concurrent call: its identity, and when its result reached the coroutine
        # (first, so that a short line keeps it).
        text = f"[call #{p['call']} at {p.get('delivered_at'):.3f} s] {text}"
    return text


def _what(e: LoggedEvent) -> str:
    t, p = e.event_type, e.payload
    if t == MESSAGE:
        return f"{p.get('kind')} {_short_json(p.get('body'))}"
    if t == TIMER_SET:
        after = f"after {p['after_events']} events" if p.get("after_events") is not None \
            else f"after {p.get('after_ms')} ms"
        return f"{p.get('name')} {after}"
    if t == TIMER_FIRED:
        return f"{p.get('name')} (set at {p.get('set_offset')}, {p.get('clock')})"
    if t == TIMER_CANCELLED:
        return f"{p.get('name')}"
    if t == EFFECT_RECORDED:
        outcome = f"error {p['error']}" if p.get("error") else f"-> {p.get('result_json')}"
        return f"{p.get('name')}({p.get('args_json')}) {outcome}"
    if t in (LLM_CALL, HTTP_EXCHANGE):
        convo = e.conversation
        if convo is not None:
            return convo.summary()
        if t == LLM_CALL:
            return f"{p.get('model')} -> {p.get('response_json')}"
        outcome = f"error {p['error']}" if p.get("error") else f"-> {p.get('status')}"
        return f"{p.get('method')} {p.get('url')} {outcome}"
    if t == HANDLER_FAILED:
        return f"{p.get('error_type')}: {p.get('message')}"
    if t == RUN_STARTED:
        return f"swarm {p.get('swarm')} seed {p.get('seed')} code {p.get('code_version')} agents " \
               f"{','.join(p.get('agents', []))}"
    if t == STATE_DIGEST:
        last = f"{p['state'].hex()[:12]}…" if isinstance(p.get("state"), bytes) else p.get("state")
        final = " final" if p.get("final") else ""
        steps = ",".join(map(str, p.get("steps", [])))
        return f"after steps {steps}: state {last} (read to {p.get('position')}){final}"
    if t == RUN_FORKED:
        return f"from {p.get('source_topic')} before offset {p.get('at')} ({p.get('events')} events)"
    if t == RUN_CONTINUED:  # a continued run (docs/long-runs.md): where its earlier part is, to read it there
        return f"continues topic {p.get('from_topic')} [0, {p.get('from_end')}) (`--topic {p.get('from_topic')}` " \
               f"reads it): swarm {p.get('swarm')} seed {p.get('seed')} code {p.get('code_version')}"
    if t == RUN_SEEDED:
        return f"{p.get('agent')}'s fold at the end of the topic it continues: state {str(p.get('state_digest'))[:12]}…"
    if t == RUN_MOVED:
        return f"the run goes on on topic {p.get('to_topic')} (this topic's part ends at offset {p.get('from_end')})"
    return _short_json(p)
