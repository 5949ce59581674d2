"""``swarmlog check causality``: the log's order respects what caused what.

Over a whole log, for every event:

* every cause is an earlier offset that holds a readable event
  (``cause_not_before``, ``cause_missing``);
* an output of a step names that step's input as its first cause
  (``step_not_first_cause``), and that input was addressed to the agent that
  handled it, i.e. every message received was sent to it (``input_not_addressed``);
* a logical timer's firing follows that agent's ``timer.set`` of the same name
  (``timer_not_set``);
* the log starts at offset 0 (``history_incomplete``: retention deleted its beginning);
* every message is a readable event (``unreadable``: named with its offset and why, never
  skipped in silence) whose routing headers agree with its envelope (``header_mismatch``:
  readers that route by header would send it elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RoutingHeaderMismatch, SwarmlogError
from ..kafka.backend import backend_for
from ..log.base import LogBackend
from ..log.protocol import RUN_STARTED, TIMER_FIRED, TIMER_SET, parse_step
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ..settings import Settings

__all__ = ["CausalityViolation", "check_causality"]


@dataclass(frozen=True, slots=True)
class CausalityViolation:
    offset: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"offset {self.offset}: {self.rule}: {self.detail}"


@dataclass(frozen=True, slots=True)
class _Seen:
    agent: str
    to: str | None
    event_type: str
    name: str | None  # timer name for timer.set


def check_causality(*, settings: Settings, topic: str | None = None, registry: SchemaRegistry | None = None,
                    progress: Callable[[int], None] | None = None,
                    backend: LogBackend | None = None) -> tuple[int, list[CausalityViolation]]:
    """Check the whole log; return (events checked, violations in offset order)."""
    topic = topic or settings.topic
    decoder = Decoder(registry or SchemaRegistry.load(settings.schema_dirs()))
    backend = backend_for(settings, backend)
    seen: dict[int, _Seen] = {}
    violations: list[CausalityViolation] = []
    count = 0
    with backend.reader(topic) as reader:
        history = backend.history(topic)
        if not history.complete:
            violations.append(CausalityViolation(history.log_start, "history_incomplete",
                                        f"the log starts here, not at 0 ({history.describe()}): causes before "
                                        f"it cannot be checked"))
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
                    continue
                count += 1
                etype, agent, causes = writer.event_type, rec["agent_id"], rec["causes"]
                payload = rec["payload"]
                for c in causes:
                    if c >= off:
                        violations.append(CausalityViolation(off, "cause_not_before",
                                                             f"cause {c} is not before {off}"))
                    elif c not in seen:
                        violations.append(CausalityViolation(off, "cause_missing",
                                                             f"cause {c} is not a readable event"))
                step = parse_step(rec["event_id"])
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
                    elif first is not None and not _addressed(first, agent):
                        violations.append(CausalityViolation(off, "input_not_addressed",
                                                    f"{agent} handled offset {causes[0]}, which was a "
                                                    f"{first.event_type} from {first.agent} to "
                                                    f"{first.to or 'everyone'}"))
                elif step is not None and not causes:
                    violations.append(CausalityViolation(off, "step_not_first_cause", "a step's output names no cause"))
                seen[off] = _Seen(agent, rec["to"], etype, payload.get("name") if etype == TIMER_SET else None)
            if progress is not None:
                progress(count)
    return count, violations


def _addressed(event: _Seen, agent: str) -> bool:
    if event.event_type == RUN_STARTED:
        return True
    if event.agent == agent:
        return event.event_type == TIMER_FIRED and event.to == agent
    return event.to == agent or event.to is None
