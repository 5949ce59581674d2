"""Reading many swarms' topics at once as a member of a consumer group (the many-swarm sink).

The reader *subscribes* to a list of topics (:meth:`MultiTopicReader.subscribe`) in its
group, and Kafka's group protocol spreads them over the group's members: a sink with
replicas splits its topics the way Kafka Connect spreads a sink's topics over its workers.
The assignor is cooperative-sticky (incremental rebalancing, KIP-429): a rebalance moves
only the topics that change hands, every other topic is read on without a pause, and a
topic moves in two steps, revoked from one member (which finishes with it) before it is
assigned to another.

The member's owner decides where each topic starts and what happens to work in flight, through
:class:`Rebalance`: librdkafka calls it from within :meth:`MultiTopicReader.runs` (the
consumer's own thread, between two batches), and the reader assigns each new topic at the
offset it is told, never at the group's committed offset: the positions live in Postgres,
written in the same transaction as the rows.

``read_committed`` as every reader (:mod:`swarmlog.kafka.reader`): offsets have gaps. Each
topic's end of log is tracked on its own (``enable.partition.eof``), so the caller knows
which topics it has caught up on.

:meth:`MultiTopicReader.commit_advisory` also commits the positions to the group
(:class:`~swarmlog.kafka.groups.AdvisoryCommits`), for Kafka's tools to show the sink's lag;
nothing reads them back.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from itertools import groupby
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..errors import ReadFailed
from ..settings import Settings
from .config import consumer as make_consumer
from .errors import UNKNOWN_TOPIC, translate
from .groups import AdvisoryCommits

__all__ = ["MULTI_TUNING", "MultiTopicReader"]

_error = Message.error
_topic = Message.topic
_LIST_OFFSETS_TIMEOUT_S = 30.0

logger = logging.getLogger(__name__)


MULTI_TUNING: dict[str, object] = {
    # A fetch request names every assigned partition; with a thousand topics mostly at their
    # end, one topic's reader's fetch.wait.max.ms would have the broker answer a thousand-partition
    # fetch many times a second for nothing. The broker answers as soon as any data arrives
    # (fetch.min.bytes 1), so the longer wait costs no latency.
    "fetch.wait.max.ms": 500,
    # How long a member that stopped answering (SIGKILLed, its node gone) keeps its topics
    # before the group gives them to the others: librdkafka's 45 s is a long stall of that
    # share of the mirror (Kafka Connect's workers use 10 s). Heartbeats come from librdkafka's
    # own thread, so a long Postgres transaction does not count against it; the consumer's
    # thread is bounded by max.poll.interval.ms (5 min) instead.
    "session.timeout.ms": 10_000,
    # A member learns that its group rebalances (another sink joined or left) from its next
    # heartbeat's answer, and a cooperative handover takes two rebalances: at librdkafka's 3 s,
    # a sink joining a running group waited seconds for its share. One heartbeat a second per
    # sink is nothing to the coordinator.
    "heartbeat.interval.ms": 1000,
}
GROUP_REQUIRED: dict[str, object] = {
    # Incremental rebalancing: a handover is a revoke on one member, then an assign on another,
    # and only of the topics that move. Rebalance's callbacks are written for it (an eager
    # assignor would revoke every topic of every member at each rebalance).
    "partition.assignment.strategy": "cooperative-sticky",
}


class Rebalance(Protocol):
    """What the group's decisions mean to the reader's owner. Called from within
    :meth:`MultiTopicReader.runs`, on the consumer's thread; topics are those of the event
    (an assign may name none: the group rebalanced, and this member keeps what it had)."""

    def assigned(self, topics: list[str]) -> Mapping[str, int]:
        """The offset to start each of ``topics`` at (every one of them)."""
        ...

    def revoked(self, topics: list[str]) -> None:
        """``topics`` go to another member once this returns: finish with them."""
        ...

    def lost(self, topics: list[str]) -> None:
        """``topics`` were taken without a revoke (this member's session ended): another member
        may already read them."""
        ...


class MultiTopicReader:
    """Runs of messages (``(topic, [messages])``, each run in offset order) of the topics the group assigned."""

    def __init__(self, *, settings: Settings, group: str, rebalance: Rebalance,
                 consumer_config: Mapping[str, object] | None = None) -> None:
        self.settings = settings
        self.group = group
        self._rebalance = rebalance
        self._advisory = AdvisoryCommits(group=group)
        self.consumer = make_consumer(settings, group=group, required=GROUP_REQUIRED,
                                      extra={**MULTI_TUNING, **(consumer_config or {}), **self._advisory.config()})
        self.assigned: set[str] = set()
        """The topics the group gave this member (paused ones included)."""
        self.paused: set[str] = set()
        """Assigned topics this member does not read (see :meth:`pause`)."""
        self.ends: dict[str, int] = {}
        """Per topic: the offset after the last message read, or the end of the log when reached."""
        self.at_end: set[str] = set()
        """The topics whose end of log was the last thing read (nothing more to read there, yet)."""
        self._subscribed: tuple[str, ...] | None = None

    # -- the group -----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Ask the group for ``topics`` (replacing the list asked for before); True if it changed.

        A change makes the group rebalance: topics no longer asked for are revoked, new ones
        assigned to some member, the others stay where they are.
        """
        wanted = tuple(sorted(topics))
        if wanted == (self._subscribed or ()):
            return False
        try:
            if wanted:
                self.consumer.subscribe(list(wanted), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                        on_lost=self._on_lost)
            else:
                self.consumer.unsubscribe()  # nothing to ask for: out of the group
        except KafkaException as exc:
            raise translate(exc, operation=f"joining consumer group {self.group!r}",
                            bootstrap=self.settings.bootstrap_servers) from None
        self._subscribed = wanted
        return True

    def member_id(self) -> str | None:
        """This member's id in the group (None before it joined)."""
        return self.consumer.memberid() or None

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        topics = [p.topic for p in partitions]
        positions = self._rebalance.assigned(topics)
        consumer.incremental_assign([TopicPartition(t, 0, _start(positions[t])) for t in topics])
        for t in topics:
            self.assigned.add(t)
            self.paused.discard(t)
            self.ends[t] = positions[t]
            self.at_end.discard(t)

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        try:
            self._rebalance.revoked([p.topic for p in partitions])
        finally:
            self._unassign(consumer, partitions)

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        try:
            self._rebalance.lost([p.topic for p in partitions])
        finally:
            self._unassign(consumer, partitions)

    def _unassign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        consumer.incremental_unassign(partitions)
        for p in partitions:
            self.assigned.discard(p.topic)
            self.paused.discard(p.topic)
            self.ends.pop(p.topic, None)
            self.at_end.discard(p.topic)

    # -- where each topic is read ----------------------------------------------------------------

    def seek(self, positions: Mapping[str, int]) -> None:
        """Read each (assigned) topic on from its offset; messages of it fetched before are dropped.

        Paused topics among them are read again.
        """
        tps = [TopicPartition(t, 0) for t in positions if t in self.assigned]
        if not tps:
            return
        try:
            # Unassigned and assigned again (not seek(), which fails on a partition whose
            # fetcher has not started yet): librdkafka drops what it had fetched of them.
            self.consumer.incremental_unassign(tps)
            self.consumer.incremental_assign([TopicPartition(tp.topic, 0, _start(positions[tp.topic]))
                                              for tp in tps])
        except KafkaException as exc:
            raise translate(exc, operation=f"repositioning {len(tps)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        for tp in tps:
            self.paused.discard(tp.topic)
            self.ends[tp.topic] = positions[tp.topic]
            self.at_end.discard(tp.topic)

    def pause(self, topics: Collection[str]) -> None:
        """Stop reading ``topics`` while keeping them assigned (until :meth:`seek` or the group moves them)."""
        tps = [TopicPartition(t, 0) for t in topics if t in self.assigned and t not in self.paused]
        if not tps:
            return
        try:
            self.consumer.pause(tps)
        except KafkaException as exc:
            raise translate(exc, operation=f"pausing {len(tps)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        for tp in tps:
            self.paused.add(tp.topic)
            self.at_end.discard(tp.topic)

    def all_at_end(self) -> bool:
        return self.at_end >= self.assigned - self.paused

    # -- reading -----------------------------------------------------------------------------

    def runs(self, *, batch_size: int, timeout: float) -> list[tuple[str, list[Any]]]:
        """One consume call's messages, as runs of one topic each; [] when nothing came in ``timeout``.

        A topic may have several runs in one call, always in offset order. The group's
        decisions are acted on here (:class:`Rebalance`); messages of a topic that is no longer
        read (revoked, lost or paused in the same call) are left out.
        """
        try:
            msgs: list[Any] = self.consumer.consume(batch_size, timeout)
        except KafkaException as exc:
            raise translate(exc, operation=f"reading {len(self.assigned)} topic(s)",
                            bootstrap=self.settings.bootstrap_servers) from None
        if not msgs:
            return []
        eofs: dict[str, int] = {}
        if any(map(_error, msgs)):
            msgs = self._without_events(msgs, eofs)
        # Fetches come per partition, so a batch is long runs of one topic: grouped in C.
        runs: list[tuple[str, list[Any]]] = [(t, list(g)) for t, g in groupby(msgs, _topic)]  # type: ignore[misc]
        assigned, paused = self.assigned, self.paused
        if paused or any(t not in assigned for t, _ in runs):
            runs = [(t, run) for t, run in runs if t in assigned and t not in paused]
        ends, at_end = self.ends, self.at_end
        for t, run in runs:
            ends[t] = run[-1].offset() + 1
            at_end.discard(t)
        # After the messages: a topic's end-of-log event follows its last message in the batch.
        for t, end in eofs.items():
            if t in assigned and t not in paused:
                ends[t] = max(ends.get(t, 0), end)
                at_end.add(t)
        return runs

    def _without_events(self, msgs: list[Any], eofs: dict[str, int]) -> list[Any]:
        """The messages, with error events acted on and end-of-log events taken out into ``eofs``."""
        out = []
        for m in msgs:
            err = m.error()
            if err is None:
                out.append(m)
                continue
            t = m.topic()
            if err.code() == KafkaError._PARTITION_EOF:
                eofs[t] = m.offset()
            elif err.code() in UNKNOWN_TOPIC:
                # Deleted under the sink: the next discovery drops it from the subscription.
                logger.warning("topic %s: %s (deleted?)", t, err.str())
            elif err.fatal() or not err.retriable():
                raise ReadFailed(topic=t or "(many)", detail=err.str())
        return out

    # -- the advisory group offsets ----------------------------------------------------------

    def commit_advisory(self, offsets: Mapping[str, int]) -> None:
        """Commit ``offsets`` (topic -> the next offset to read) to the group, for Kafka's tools only."""
        self._advisory.commit(self.consumer, {t: o for t, o in offsets.items() if t in self.assigned})

    def close(self) -> None:
        """Leave the group: what this member holds is revoked (:meth:`Rebalance.revoked`) first."""
        self.consumer.close()

    def __enter__(self) -> MultiTopicReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _start(offset: int) -> int:
    return offset if offset > 0 else OFFSET_BEGINNING


def stable_ends(admin: AdminClient, topics: Collection[str], *, bootstrap: str) -> dict[str, int]:
    """Each topic's last stable offset, in one request per broker: where a read_committed
    reader of it ends now (before any open transaction, past the last transaction marker)."""
    if not topics:
        return {}
    futures = admin.list_offsets({TopicPartition(t, 0): OffsetSpec.latest() for t in topics},
                                 isolation_level=IsolationLevel.READ_COMMITTED,
                                 request_timeout=_LIST_OFFSETS_TIMEOUT_S)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[tp.topic] = int(future.result().offset)
        except KafkaException as exc:
            raise translate(exc, operation=f"reading the end of {tp.topic!r}", bootstrap=bootstrap,
                            topic=tp.topic) from None
    return ends
