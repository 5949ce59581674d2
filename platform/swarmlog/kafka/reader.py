"""Reading the swarm's log in offset order, in batches.

Every reader is ``read_committed``: the agent runtime writes its outputs in
Kafka transactions, and an aborted transaction's events must never be replayed
or mirrored. With ``read_committed`` the broker serves events only up to the
last stable offset and filters out aborted ones and transaction markers; that
is why the offsets a reader sees have gaps.

A reader either *assigns* partition 0 at an explicit offset (replay from zero,
the sink resuming from its own stored position) or *subscribes* as a member of a
consumer group and starts where the group's committed offset says (replay after
a consumer-group reset).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..errors import ReadFailed, UsageError
from ..log.base import BATCH, ReadPosition
from ..settings import Settings
from .config import consumer as make_consumer
from .config import watermark_consumer
from .errors import translate
from .groups import AdvisoryCommits
from .topic import require_single_partition

__all__ = ["LogReader", "WATERMARK_TIMEOUT_S", "high_watermark", "watermarks"]

_error = Message.error
WATERMARK_TIMEOUT_S = 30.0
"""How long a watermark read may take. It waits for the partition to have a leader: when the
leader dies, the controller elects another only once the dead broker's session has expired
(``broker.session.timeout.ms``, 9 s by default), so the read must outwait that, with margin."""
_WATERMARK_ATTEMPT_S = 5.0
_TO_THE_END_POLL_S = 0.01
"""How long one consume call may wait when reading to the end of the log (not following).

``consume(n, timeout)`` returns a short batch only once ``timeout`` expires, so the last
batch of every read to the end — and the end-of-partition event that says it is the end —
would wait out the whole timeout (a second per replay, per agent start). While events flow,
the local queue (``queued.min.messages``) holds full batches and consume returns at once,
so the short wait costs no throughput (bench/replay.py)."""


class LogReader:
    """Batches of messages of the swarm's topic, in offset order.

    Iterate :meth:`batches` for lists of raw ``confluent_kafka.Message`` objects
    (no error messages among them); decoding is the caller's, so that the sink
    can dead-letter what does not decode and replay can report it.
    """

    def __init__(self, *, settings: Settings, topic: str | None = None, group: str | None = None,
                 consumer_config: Mapping[str, object] | None = None, advisory: bool = False,
                 on_close: Callable[[LogReader], bool] | None = None) -> None:
        """``on_close``: offered the reader when it is closed; True if it keeps it (for :meth:`reopen`),
        and the consumer stays open (:class:`~swarmlog.kafka.KafkaBackend`'s idle readers)."""
        self.settings = settings
        self._on_close = on_close
        self.topic = topic or settings.topic
        self.group = group
        # advisory: the reader reads where it is assigned, and only tells ``group`` where it got,
        # for Kafka's tools (commit_advisory; the sink, whose position lives in Postgres).
        self._advisory = AdvisoryCommits(group=group) if advisory and group is not None else None
        if self._advisory is not None:
            consumer_config = {**(consumer_config or {}), **self._advisory.config()}
        self.consumer = make_consumer(settings, group=group, extra=consumer_config)
        try:
            require_single_partition(settings, self.topic, client=self.consumer)
        except BaseException:
            self.consumer.close()
            raise
        self.position = ReadPosition(end_offset=0, reached_end_of_log=False)

    def reopen(self, topic: str, *, checked: bool = False) -> None:
        """Make a kept reader (``on_close``) a fresh reader of ``topic``: nothing assigned, at offset 0.

        The consumer, and its connection to the cluster, are kept; the topic is checked as a new
        reader's is, unless ``checked`` (its owner checked this topic already)."""
        self.topic = topic
        if not checked:
            require_single_partition(self.settings, topic, client=self.consumer)
        self.position = ReadPosition(end_offset=0, reached_end_of_log=False)

    def assign(self, start: int) -> None:
        """Read from ``start`` (an offset) without joining a group."""
        self.consumer.assign([TopicPartition(self.topic, 0, start if start > 0 else OFFSET_BEGINNING)])
        self.position.end_offset = start

    def subscribe(self) -> None:
        """Join the consumer group and read from its committed offset."""
        if self.group is None:
            raise UsageError("LogReader.subscribe() needs a consumer group: LogReader(group=...)")
        self.consumer.subscribe([self.topic])

    def batches(self, *, end: int | None = None, follow: bool = False,
                timeout: float = 1.0, batch_size: int = BATCH) -> Iterator[list[Any]]:
        """Yield batches until the end of the log (or ``end``, exclusive).

        ``follow=True`` keeps reading past the end of the log (the sink);
        an idle poll then yields an empty batch so the caller can do its
        housekeeping.
        """
        consume = self.consumer.consume
        pos = self.position
        wait = timeout if follow else min(timeout, _TO_THE_END_POLL_S)
        at = [TopicPartition(self.topic, 0)]
        asks = end is not None or not follow  # a read that ends: see _stopped
        while True:
            if end is not None and pos.end_offset >= end:
                return
            try:
                msgs: list[Any] = consume(batch_size, wait)
            except KafkaException as exc:
                raise translate(exc, operation=f"reading {self.topic!r}", bootstrap=self.settings.bootstrap_servers,
                                topic=self.topic) from None
            if not msgs:
                if asks and self._stopped(at, end, follow):
                    return
                if follow:
                    yield []
                continue
            # The common batch — only messages, all before ``end`` — goes out as it came, with
            # no per-message Python work (map over the C method is several times cheaper
            # than the loop below, which handles end-of-log markers, errors and ``end``).
            last = msgs[-1]
            if not any(map(_error, msgs)) and (end is None or last.offset() < end):
                pos.end_offset = last.offset() + 1
                pos.reached_end_of_log = False
                yield msgs
                if asks and self._stopped(at, end, follow):
                    return
                continue
            batch: list[Any] = []
            hit_end = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pos.end_offset = max(pos.end_offset, m.offset())
                        pos.reached_end_of_log = True
                        hit_end = not follow
                        continue
                    if err.fatal() or not err.retriable():
                        raise ReadFailed(topic=self.topic, detail=err.str())
                    continue
                off = m.offset()
                if end is not None and off >= end:
                    pos.end_offset = end
                    hit_end = True
                    break
                batch.append(m)
                pos.end_offset = off + 1
                pos.reached_end_of_log = False
            if batch:
                yield batch
            if hit_end:
                if end is not None and pos.end_offset > end:
                    pos.end_offset = end
                return

    def _stopped(self, at: list[TopicPartition], end: int | None, follow: bool) -> bool:
        """Whether a read that ends has ended (at ``end``, or at the end of the log unless following);
        if so, :attr:`position` says where.

        Why it asks instead of waiting for the end-of-partition event: librdkafka raises that
        event only on a *further* fetch, which the broker answers after ``fetch.wait.max.ms``
        with nothing — a fixed wait at the end of every replay, fold and index pass. And a log
        the runtime wrote ends with a transaction's commit marker, which a read_committed reader
        never receives, so the last message it gets is short of the end. But the consumer's
        position (the next offset it will hand out) moves past markers and aborted records as
        librdkafka skips them, and every fetch response carries the high watermark, which the
        client caches: position >= high watermark is the end of the log, known without waiting.
        While a transaction is open the high watermark is past what read_committed may read (the
        last stable offset): the position stays short of it, and the end-of-partition event (at
        the last stable offset) ends the read as before. Both are local calls, no request to the
        broker, made once per batch (test_a_read_to_the_end_stops_there_without_a_fetch_wait).
        """
        try:
            position = int(self.consumer.position(at)[0].offset)
            if end is not None and position >= end:
                self.position.end_offset = end
                return True
            if not follow:
                high = int(self.consumer.get_watermark_offsets(at[0], cached=True)[1])
                if 0 <= high <= position:
                    self.position.end_offset = max(self.position.end_offset, position)
                    self.position.reached_end_of_log = True
                    return True
        except KafkaException:
            pass  # no position yet: the next consume says more
        return False

    def commit(self, next_offset: int) -> None:
        """Commit ``next_offset`` for the group (synchronously)."""
        try:
            self.consumer.commit(offsets=[TopicPartition(self.topic, 0, next_offset)], asynchronous=False)
        except KafkaException as exc:
            raise translate(exc, operation=f"committing group {self.group!r}",
                            bootstrap=self.settings.bootstrap_servers) from None

    def commit_advisory(self, next_offset: int) -> None:
        """Tell the group (``advisory=True``) ``next_offset`` asynchronously; a failure is only logged."""
        if self._advisory is None:
            raise UsageError("LogReader.commit_advisory() needs LogReader(group=..., advisory=True)")
        self._advisory.commit(self.consumer, {self.topic: next_offset})

    def wake(self) -> None:
        """Nothing: a following read waits at most its ``timeout`` (the client's: 0.2 s), and the consumer is
        not to be touched from another thread while it polls."""

    def close(self) -> None:
        if self._on_close is not None:
            try:
                self.consumer.unassign()  # drops what was fetched: a reopened reader starts clean
            except KafkaException:
                pass
            else:
                if self._on_close(self):
                    return
        self.consumer.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def watermarks(settings: Settings, topic: str, *, consumer: Consumer | None = None,
               timeout: float = WATERMARK_TIMEOUT_S) -> tuple[int, int]:
    """(log start, high watermark) of the topic's partition, asked of its leader, through a leader change.

    The high watermark is the end of the log *including* open transactions, not what a
    read_committed reader can read (that stops at the last stable offset). An open
    transaction pins the last stable offset, and a swarm blocked behind one (a killed
    agent's, until its restart aborts it) must not look finished.

    librdkafka sends the request to the leader its metadata names and, when that broker
    is dead, waits for it until the timeout instead of looking again: a long-lived
    consumer would never see the new leader. So each attempt is short, and a failed one
    refreshes the topic's metadata before the next (tests/faults/test_leader_faults.py).
    """
    own = consumer is None
    if consumer is None:
        consumer = watermark_consumer(settings)
    deadline = time.monotonic() + timeout
    partition = TopicPartition(topic, 0)
    try:
        while True:
            attempt = max(0.1, min(_WATERMARK_ATTEMPT_S, deadline - time.monotonic()))
            try:
                low, high = consumer.get_watermark_offsets(partition, timeout=attempt, cached=False)
                return int(low), int(high)
            except KafkaException as exc:
                # Not only the errors librdkafka calls retriable pass: a leader change also shows as
                # a timeout, or as _DESTROY_BROKER when the old leader's handle is decommissioned.
                if exc.args[0].fatal() or time.monotonic() >= deadline:
                    raise translate(exc, operation=f"reading the watermarks of {topic!r}",
                                    bootstrap=settings.bootstrap_servers, topic=topic) from None
            try:
                consumer.list_topics(topic=topic, timeout=max(0.1, min(_WATERMARK_ATTEMPT_S,
                                                                       deadline - time.monotonic())))
            except KafkaException:
                pass  # the next attempt says what is wrong
    finally:
        if own:
            consumer.close()


def high_watermark(settings: Settings, topic: str, *, consumer: Consumer | None = None) -> int:
    """The end of the log including open transactions (see :func:`watermarks`)."""
    return watermarks(settings, topic, consumer=consumer)[1]
