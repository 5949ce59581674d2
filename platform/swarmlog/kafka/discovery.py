"""Finding the swarms' topics: every topic whose name matches a pattern, as it appears.

One swarm, one single-partition topic; a deployment of many swarms has many topics, and
one sink mirrors all of them (``swarmlog sink --topics-pattern '^swarm\\..*'``).

The pattern is a regular expression matched against the *whole* topic name, as Kafka's
Java clients and Kafka Connect's ``topics.regex`` match it (``Pattern.matcher(t).matches()``),
so ``swarm\\..*`` and ``^swarm\\..*$`` mean the same. Python's ``re`` dialect; a leading ``^``
(which librdkafka requires of a regex subscription) is accepted.

Left out unless asked (``include_side_topics``): the topics swarmlog keeps beside a log
(:data:`swarmlog.log.protocol.SIDE_TOPIC_SUFFIXES`, e.g. ``<topic>.snapshots``) and Kafka's
internal ones (``__consumer_offsets``, ``__transaction_state``). A matching topic with more
than one partition is not a swarm's log (its offsets are no total order): it is reported,
never mirrored.

New topics are found by asking the broker for its metadata every ``refresh_interval_ms``
(what librdkafka's ``topic.metadata.refresh.interval.ms`` does for a regex subscription;
the sink assigns partitions itself, at the positions it keeps in Postgres, so it asks
itself rather than joining a group and waiting for a rebalance).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from ..errors import UsageError
from ..log.protocol import is_side_topic
from ..settings import Settings
from .errors import translate

__all__ = ["Discovered", "TopicPattern", "discover"]

_TIMEOUT_S = 10.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """Which topic names a many-swarm sink mirrors (pure: no I/O)."""

    pattern: str
    include_side_topics: bool = False
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            regex = re.compile(self.pattern)
        except re.error as exc:
            raise UsageError(f"--topics-pattern {self.pattern!r} is not a regular expression: {exc}") from None
        object.__setattr__(self, "_regex", regex)

    def matches(self, topic: str) -> bool:
        if not self.include_side_topics and is_side_topic(topic):
            return False
        return self._regex.fullmatch(topic) is not None


@dataclass(frozen=True, slots=True)
class Discovered:
    """One look at the broker's topics through a :class:`TopicPattern`."""

    topics: frozenset[str]
    """Matching single-partition topics: the swarms' logs to mirror."""
    refused: dict[str, int]
    """Matching topics with other than one partition (name -> partitions): not mirrored."""
    unsettled: frozenset[str]
    """Matching topics the broker reported an error for (being created, deleted, leaderless):
    neither new nor gone; the next look sees them settled."""


def discover(settings: Settings, pattern: TopicPattern, *, client: object) -> Discovered:
    """The broker's topics that ``pattern`` matches (one metadata request for all topics)."""
    try:
        md = client.list_topics(timeout=_TIMEOUT_S)  # type: ignore[attr-defined]
    except KafkaException as exc:
        raise translate(exc, operation="listing topics", bootstrap=settings.bootstrap_servers) from None
    topics: set[str] = set()
    refused: dict[str, int] = {}
    unsettled: set[str] = set()
    for name, t in md.topics.items():
        if not pattern.matches(name):
            continue
        if t.error is not None:
            unsettled.add(name)
        elif len(t.partitions) == 1:
            topics.add(name)
        else:
            refused[name] = len(t.partitions)
    return Discovered(topics=frozenset(topics), refused=refused, unsettled=frozenset(unsettled))
