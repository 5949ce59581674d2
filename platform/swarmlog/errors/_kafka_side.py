"""The log's side (:class:`KafkaSideError`): Kafka (or the in-memory log, which raises the same errors for
the same conditions) unreachable or refusing, and topics, appends, transactions, consumer groups and histories
that do not fit. librdkafka's errors become these at one seam, :mod:`swarmlog.kafka.errors`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ._base import Retriable, ServiceUnavailable, SwarmlogError

__all__ = ["KafkaSideError", "KafkaUnavailable", "KafkaHandshakeFailed", "KafkaOperationFailed", "TopicNotFound",
           "TopicNotSinglePartition", "TopicExists", "TopicCreateFailed", "CopyFailed", "ReadFailed", "EventNotFound",
           "HistoryIncomplete", "HistoryHoles", "AppendFailed", "EventFate", "AppendIncomplete", "TransactionAborted",
           "AgentFenced", "GroupHasActiveMembers", "GroupResetFailed", "GroupNotAtStart"]


class KafkaSideError(SwarmlogError):
    """The log's side failed: Kafka (or the in-memory log, which raises the same errors for the same
    conditions) could not be reached, refused an operation, or holds a topic, a group or a history that
    does not fit. ``except KafkaSideError`` catches every one of them."""


class KafkaUnavailable(KafkaSideError, ServiceUnavailable, Retriable):
    """Kafka could not be reached, or did not answer in time (``SWARMLOG_CONNECT_TIMEOUT``)."""

    def __init__(self, *, address: str, detail: str, hint: str | None = None) -> None:
        super().__init__(service="Kafka", address=address, detail=detail, hint=hint)


class KafkaHandshakeFailed(KafkaSideError, ServiceUnavailable):
    """A broker answered, but the TLS or SASL handshake with it failed: a configuration problem."""

    _HINTS = {
        "TLS": "Check SWARMLOG_KAFKA_SECURITY_PROTOCOL (SSL or SASL_SSL only if that listener speaks TLS) "
               "and SWARMLOG_KAFKA_SSL_CA_LOCATION (the CA that signed the brokers' certificates).",
        "SASL": "Check SWARMLOG_KAFKA_SASL_MECHANISM, SWARMLOG_KAFKA_SASL_USERNAME and "
                "SWARMLOG_KAFKA_SASL_PASSWORD, and that the listener has SASL enabled for that mechanism.",
    }

    def __init__(self, *, address: str, stage: str, detail: str) -> None:
        self.stage = stage
        """``"TLS"`` or ``"SASL"``: which handshake failed."""
        super().__init__(service="Kafka", address=address, detail=f"the {stage} handshake failed: {detail}",
                         hint=self._HINTS.get(stage))


class KafkaOperationFailed(KafkaSideError):
    """Kafka refused an operation for a reason none of the more specific errors covers."""

    def __init__(self, *, operation: str, code: int, name: str, detail: str, retriable: bool = False) -> None:
        self.operation = operation
        self.code = code
        self.name = name
        self.detail = detail
        self.retriable = retriable
        super().__init__(f"{operation} failed: Kafka error {name}: {detail}")


class TopicNotFound(KafkaSideError):
    def __init__(self, *, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist; create it with `swarmlog topic create {topic}`")


class TopicNotSinglePartition(KafkaSideError):
    """The topic's offsets are only a total order if the topic has exactly one partition."""

    def __init__(self, *, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        super().__init__(
            f"topic {topic!r} has {partitions} partitions; swarmlog needs exactly one, because the "
            f"offsets of a single partition are the swarm's only clock (a total order). "
            f"Create a new topic with `swarmlog topic create` and move the swarm there."
        )


class TopicExists(KafkaSideError):
    """A topic that must be new already exists."""

    def __init__(self, *, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} already exists; choose a new name (a fork is always written into a new "
                         f"topic, so that nothing of another log can mix into it)")


class TopicCreateFailed(KafkaSideError):
    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"cannot create topic {topic!r}: {detail}; check the broker's log and that this "
                         f"principal may create topics (Kafka ACL: CREATE on the topic or the cluster)")


class CopyFailed(KafkaSideError):
    """A log copy did not land at the offsets it must keep; the half-made topic is left for inspection."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"copying into {topic!r} failed: {detail}; delete that topic and fork again (nothing was "
                         f"written to the source)")


class ReadFailed(KafkaSideError):
    """Reading the log failed with an error that retrying will not cure."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"reading {topic!r} failed: {detail}")


class EventNotFound(KafkaSideError):
    """No readable event at an offset (a transaction marker, an aborted write, or past the end)."""

    def __init__(self, *, topic: str, offset: int, log_end: int) -> None:
        self.topic = topic
        self.offset = offset
        self.log_end = log_end
        where = "past the end of the log" if offset >= log_end else "a transaction marker or an aborted write"
        super().__init__(f"{topic!r} has no event at offset {offset} ({where}; the log ends at {log_end}); "
                         f"`swarmlog log` lists the offsets that hold events")


class HistoryIncomplete(KafkaSideError):
    """The topic no longer holds its history from offset 0: replaying it cannot rebuild the run."""

    def __init__(self, *, topic: str, log_start: int, retention: str) -> None:
        self.topic = topic
        self.log_start = log_start
        self.retention = retention
        super().__init__(
            f"topic {topic!r} starts at offset {log_start}, not 0: its first {log_start} offset(s) were deleted "
            f"({retention}). Replay and agents rebuild state from offset 0, so what they would rebuild from here is "
            f"not the run. Keep history forever (`retention.ms=-1`, `retention.bytes=-1`, as `swarmlog topic "
            f"create` makes it); to look at what is left anyway, `swarmlog replay --from-log-start` (its token "
            f"records the real start)")


class HistoryHoles(KafkaSideError):
    """Offsets inside the log hold no event any more, though later events name them as causes: the log
    lost events (compaction keeps only the newest message per key; a topic once compacted keeps its
    holes). What a fold rebuilds from the rest is not the run, so it stops and says where."""

    def __init__(self, *, topic: str, holes: dict[int, int], remedy: str) -> None:
        self.topic = topic
        self.holes = dict(sorted(holes.items()))
        """Offset that holds nothing -> the first event that names it as a cause."""
        shown = ", ".join(f"{o} (named by {by})" for o, by in list(self.holes.items())[:10])
        more = f" and {len(self.holes) - 10} more" if len(self.holes) > 10 else ""
        super().__init__(
            f"topic {topic!r} has lost events: offset(s) {shown}{more} hold nothing, though later events name them "
            f"as causes (causes are checked when written). Compaction or a deletion removed them, so what would be "
            f"rebuilt is not the run. {remedy}; to look at what is left anyway, `swarmlog replay --from-log-start` "
            f"(it reports the holes)")


class AppendFailed(KafkaSideError):
    """The broker did not acknowledge an event."""

    def __init__(self, *, topic: str, detail: str) -> None:
        self.topic = topic
        self.detail = detail
        super().__init__(f"append to {topic!r} failed: {detail}")


class EventFate(NamedTuple):
    """What became of one appended event: written at ``offset``, still ``pending``, or ``error``."""

    event_id: str
    offset: int | None
    """Its offset once the broker acknowledged it."""
    error: str | None = None
    """Why it was not written (the broker refused it); None while it is pending or once written."""

    @property
    def state(self) -> str:
        """``written``, ``pending`` (queued in the producer; it lands once, in order) or ``failed``."""
        return "written" if self.offset is not None else ("failed" if self.error is not None else "pending")


class AppendIncomplete(AppendFailed):
    """Not every event of an append was acknowledged in time; ``fates`` says what became of each.

    Definite, event by event (``fates``, in the order they were appended):

    * ``written``: in the log at ``offset``.
    * ``pending``: still queued in this producer (Kafka did not answer in time). The
      idempotent producer writes it exactly once, in order, when Kafka answers; nothing
      times it out. Append it again with the same ``event_id`` (or flush again) to get its
      offset: it is not sent a second time.
    * ``failed``: the broker refused it (``error``); it is not in the log, and appending it
      again sends it again.
    """

    def __init__(self, *, topic: str, fates: Sequence[EventFate], timeout: float) -> None:
        self.fates = list(fates)
        self.timeout = timeout
        written = sum(f.offset is not None for f in self.fates)
        failed = [f for f in self.fates if f.error is not None]
        pending = len(self.fates) - written - len(failed)
        why = f"; the broker refused {len(failed)} ({failed[0].error})" if failed else ""
        super().__init__(topic=topic, detail=(
            f"{written} of {len(self.fates)} event(s) acknowledged within {timeout}s, {pending} still queued{why}. "
            f"Queued events are written exactly once, in order, when Kafka answers: append them again with the "
            f"same event ids (nothing is sent twice) or flush again; the fate of each is in .fates"))

    @property
    def offsets(self) -> dict[str, int]:
        return {f.event_id: f.offset for f in self.fates if f.offset is not None}

    @property
    def pending(self) -> list[str]:
        return [f.event_id for f in self.fates if f.offset is None and f.error is None]

    @property
    def failed(self) -> dict[str, str]:
        return {f.event_id: f.error for f in self.fates if f.error is not None}


class TransactionAborted(KafkaSideError):
    """An agent's transaction did not commit: none of its outputs became visible.

    Nothing is lost: the inputs of the aborted batch are re-run by the agent's next life.
    """

    def __init__(self, *, agent: str, detail: str) -> None:
        self.agent = agent
        self.detail = detail
        super().__init__(f"agent {agent!r}: its transaction was aborted ({detail}); none of the batch's outputs "
                         f"became visible, and its next start re-runs those steps")


class AgentFenced(TransactionAborted):
    """Another life of the same agent started (same transactional id): this one may write nothing more."""

    def __init__(self, *, agent: str, detail: str) -> None:
        super().__init__(agent=agent, detail=f"fenced by a newer instance of the agent: {detail}")


class GroupHasActiveMembers(KafkaSideError):
    """A consumer group's offsets can only be reset while nobody consumes in it."""

    def __init__(self, *, group: str, members: list[str]) -> None:
        self.group = group
        self.members = members
        super().__init__(
            f"consumer group {group!r} has {len(members)} active member(s) ({', '.join(members)}); "
            f"Kafka only resets the offsets of an empty group. Stop its consumers "
            f"(e.g. `kubectl scale --replicas=0`) and run the replay again."
        )


class GroupResetFailed(KafkaSideError):
    def __init__(self, *, group: str, detail: str) -> None:
        self.group = group
        self.detail = detail
        super().__init__(f"cannot reset consumer group {group!r}: {detail}")


class GroupNotAtStart(KafkaSideError):
    def __init__(self, *, group: str, committed: int, log_start: int) -> None:
        self.group = group
        self.committed = committed
        self.log_start = log_start
        super().__init__(
            f"consumer group {group!r} is at offset {committed}, not at the log start {log_start}; "
            f"reset it (`swarmlog replay --group {group}` without --no-reset, or "
            f"kafka-consumer-groups --reset-offsets --to-earliest --execute)"
        )
