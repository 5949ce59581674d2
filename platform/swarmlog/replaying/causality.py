"""``swarmlog check causality``: the log's order respects what caused what, and the log is whole.

Over a whole log, for every event, findings in four sections (:data:`SECTIONS`), so that a
message nobody can read is never mistaken for a causality violation, nor hidden among them:

* **history**: the log starts at offset 0 (``history_incomplete``: retention or DeleteRecords
  deleted its beginning); its configuration keeps every event (``history_deletes``: a
  ``cleanup.policy`` with ``compact``, a finite ``retention.ms``/``retention.bytes``); no offset
  a cause names has lost its event (``hole``: causes are checked when written, so an event naming
  an offset that holds nothing is one the log has lost since — compaction keeps only the newest
  message per key);
* **unreadable**: every message is a readable event (``unreadable``: named with its offset and why,
  never skipped in silence) whose routing headers agree with its envelope (``header_mismatch``:
  readers that route by header would send it elsewhere);
* **repeated event ids**: an event id names one event (``duplicate_event_id``: a second event with
  an id already in the log — a re-sent message, a copy tool — is an anomaly at its offset, which no
  agent handles; ``handled_duplicate``: a step whose input was such a copy);
* **causality**: every cause is an earlier offset that holds a readable event
  (``cause_not_before``, ``cause_missing``); an output of a step names that step's input as its
  first cause (``step_not_first_cause``), and that input was addressed to the agent that handled it,
  i.e. every message received was sent to it (``input_not_addressed``); a logical timer's firing
  follows that agent's ``timer.set`` of the same name (``timer_not_set``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import RoutingHeaderMismatch, SwarmlogError
from ..kafka.backend import backend_for
from ..log.base import LogBackend
from ..log.protocol import RUN_STARTED, STATE_DIGEST, TIMER_FIRED, TIMER_SET, parse_step
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings

__all__ = ["SECTIONS", "CausalityViolation", "check_causality"]

SECTIONS = (("history", "history problems"), ("unreadable", "unreadable messages"), ("duplicate", "repeated event ids"),
            ("causality", "causality violations"))
"""(section, what its findings are called), in the order ``swarmlog check`` prints them."""
_SECTION_OF = {"history_incomplete": "history", "history_deletes": "history", "hole": "history",
               "unreadable": "unreadable", "header_mismatch": "unreadable",
               "duplicate_event_id": "duplicate", "handled_duplicate": "duplicate"}


@dataclass(frozen=True, slots=True)
class CausalityViolation:
    offset: int
    rule: str
    detail: str

    @property
    def section(self) -> str:
        """Which of :data:`SECTIONS` the finding belongs to."""
        return _SECTION_OF.get(self.rule, "causality")

    def __str__(self) -> str:
        return f"offset {self.offset}: {self.rule}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "section": self.section, "rule": self.rule, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class _Seen:
    agent: str
    to: str | None
    event_type: str
    name: str | None  # timer name for timer.set
    duplicate_of: int | None = None  # the offset of the first event with this id, for a repeated one


def check_causality(*, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                    progress: Callable[[int], None] | None = None,
                    backend: LogBackend | None = None) -> tuple[int, list[CausalityViolation]]:
    """Check the whole log; return (events checked, findings in offset order)."""
    topic = topic or settings.topic
    decoder = Decoder(registry or SchemaRegistry.load(settings.schema_dirs()))
    backend = backend_for(settings, backend)
    seen: dict[int, _Seen] = {}
    ids: dict[str, int] = {}  # event id -> the offset of the first event with it
    unreadable: set[int] = set()
    violations: list[CausalityViolation] = []
    holes: set[int] = set()
    count = 0
    with backend.reader(topic) as reader:
        history = backend.history(topic)
        if not history.complete:
            violations.append(CausalityViolation(history.log_start, "history_incomplete",
                                        f"the log starts here, not at 0 ({history.describe()}): causes before "
                                        f"it cannot be checked"))
        if history.deletes:
            violations.append(CausalityViolation(history.log_start, "history_deletes",
                                        f"the topic's configuration deletes events ({history.deletes}); "
                                        f"{history.remedy(topic)}"))
        reader.assign(0)
        for batch in reader.batches():
            for m in batch:
                off = m.offset()
                try:
                    writer, rec = decoder.decode_checked(m)
                except RoutingHeaderMismatch as exc:
                    violations.append(CausalityViolation(off, "header_mismatch", f"header {exc.header} says "
                                                f"{exc.header_value!r}, the envelope {exc.envelope_value!r}"))
                    writer, rec = decoder.decode(m.value(), off)  # it decoded: check its causes too
                except SwarmlogError as exc:
                    violations.append(CausalityViolation(off, "unreadable", str(exc)))
                    unreadable.add(off)
                    continue
                count += 1
                etype, agent, causes = writer.event_type, rec["agent_id"], rec["causes"]
                payload = rec["payload"]
                event_id = rec["event_id"]
                first_with_id = ids.get(event_id)
                if first_with_id is None:
                    ids[event_id] = off
                else:
                    violations.append(CausalityViolation(off, "duplicate_event_id",
                                                f"event id {event_id!r} is already the event at offset "
                                                f"{first_with_id}: a second copy (re-sent by a producer or a copy "
                                                f"tool), which no agent may handle"))
                # A state digest names the steps it digests: offsets that held the agent's inputs.
                named = [s for s in payload.get("steps", ()) if s not in seen] if etype == STATE_DIGEST else ()
                for c in named:
                    if c not in unreadable and history.log_start <= c < off and c not in holes:
                        holes.add(c)
                        violations.append(CausalityViolation(c, "hole", (
                            f"offset {c} holds no event, but {agent}'s state digest at {off} names it as a step it "
                            f"handled: the log has lost it. {history.remedy(topic)}")))
                # A logical timer fires during the step of the message that made it due, whatever that
                # message is: its second cause may be one that is not a readable event (it still counted).
                ticked = causes[1:2] if etype == TIMER_FIRED and payload.get("clock") == "events" else ()
                for c in causes:
                    if c in ticked and c in unreadable:
                        continue
                    if c >= off:
                        violations.append(CausalityViolation(off, "cause_not_before", f"cause {c} is not before {off}"))
                    elif c not in seen:
                        if c in unreadable or c < 0 or c < history.log_start:
                            violations.append(CausalityViolation(off, "cause_missing",
                                                                 f"cause {c} is not a readable event"))
                        elif c not in holes:
                            holes.add(c)
                            violations.append(CausalityViolation(c, "hole", (
                                f"offset {c} holds no event, but the event at {off} names it as a cause: the log "
                                f"has lost it (compaction keeps only the newest message per key), or a writer named "
                                f"an offset that never held one (swarmlog checks causes when it writes them). "
                                f"{history.remedy(topic)}")))
                step = parse_step(event_id)
                if step is not None and causes:
                    first = seen.get(causes[0])
                    is_logical_timer = etype == TIMER_FIRED and payload.get("clock") == "events"
                    if is_logical_timer:
                        if first is None or first.event_type != TIMER_SET or first.agent != agent \
                                or first.name != payload["name"]:
                            violations.append(CausalityViolation(off, "timer_not_set",
                                                        f"{agent} fired timer {payload['name']!r} not set at "
                                                        f"{causes[0]}"))
                    elif causes[0] != step[0]:
                        violations.append(CausalityViolation(off, "step_not_first_cause",
                                                    f"output of step {step[0]} names {causes[0]} as its first cause"))
                    elif first is not None and first.duplicate_of is not None:
                        violations.append(CausalityViolation(off, "handled_duplicate",
                                                    f"{agent} handled offset {causes[0]}, a second copy of the event "
                                                    f"at {first.duplicate_of}: the same event handled twice"))
                    elif first is not None and not _addressed(first, agent):
                        violations.append(CausalityViolation(off, "input_not_addressed",
                                                    f"{agent} handled offset {causes[0]}, which was a "
                                                    f"{first.event_type} from {first.agent} to "
                                                    f"{first.to or 'everyone'}"))
                elif step is not None and not causes:
                    violations.append(CausalityViolation(off, "step_not_first_cause", "a step's output names no cause"))
                seen[off] = _Seen(agent, rec["to"], etype, payload.get("name") if etype == TIMER_SET else None,
                                  first_with_id)
            if progress is not None:
                progress(count)
    violations.sort(key=lambda v: v.offset)
    return count, violations


def _addressed(event: _Seen, agent: str) -> bool:
    if event.event_type == RUN_STARTED:
        return True
    if event.agent == agent:
        return event.event_type == TIMER_FIRED and event.to == agent
    return event.to == agent or event.to is None
