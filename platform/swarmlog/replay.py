"""Replay: rebuild every agent's state by consuming the log from offset zero.

Two ways in, one fold:

* a fresh consumer that assigns partition 0 at the log start (no group, nothing
  to reset, nothing committed);
* ``group=G``: the way it runs on Kubernetes. The group's offset is reset to the
  log start through the admin API — which Kafka only allows while the group has
  no active members, so a replay never yanks the position from under a running
  agent — then the replay joins G, consumes, and commits where it stopped.

Either way the result is a :class:`ReplayResult`: the end offset (exclusive),
the number of events, each agent's state hash and the stream hash. Messages
that do not decode are reported with their offsets, never silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka import ConsumerGroupTopicPartitions

from .codec import Decoder
from .errors import GroupHasActiveMembers, GroupNotAtStart, SwarmlogError
from .events import Event
from .reader import LogReader
from .schemas import SchemaRegistry
from .settings import Settings
from .state import Ledger, LedgerRow, Reducer, StreamHasher, state_hash
from .topic import admin_client

_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Undecodable:
    offset: int
    error: str


@dataclass(slots=True)
class ReplayResult:
    end_offset: int
    """The next offset after the replayed range (exclusive): state is "as of everything before it"."""
    events: int
    agents: dict[str, str]
    """Agent name -> sha256 of its canonical state."""
    stream_hash: str
    undecodable: list[Undecodable] = field(default_factory=list)
    states: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "end_offset": self.end_offset,
            "events": self.events,
            "agents": dict(sorted(self.agents.items())),
            "stream_hash": self.stream_hash,
            "undecodable": [{"offset": u.offset, "error": u.error} for u in self.undecodable],
        }


class Fold:
    """Applies decoded events to per-agent states; shared by replay and live agents."""

    __slots__ = ("decoder", "reducer", "states", "hasher", "events", "undecodable")

    def __init__(self, *, registry: SchemaRegistry, reducer: Reducer | None = None,
                 decoder: Decoder | None = None) -> None:
        self.decoder = decoder or Decoder(registry)
        self.reducer = reducer or Ledger()
        self.states: dict[str, Any] = {}
        self.hasher = StreamHasher()
        self.events = 0
        self.undecodable: list[Undecodable] = []

    def apply_batch(self, msgs: list[Any]) -> None:
        self.hasher.update_batch(msgs)
        reducer = self.reducer
        undecodable = len(self.undecodable)
        if type(reducer) is Ledger:
            # The default ledger takes rows, not one Event per event, and takes them as they
            # are decoded: a batch's 5,000 decoded records never live at once (holding them
            # cost more than decoding them one by one into the same few freed blocks).
            # Exactly Ledger: a subclass may override apply(), and like any other reducer
            # it is given Events.
            reducer.fold_rows(self.states, self._rows(msgs))
        else:
            decode = self.decoder.decode
            apply = reducer.apply
            states = self.states
            for m in msgs:
                off = m.offset()
                try:
                    writer, record = decode(m.value(), off)
                except SwarmlogError as exc:
                    self.undecodable.append(Undecodable(offset=off, error=str(exc)))
                    continue
                ts_type, ts = m.timestamp()
                # Event.from_record, inlined: this loop runs once per event of the log.
                apply(states, Event(off, writer.event_type, writer.version, record["event_id"], record["run_id"],
                                    record["agent_id"], record["to"], record["causes"], record["payload"],
                                    ts if ts_type else None))
        self.events += len(msgs) - (len(self.undecodable) - undecodable)

    def _rows(self, msgs: list[Any]) -> Iterator[LedgerRow]:
        decode = self.decoder.decode
        for m in msgs:
            off = m.offset()
            try:
                writer, record = decode(m.value(), off)
            except SwarmlogError as exc:
                self.undecodable.append(Undecodable(offset=off, error=str(exc)))
                continue
            yield off, writer.event_type, record["agent_id"], record["to"], record["payload"]

    def result(self, end_offset: int) -> ReplayResult:
        return ReplayResult(
            end_offset=end_offset,
            events=self.events,
            agents={agent: state_hash(s) for agent, s in self.states.items()},
            stream_hash=self.hasher.hexdigest(),
            undecodable=list(self.undecodable),
            states=self.states,
        )


def replay(
    *,
    settings: Settings,
    topic: str | None = None,
    to: int | None = None,
    group: str | None = None,
    reset: bool = True,
    reducer: Reducer | None = None,
    registry: SchemaRegistry | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Rebuild every agent's state from the start of the log, up to ``to`` (exclusive).

    With ``group``, reset that consumer group to the log start first (refused
    while it has active members); with ``reset=False`` the group must already
    be at the log start (e.g. reset by ``kafka-consumer-groups --reset-offsets
    --to-earliest --execute``).
    """
    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dir)
    fold = Fold(registry=registry, reducer=reducer)
    with LogReader(settings=settings, topic=topic, group=group) as reader:
        low, high = reader.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=_TIMEOUT_S, cached=False)
        total = (min(high, to) if to is not None else high) - low
        if group is None:
            reader.assign(low)
        else:
            admin = admin_client(settings)
            prepare_group(admin, group=group, topic=topic, log_start=low, reset=reset)
            reader.position.end_offset = low
            reader.subscribe()
        for batch in reader.batches(end=to):
            fold.apply_batch(batch)
            if progress is not None:
                progress(reader.position.end_offset - low, total)
        end = reader.position.end_offset
        if group is not None:
            reader.commit(end)
    return fold.result(end)


def prepare_group(admin: AdminClient, *, group: str, topic: str, log_start: int, reset: bool) -> None:
    """Refuse a group with active members; reset it to ``log_start`` or check it is there."""
    members = group_members(admin, group)
    if members:
        raise GroupHasActiveMembers(group=group, members=members)
    tp = TopicPartition(topic, 0, log_start)
    if reset:
        futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [tp])])
        try:
            futures[group].result(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
                              getattr(KafkaError, "NON_EMPTY_GROUP", -1)):
                # A member joined between our check and the reset; the broker refused it.
                raise GroupHasActiveMembers(group=group, members=group_members(admin, group) or ["(joining)"]) \
                    from None
            raise SwarmlogError(f"cannot reset consumer group {group!r}: {err.str()}") from None
        return
    committed = committed_offset(admin, group=group, topic=topic)
    if committed is None or committed != log_start:
        raise GroupNotAtStart(group=group, committed=-1 if committed is None else committed, log_start=log_start)


def group_members(admin: AdminClient, group: str) -> list[str]:
    desc = admin.describe_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result()
    return [f"{m.client_id}@{m.host}" for m in desc.members]


def committed_offset(admin: AdminClient, *, group: str, topic: str) -> int | None:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    res = admin.list_consumer_group_offsets([req], request_timeout=_TIMEOUT_S)[group].result()
    for tp in res.topic_partitions:
        if tp.topic == topic and tp.partition == 0:
            return tp.offset if tp.offset >= 0 else None
    return None


def replay_swarm(
    *,
    settings: Settings,
    swarm: Any,
    topic: str | None = None,
    to: int | None = None,
    strict: bool = False,
    registry: SchemaRegistry | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Re-run ``swarm``'s handlers over the recorded log (writing nothing).

    Returns a :class:`swarmlog._replayer.SwarmReplayResult`: per-agent hashes of
    ``agent.state``, the stream hash, and every divergence between what the code
    does now and what the log recorded (``first_divergence`` says where a changed
    program first departs from the run). ``strict=True`` raises
    :class:`~swarmlog.errors.NondeterminismError` at the first divergence instead.
    """
    from ._replayer import replay_swarm_log

    topic = topic or settings.topic
    registry = registry or SchemaRegistry.load(settings.schema_dir)
    with LogReader(settings=settings, topic=topic):
        pass  # refuses a missing or multi-partition topic with a clear error
    return replay_swarm_log(settings=settings, swarm=swarm, topic=topic, registry=registry, to=to, strict=strict,
                            progress=progress)
