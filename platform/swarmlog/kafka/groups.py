"""Consumer groups of a swarm's topic: who is in one, where it is, and resetting it.

Kafka only alters the offsets of a group with no active members, so a reset never
yanks the position from under a running consumer: it is refused with
:class:`~swarmlog.errors.GroupHasActiveMembers`, naming them.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..errors import GroupHasActiveMembers, GroupResetFailed
from .errors import translate

_TIMEOUT_S = 30.0
# A member joined between the emptiness check and the reset: the broker refused the reset.
_GROUP_BUSY = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.NON_EMPTY_GROUP})


def group_members(admin: AdminClient, group: str) -> list[str]:
    """``client.id@host`` of each active member of ``group``."""
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result()
    except KafkaException as exc:
        raise translate(exc, operation=f"describing consumer group {group!r}", bootstrap="(admin)") from None
    return [f"{m.client_id}@{m.host}" for m in desc.members]


def committed_offset(admin: AdminClient, *, group: str, topic: str) -> int | None:
    """The group's committed offset on partition 0 of ``topic``; None if it has none."""
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    try:
        res = admin.list_consumer_group_offsets([req], request_timeout=_TIMEOUT_S)[group].result()
    except KafkaException as exc:
        raise translate(exc, operation=f"reading the offsets of group {group!r}", bootstrap="(admin)") from None
    for tp in res.topic_partitions:
        if tp.topic == topic and tp.partition == 0:
            return tp.offset if tp.offset >= 0 else None
    return None


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
