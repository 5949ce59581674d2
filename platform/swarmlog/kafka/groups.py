"""Consumer groups of a swarm's topic: who is in one, where it is, and resetting it.

Kafka only alters the offsets of a group with no active members, so a reset never
yanks the position from under a running consumer: it is refused with
:class:`~swarmlog.errors.GroupHasActiveMembers`, naming them.

:class:`AdvisoryCommits` commits a position that lives elsewhere (the sink's, in Postgres)
to a group, only so that Kafka's tools and lag exporters can see it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..errors import GroupHasActiveMembers, GroupResetFailed
from .errors import translate

__all__ = ["AdvisoryCommits", "committed_offset", "group_members", "reset_group"]

_TIMEOUT_S = 30.0

logger = logging.getLogger(__name__)
# A member joined between the emptiness check and the reset: the broker refused the reset.
_GROUP_BUSY = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.NON_EMPTY_GROUP})
# A member's commit while its group rebalances (or after it left it): refused for that
# generation. Expected of a sink of a group (swarmlog.kafka.multi_reader) whenever sinks come
# and go; the next commit, after the rebalance, carries the position on.
_REBALANCING = frozenset({KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                          KafkaError.UNKNOWN_MEMBER_ID})
# The group's coordinator is moving (its broker died, or came back and loads the offsets
# partition): the broker says to ask again, and a read of the offsets is safe to repeat.
_COORDINATOR_MOVING = frozenset({KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                 KafkaError.NOT_COORDINATOR})
_COORDINATOR_RETRY_S = 0.2
_PENDING_WAIT_S = 5.0
"""How long :func:`committed_offset` waits for a transaction's pending commit of the offsets to land."""
_ASK_AGAIN = _COORDINATOR_MOVING | {KafkaError.UNSTABLE_OFFSET_COMMIT}
"""Answers to a read of a group that say to ask again: a moving coordinator, or a transaction's commit of
the offsets still pending (:func:`committed_offset`)."""


def _read(ask: Callable[[], Any], *, operation: str) -> Any:
    """``ask()``'s result (an admin read of a group), asked again while the broker says to (:data:`_ASK_AGAIN`),
    for up to ``_TIMEOUT_S``; any other error, or one that outlasts that, typed."""
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            return ask()
        except KafkaException as exc:
            if exc.args[0].code() in _ASK_AGAIN and time.monotonic() < deadline:
                time.sleep(_COORDINATOR_RETRY_S)
                continue
            raise translate(exc, operation=operation, bootstrap="(admin)") from None


def group_members(admin: AdminClient, group: str) -> list[str]:
    """``client.id@host`` of each active member of ``group``."""
    desc = _read(lambda: admin.describe_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result(),
                 operation=f"describing consumer group {group!r}")
    return [f"{m.client_id}@{m.host}" for m in desc.members]


def committed_offset(admin: AdminClient, *, group: str, topic: str) -> int | None:
    """The group's committed offset on partition 0 of ``topic``; None if it has none.

    Stable (``require_stable``, KIP-447): an agent commits its position in its Kafka transaction, and the
    offset becomes the group's only once the coordinator has written the commit's markers, after the
    producer's commit returned. Without it a read right after an agent's commit may give the position
    before it — how far the live agent got, which a replay and the restart checks rely on. While such a
    commit is pending the broker answers UNSTABLE_OFFSET_COMMIT: asked again, as for a moving coordinator.

    A live agent's commit lands within moments of its send; one still pending after ``_PENDING_WAIT_S`` is
    a dead life's (killed between sending its position and committing), which stays open until the agent's
    next life fences it or the transaction times out, and then is aborted. The group stands at its last
    committed offset meanwhile, and that is what is returned (read once more without ``require_stable``)."""
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    stable = True
    pending_since: float | None = None
    while True:
        res = _offsets(admin, req, stable=stable)
        for tp in res.topic_partitions:
            if tp.topic == topic and tp.partition == 0:
                if stable and tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                    now = time.monotonic()
                    pending_since = now if pending_since is None else pending_since
                    if now - pending_since >= _PENDING_WAIT_S:
                        logger.info("group %s: a transaction's commit of its offset on %s has been pending for "
                                    "%.0f s (a dead life's open transaction, until its next life fences it or it "
                                    "times out); reading the last committed offset", group, topic,
                                    now - pending_since)
                        stable = False
                    break  # ask again
                return tp.offset if tp.offset >= 0 else None
        else:
            return None
        time.sleep(_COORDINATOR_RETRY_S)


def _offsets(admin: AdminClient, req: ConsumerGroupTopicPartitions, *, stable: bool) -> Any:
    group = req.group_id
    return _read(lambda: admin.list_consumer_group_offsets([req], require_stable=stable,
                                                           request_timeout=_TIMEOUT_S)[group].result(),
                 operation=f"reading the offsets of group {group!r}")


def reset_group(admin: AdminClient, *, group: str, topic: str, offset: int) -> None:
    """Set ``group``'s committed offset on ``topic`` to ``offset``; refused while it has members."""
    members = group_members(admin, group)
    if members:
        raise GroupHasActiveMembers(group=group, members=members)
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0,
                                                                                                        offset)])])
    try:
        futures[group].result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() in _GROUP_BUSY:
            raise GroupHasActiveMembers(group=group, members=group_members(admin, group) or ["(joining)"]) from None
        raise GroupResetFailed(group=group, detail=err.str()) from None


class AdvisoryCommits:
    """Commits offsets to ``group`` for Kafka's tools only, asynchronously; a failure is logged, never raised.

    The consumer must be made with :meth:`config` in its configuration (librdkafka reports the
    outcome of an asynchronous commit to its ``on_commit`` callback) and the group id ``group``.
    The one-topic sink commits as a "simple" consumer, without joining the group; the sinks of a
    pattern are the group's members (:mod:`swarmlog.kafka.multi_reader`), and a commit refused
    because the group is rebalancing is only logged at debug level. ``kafka-consumer-groups.sh
    --describe`` shows the offsets and their lag. Nothing reads these offsets back.
    """

    def __init__(self, *, group: str) -> None:
        self.group = group
        self._failing = False

    def config(self) -> dict[str, object]:
        return {"on_commit": self._committed}

    def commit(self, consumer: Consumer, offsets: Mapping[str, int]) -> None:
        """Commit each topic's partition 0 at its offset: the NEXT offset to read, as Kafka counts lag."""
        tps = [TopicPartition(t, 0, o) for t, o in offsets.items() if o > 0]
        if not tps:
            return
        try:
            consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            self._failed(exc.args[0])

    def _committed(self, err: KafkaError | None, partitions: Any) -> None:
        # Served from the consumer's poll/consume: the outcome of an earlier commit.
        if err is not None:
            self._failed(err)
        elif self._failing:
            self._failing = False
            logger.info("committing to consumer group %s works again", self.group)

    def _failed(self, err: KafkaError) -> None:
        if err.code() in _REBALANCING:
            logger.debug("commit to consumer group %s refused while it rebalances: %s", self.group, err.str())
            return
        if not self._failing:
            logger.warning("could not commit to consumer group %s (%s): Kafka's tools show a stale position for "
                           "it; the mirror itself is unaffected (its position is in Postgres)", self.group, err.str())
        self._failing = True
