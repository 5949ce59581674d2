"""The swarm's topic: created with one partition, checked before every use.

Why one partition: Kafka orders messages only within a partition. A single
partition's offsets are therefore a total order over everything the swarm did,
and that order is the swarm's only clock. A topic with more partitions has no
such order, so every entry point (append, sink, replay) refuses it.

Why unlimited retention: replay rebuilds state from offset zero, so the log must
keep its whole history (``retention.ms=-1``, ``retention.bytes=-1``).

Why ``LogAppendTime``: the broker stamps each message as it appends it, so the
timestamp recorded in the log is monotonic with the offsets; agents may read it
(from the log, never from a clock) through ``ctx.log_time_ms()``. Logical time is
the offset, ``ctx.now()``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from ..errors import (
    KafkaHandshakeFailed,
    KafkaOperationFailed,
    ServiceUnavailable,
    TopicCreateFailed,
    TopicNotFound,
    TopicNotSinglePartition,
)
from ..settings import Settings
from .config import admin_client, new_client
from .errors import UNKNOWN_TOPIC, translate

__all__ = ["TOPIC_CONFIG", "TopicInfo", "cluster_metadata", "create_topic", "deletes_history", "describe_topic",
           "fragility", "require_single_partition", "set_topic_config", "topic_config", "wait_until_known"]

TOPIC_CONFIG = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "message.timestamp.type": "LogAppendTime",
}

_TIMEOUT_S = 30.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    created: bool = False


def cluster_metadata(settings: Settings, client: Any, *, topic: str | None, operation: str) -> Any:
    """Metadata of the cluster (of ``topic`` only, if given), within the connect timeout.

    The first request every command makes of the cluster: if no broker answers within
    ``SWARMLOG_CONNECT_TIMEOUT``, it fails with :class:`~swarmlog.errors.ServiceUnavailable`
    naming the address and what librdkafka saw (refused, TLS or SASL handshake failed).
    """
    timeout = settings.connect_timeout
    deadline = time.monotonic() + timeout
    # A short first attempt: a TLS or SASL handshake that failed will not succeed on a retry,
    # so it is reported after a second, not after the whole timeout. A broker that is only
    # slow (or still starting) gets the rest of the timeout in the second attempt.
    for attempt in (min(1.0, timeout), None):
        left = deadline - time.monotonic()
        try:
            return client.list_topics(topic=topic, timeout=max(0.05, left if attempt is None else attempt))
        except KafkaException as exc:
            # Serve the client's queued error events: they say why (kafka.errors.error_recorder).
            client.poll(0.1)
            failure = translate(exc, operation=operation, bootstrap=settings.bootstrap_servers, topic=topic,
                                timeout_s=timeout)
            if attempt is None or isinstance(failure, KafkaHandshakeFailed) \
                    or not isinstance(failure, ServiceUnavailable):
                raise failure from None


def describe_topic(settings: Settings, topic: str, *, client: object | None = None) -> TopicInfo:
    """Partition count and replication of ``topic``; raises TopicNotFound."""
    admin = client or admin_client(settings)
    md = cluster_metadata(settings, admin, topic=topic, operation=f"describing topic {topic!r}")
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() in UNKNOWN_TOPIC):
        raise TopicNotFound(topic=topic)
    if t.error is not None:
        raise translate(t.error, operation=f"describing topic {topic!r}", bootstrap=settings.bootstrap_servers,
                        topic=topic)
    replicas = len(next(iter(t.partitions.values())).replicas) if t.partitions else 0
    return TopicInfo(name=topic, partitions=len(t.partitions), replication_factor=replicas)


def require_single_partition(settings: Settings, topic: str, *, client: object | None = None) -> TopicInfo:
    """Describe ``topic`` and refuse it unless it has exactly one partition."""
    info = describe_topic(settings, topic, client=client)
    if info.partitions != 1:
        raise TopicNotSinglePartition(topic=topic, partitions=info.partitions)
    return info


def create_topic(settings: Settings, topic: str | None = None, *,
                 overrides: Mapping[str, str] | None = None) -> TopicInfo:
    """Create the swarm's single-partition topic; an existing single-partition topic is fine.
    ``overrides`` replace entries of :data:`TOPIC_CONFIG` (a fork's copy is written with
    ``CreateTime``, so that it keeps the source's timestamps)."""
    topic = topic or settings.topic
    admin = admin_client(settings)
    cluster_metadata(settings, admin, topic=None, operation=f"creating topic {topic!r}")
    config = {**TOPIC_CONFIG, **(overrides or {})}
    if settings.min_insync_replicas is not None:
        config["min.insync.replicas"] = str(settings.min_insync_replicas)
    new = NewTopic(topic, num_partitions=1, replication_factor=settings.replication_factor, config=config)
    futures = admin.create_topics([new], operation_timeout=_TIMEOUT_S, request_timeout=_TIMEOUT_S)
    try:
        futures[topic].result()
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return require_single_partition(settings, topic, client=admin)
        failure = translate(exc, operation=f"creating topic {topic!r}", bootstrap=settings.bootstrap_servers)
        if isinstance(failure, KafkaOperationFailed):
            raise TopicCreateFailed(topic=topic, detail=err.str()) from None
        raise failure from None
    info = wait_until_known(settings, topic, client=admin)
    _warn_if_fragile(settings, info, brokers=len(admin.list_topics(timeout=_TIMEOUT_S).brokers))
    return TopicInfo(name=info.name, partitions=info.partitions, replication_factor=info.replication_factor,
                     created=True)


def fragility(*, replication_factor: int, min_insync_replicas: int, brokers: int) -> str | None:
    """What can lose acknowledged events of a topic replicated like this, or None.

    The swarm's log is its only history: ``acks=all`` must mean that an event is on
    more than one broker before it counts as written, and a cluster that could hold
    more copies should.
    """
    if replication_factor == 1 and brokers > 1:
        return (f"it has 1 replica on a cluster of {brokers} brokers: losing that broker loses the log. "
                f"Set SWARMLOG_REPLICATION_FACTOR={min(3, brokers)} and SWARMLOG_MIN_INSYNC_REPLICAS=2 (or the "
                f"brokers' default.replication.factor) and create it again")
    if replication_factor > 1 and min_insync_replicas < 2:
        return (f"min.insync.replicas is {min_insync_replicas}: an event acknowledged while only the leader "
                f"had it is lost if that broker dies. Set SWARMLOG_MIN_INSYNC_REPLICAS=2, or alter the "
                f"topic's min.insync.replicas")
    return None


def _warn_if_fragile(settings: Settings, info: TopicInfo, *, brokers: int) -> None:
    try:
        min_isr = int(topic_config(settings, info.name).get("min.insync.replicas", "1"))
    except (KafkaException, ValueError):
        return  # the topic is fine to use; only the advice is missing
    problem = fragility(replication_factor=info.replication_factor, min_insync_replicas=min_isr, brokers=brokers)
    if problem is not None:
        logger.warning("topic %s was created, but %s", info.name, problem)


def wait_until_known(settings: Settings, topic: str, *, client: object | None = None,
                     timeout: float = _TIMEOUT_S) -> TopicInfo:
    """Block until every broker knows the new ``topic`` and its partition has a leader.

    CreateTopics returns once the controller has the topic; each broker learns of it
    from the metadata log a moment later. A client asking a broker that has not yet
    would be told the topic does not exist, so "created" means known to all of them:
    then the caller (or an agent it starts at once) can use it through any broker.
    """
    admin = client or admin_client(settings)
    deadline = time.monotonic() + timeout
    each: dict[str, AdminClient] = {}  # broker -> a client that knows only it, so asks it
    while True:
        try:
            info = require_single_partition(settings, topic, client=admin)
            md = admin.list_topics(timeout=_TIMEOUT_S)  # type: ignore[attr-defined]
            if len(md.brokers) == 1:
                return info  # the one broker there is just answered
            for b in md.brokers.values():
                address = f"{b.host}:{b.port}"
                if address not in each:
                    each[address] = new_client(AdminClient, settings, {"bootstrap.servers": address})
            if all(_known_to(each[f"{b.host}:{b.port}"], topic) for b in md.brokers.values()):
                return info
        except TopicNotFound:
            pass
        if time.monotonic() > deadline:
            raise TopicNotFound(topic=topic)
        time.sleep(0.05)


def _known_to(admin: AdminClient, topic: str) -> bool:
    try:
        t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
    except KafkaException:
        return False
    return t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values())


def set_topic_config(settings: Settings, topic: str, config: Mapping[str, str]) -> None:
    """Set entries of the topic's configuration (incrementally: the others stay as they are)."""
    admin = admin_client(settings)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in config.items()])
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise translate(exc, operation=f"configuring topic {topic!r}", bootstrap=settings.bootstrap_servers,
                        topic=topic) from None


def deletes_history(config: dict[str, str]) -> str | None:
    """What in a topic's configuration deletes its history (None: it keeps everything forever)."""
    reasons = [f"{key}={config[key]}" for key in ("retention.ms", "retention.bytes")
               if key in config and config[key] not in ("-1", "")]
    if "compact" in config.get("cleanup.policy", "delete"):
        reasons.append(f"cleanup.policy={config['cleanup.policy']}")
    return ", ".join(reasons) or None


def topic_config(settings: Settings, topic: str, *, client: object | None = None) -> dict[str, str]:
    """The topic's effective configuration (for `swarmlog topic describe` and tests)."""
    admin: Any = client or admin_client(settings)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise translate(exc, operation=f"describing the configuration of {topic!r}",
                        bootstrap=settings.bootstrap_servers, topic=topic) from None
    return {name: entry.value for name, entry in entries.items()}
