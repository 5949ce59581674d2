"""Checking a topic against a version 2 token: ``swarmlog token verify``.

The topic to check is named explicitly — the token's own, a copy, a restored backup,
a mirrored topic — and the report says which. Then:

1. **One pass over the topic**, from the token's start offset to its end, checks every
   segment of the chain on its own (:class:`~._chain.ChainChecker`) and gathers the
   topic's writer schemas and recorded state digests.
2. **The first differing segment, event by event.** The token holds one link per K
   events, so it says which K events hold the first difference, not which one. A copy
   that still matches the token in that segment (by default the token's own topic,
   when another one is checked) is authentic there — its events chain to the token's
   link — and comparing the two event by event names the first offset whose bytes
   differ, and what that event is: which step of which agent wrote it, or whose
   recorded state it is.
3. **With the swarm's code**, the checked topic is replayed against itself: the first
   step whose outputs or state differ from what its log recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..agent import Swarm
from ..errors import SwarmlogError, TopicNotFound
from ..log.base import LogBackend
from ..log.protocol import PATCH_INDEX, RUN_STARTED, STATE_DIGEST, parse_step
from ..runtime import interpreter, replay_swarm_log
from ..runtime.digests import DigestRecord
from ..schema.codec import Decoder
from ..schema.registry import SchemaRegistry
from ._chain import ChainChecker, SegmentResult, genesis, segment_link
from ._create import LogFacts
from ._document import ReplayTokenV2


@dataclass(frozen=True, slots=True)
class EventBrief:
    """One side of a differing event, as far as it decodes."""

    offset: int
    size: int
    event_type: str | None
    agent: str | None
    event_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "size": self.size, "event_type": self.event_type, "agent": self.agent,
                "event_id": self.event_id}


@dataclass(slots=True)
class FirstDifference:
    """The first event at which the checked topic departs from the token's history."""

    offset: int
    """The offset in the checked topic (for an event it lacks: the offset the token's log has it at)."""
    what: str
    """``bytes`` (same offset, other bytes), ``missing`` (the token's event is not there), ``extra``
    (an event the token's history does not have), ``offset`` (the same event at another offset)."""
    token_side: EventBrief | None
    topic_side: EventBrief | None
    first_byte: int | None = None
    """With ``bytes``: the index of the first differing byte in the message's value."""
    step: str | None = None
    """Which step's outputs or state the event is, in words."""
    departs: str | None = None
    """``outputs`` or ``state``: what of that step the difference changes (None: no step's)."""

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "what": self.what, "first_byte": self.first_byte, "step": self.step,
                "departs": self.departs,
                "token": self.token_side.to_json() if self.token_side else None,
                "topic": self.topic_side.to_json() if self.topic_side else None}


@dataclass(slots=True)
class TokenCheck:
    """What checking one topic against one token found."""

    token: ReplayTokenV2
    topic: str
    signature: str
    topic_start: int
    topic_end: int
    segments: list[SegmentResult] = field(default_factory=list)
    first_difference: FirstDifference | None = None
    located: str = ""
    """How the first differing segment was narrowed down (or why it could not be)."""
    run: list[str] = field(default_factory=list)
    """What the token says of the run (seed, code, interpreter) that the topic's run.started does not."""
    schemas: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    replay: dict[str, Any] | None = None
    """With the swarm's code: the replay of the checked topic (its first divergence, if any)."""

    @property
    def own_topic(self) -> bool:
        return self.topic == self.token.topic

    @property
    def bad_segments(self) -> list[SegmentResult]:
        return [s for s in self.segments if not s.ok]

    @property
    def ok(self) -> bool:
        replay_ok = self.replay is None or (self.replay["first_divergence"] is None
                                            and not self.replay.get("agents_differ"))
        return not self.bad_segments and not self.agents and not self.schemas and not self.run and replay_ok \
            and self.topic_start <= self.token.start_offset and self.topic_end >= self.token.end_offset

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "topic": self.topic, "token_topic": self.token.topic, "own_topic": self.own_topic,
            "signature": self.signature, "token_start_offset": self.token.start_offset,
            "topic_start_offset": self.topic_start, "token_end_offset": self.token.end_offset,
            "topic_end_offset": self.topic_end, "events": self.token.events,
            "segments": len(self.segments),
            "bad_segments": [{"index": s.index, "start_offset": s.start_offset, "end_offset": s.end_offset,
                              "token_events": s.token_events, "topic_events": s.topic_events}
                             for s in self.bad_segments],
            "first_difference": self.first_difference.to_json() if self.first_difference else None,
            "located": self.located, "run": self.run, "schemas": self.schemas, "agents": self.agents,
            "replay": self.replay,
        }

    def lines(self) -> list[str]:
        t = self.token
        which = (f"checking the token's own topic {self.topic}" if self.own_topic else
                 f"checking topic {self.topic} against a token of topic {t.topic} (a copy, a restored backup or "
                 f"a mirror of it)")
        out = [f"{which}: offsets [{t.start_offset}, {t.end_offset}), {t.events} events, a checkpoint every "
               f"{t.chain_every}; signature {self.signature}"]
        if self.topic_start > t.start_offset:
            out.append(f"the topic starts at offset {self.topic_start}, the token's history at {t.start_offset}: "
                       f"events before {self.topic_start} are gone")
        if self.topic_end < t.end_offset:
            out.append(f"the topic ends at offset {self.topic_end}, before the token's end {t.end_offset}")
        bad = self.bad_segments
        if bad:
            out.append(f"{len(bad)} of {len(self.segments)} segment(s) differ; the first holds offsets "
                       f"[{bad[0].start_offset}, {bad[0].end_offset}) ({bad[0].token_events} event(s) in the "
                       f"token's history, {bad[0].topic_events} in the topic)")
        d = self.first_difference
        if d is not None:
            if d.what == "bytes":
                out.append(f"FIRST DIFFERENCE at offset {d.offset}: its bytes differ (first at byte {d.first_byte} "
                           f"of the value)")
            elif d.what == "missing":
                out.append(f"FIRST DIFFERENCE at offset {d.offset}: the topic lacks the event the token's history "
                           f"has there")
            elif d.what == "extra":
                out.append(f"FIRST DIFFERENCE at offset {d.offset}: an event the token's history does not have")
            else:
                out.append(f"FIRST DIFFERENCE at offset {d.offset}: the token's event "
                           f"{d.token_side.offset if d.token_side else '?'} is at another offset here (the "
                           f"topic was re-produced, not restored: offsets are the swarm's clock, so it cannot "
                           f"replay the run)")
            if d.step:
                out.append(f"  it is {d.step}" + (f": the first step whose {d.departs} differ"
                                                   if d.departs and d.what != "offset" else ""))
        if self.located:
            out.append(f"  ({self.located})")
        out.extend(self.run)
        out.extend(self.schemas)
        out.extend(self.agents)
        if self.replay is not None:
            first = self.replay["first_divergence"]
            if first is None:
                out.append(f"replaying {self.replay['swarm']} against the topic: no step's outputs or state differ "
                           f"from what the topic records")
            else:
                out.append(f"replaying {self.replay['swarm']} against the topic: the first step whose "
                           f"{'state' if first['kind'] == 'state' else 'outputs'} differ is at offset "
                           f"{first['offset']} (agent {first['agent']}): {first['detail']}")
            out.extend(self.replay.get("agents_differ", []))
        out.append("the topic matches the token" if self.ok else "the topic does NOT match the token")
        return out


def verify_token(*, backend: LogBackend, token: ReplayTokenV2, topic: str, registry: SchemaRegistry,
                 signature: str, reference: str | None = None, swarm: Swarm | None = None) -> TokenCheck:
    """Check ``topic`` against ``token``; ``reference`` is a copy to narrow a difference down with
    (default: the token's own topic, when another one is checked)."""
    low, _ = backend.watermarks(topic)
    checker = ChainChecker(start_offset=token.start_offset, checkpoints=token.checkpoints)
    facts = LogFacts(registry=registry)
    with backend.reader(topic) as reader:
        reader.assign(max(low, token.start_offset))
        for batch in reader.batches(end=token.end_offset):
            checker.update_batch(batch)
            facts.update_batch(batch)
        end = reader.position.end_offset
    check = TokenCheck(token=token, topic=topic, signature=signature, topic_start=low, topic_end=end,
                       segments=checker.finish())
    bad = check.bad_segments
    if bad:
        _locate(check, backend, registry, bad[0], reference if reference is not None
                else (token.topic if topic != token.topic else None))
    check.schemas = [f"schemas: {name} ({fp}) " + ("is not in the token's history" if name not in token.schemas
                                                   else f"has fingerprint {token.schemas[name]} in the token's")
                     for name, fp in sorted(facts.schemas().items()) if token.schemas.get(name) != fp]
    check.schemas += [f"schemas: the token's history was written with {name} ({fp}), the topic never"
                      for name, fp in sorted(token.schemas.items()) if name not in facts.schemas()]
    run = facts.run or {}
    facts_of_run = {**{k: run.get(k) for k in ("run_id", "seed", "code_version")},
                    "interpreter": interpreter.as_recorded(run) if run else {}}
    check.run = [f"run: the token has {name} {want!r}, the topic's run.started {facts_of_run[name]!r}"
                 for name, want in (("run_id", token.run_id), ("seed", token.seed),
                                    ("code_version", token.code_version), ("interpreter", token.interpreter or {}))
                 if facts_of_run[name] != want]
    if token.agents_from == "log":
        check.agents = _agents(token, facts.digests)
    if swarm is not None:
        result = replay_swarm_log(backend=backend, swarm=swarm, topic=topic, registry=registry,
                                  to=token.end_offset)
        first = result.first_divergence
        check.replay = {"swarm": swarm.name, "first_divergence": first.to_json() if first else None,
                        "divergences": len(result.divergences)}
        if token.agents_from.startswith("replay:"):
            check.replay["agents_differ"] = [
                f"agent {a}: the token has state {token.agents.get(a)}, the replay gives {result.agents.get(a)}"
                for a in sorted(set(token.agents) | set(result.agents)) if token.agents.get(a) != result.agents.get(a)]
    return check


def _agents(token: ReplayTokenV2, recorded: dict[str, DigestRecord]) -> list[str]:
    out = []
    for agent in sorted(set(token.agents) | set(recorded)):
        want, rec = token.agents.get(agent), recorded.get(agent)
        have = rec.state.hex() if rec is not None else None
        if want != have:
            out.append(f"agent {agent}: the token has state {want} as of offset {token.agent_positions.get(agent)}, "
                       f"the topic records {have}" + (f" as of offset {rec.position}" if rec is not None else ""))
    return out


def _read(backend: LogBackend, topic: str, start: int, end: int) -> list[Any]:
    with backend.reader(topic) as reader:
        reader.assign(start)
        return [m for batch in reader.batches(end=end) for m in batch]


def _locate(check: TokenCheck, backend: LogBackend, registry: SchemaRegistry, seg: SegmentResult,
            reference: str | None) -> None:
    token = check.token
    hint = (f"a checkpoint every {token.chain_every} events locates a change to within that many without "
            f"another copy; `token create --checkpoint-every` sets it")
    if reference is None:
        check.located = (f"no other copy to compare this segment with event by event: name one with --reference "
                         f"TOPIC; {hint}")
        return
    try:
        ref = _read(backend, reference, seg.start_offset, seg.end_offset)
    except TopicNotFound:
        check.located = f"the reference topic {reference} does not exist; {hint}"
        return
    previous = token.checkpoints[seg.index - 1].link if seg.index else genesis(token.start_offset)
    if segment_link(previous, ref) != token.checkpoints[seg.index].link:
        check.located = (f"the reference topic {reference} does not match the token in this segment either, so "
                         f"it cannot say which event differs; {hint}")
        return
    mine = _read(backend, check.topic, seg.start_offset, seg.end_offset)
    check.located = f"narrowed down event by event against {reference}, which matches the token in this segment"
    decoder = Decoder(registry)
    for i in range(max(len(ref), len(mine))):
        a = ref[i] if i < len(ref) else None
        b = mine[i] if i < len(mine) else None
        if a is not None and b is not None and a.offset() == b.offset() and a.value() == b.value():
            continue
        ta, tb = _brief(decoder, a), _brief(decoder, b)
        if a is None:
            assert b is not None
            d = FirstDifference(offset=b.offset(), what="extra", token_side=None, topic_side=tb)
        elif b is None:
            d = FirstDifference(offset=a.offset(), what="missing", token_side=ta, topic_side=None)
        elif a.offset() != b.offset():
            if a.value() == b.value():
                d = FirstDifference(offset=b.offset(), what="offset", token_side=ta, topic_side=tb)
            elif b.offset() > a.offset():
                d = FirstDifference(offset=a.offset(), what="missing", token_side=ta, topic_side=tb)
            else:
                d = FirstDifference(offset=b.offset(), what="extra", token_side=ta, topic_side=tb)
        else:
            va, vb = a.value() or b"", b.value() or b""
            first = next((k for k, (x, y) in enumerate(zip(va, vb, strict=False)) if x != y), min(len(va), len(vb)))
            d = FirstDifference(offset=a.offset(), what="bytes", token_side=ta, topic_side=tb, first_byte=first)
        d.step, d.departs = _which_step(decoder, a if a is not None else b, b if a is not None else None)
        check.first_difference = d
        return


def _brief(decoder: Decoder, m: Any) -> EventBrief | None:
    if m is None:
        return None
    value = m.value() or b""
    try:
        writer, rec = decoder.decode(value, m.offset())
    except SwarmlogError:
        return EventBrief(offset=m.offset(), size=len(value), event_type=None, agent=None, event_id=None)
    return EventBrief(offset=m.offset(), size=len(value), event_type=writer.event_type, agent=rec["agent_id"],
                      event_id=rec["event_id"])


def _which_step(decoder: Decoder, authentic: Any, other: Any | None) -> tuple[str | None, str | None]:
    """What the token's event is, in the swarm's terms (whose step's output, or whose recorded state),
    and what of that step differs."""
    try:
        writer, rec = decoder.decode(authentic.value(), authentic.offset())
    except SwarmlogError:
        return None, None
    agent, event_id = rec["agent_id"], rec["event_id"]
    if writer.event_type == STATE_DIGEST:
        mine = DigestRecord.from_payload(rec["payload"])
        theirs = None
        if other is not None:
            try:
                theirs = DigestRecord.from_payload(decoder.decode(other.value(), other.offset())[1]["payload"])
            except (SwarmlogError, KeyError, TypeError):
                theirs = None
        if theirs is not None:
            for at, digest in zip(mine.steps, mine.digests, strict=True):
                if at not in theirs.steps or theirs.digests[theirs.steps.index(at)] != digest:
                    return f"agent {agent}'s recorded state after its step at offset {at}", "state"
        more = " ..." if len(mine.steps) > 5 else ""
        return f"agent {agent}'s recorded state digests of its steps at offsets {mine.steps[:5]}{more}", "state"
    if writer.event_type == RUN_STARTED:
        return "the run's run.started (its seed, code version and interpreter)", None
    step = parse_step(event_id)
    if step is not None and step[1] == PATCH_INDEX:
        return f"the patch marker ({event_id}) of agent {agent}'s step at offset {step[0]}", "outputs"
    if step is not None:
        return f"output #{step[1]} ({writer.event_type}) of agent {agent}'s step at offset {step[0]}", "outputs"
    return f"a {writer.event_type} appended by {agent} ({event_id}), no step's output", None
